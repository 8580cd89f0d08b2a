"""The sweeps on dask distributed: a local cluster by default, a running one at an address.

The engine places the tasks on its workers, balances them (work stealing), gives back the
rows and reschedules the tasks of a worker (a machine) it lost. It does not kill a task that
hangs, nor survive a task that ends its process: every task runs in a :class:`Sandbox
<fx2onnx.runner.sandbox.Sandbox>` which the worker holds (one per worker thread), so the task
returning to the engine never hangs, never crashes, and its row says what happened.

* ``address=None`` (and ``FX2ONNX_CLUSTER`` unset or ``local``): a local cluster is started for
  the sweep and stopped after it: a scheduler and ``workers`` workers, threads of the sweep's
  process, each relaying its tasks to its sandbox process (forked: warm imports).
* ``address="tcp://host:8786"``: the scheduler of a running cluster; its workers run the
  tasks (``workers`` is then theirs: ``dask worker ADDRESS --nworkers N --nthreads 1``).
  The workers must run the same sources and versions (:func:`check_sources`), so a row
  computed anywhere is keyed by the same :func:`sources_hash <fx2onnx.runner.sources_hash>`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import multiprocessing
import os
import threading
import uuid
from typing import Any, Callable, Iterator, Sequence

from .export import first_line, sources_hash
from .sandbox import FailedRow, RunOne, Sandbox

#: the environment variable giving the address of the cluster (``local``, ``pool`` or ``tcp://host:port``)
CLUSTER_ENV = "FX2ONNX_CLUSTER"

#: the sandboxes of this worker process: thread id -> (key, sandbox)
_SANDBOXES: dict[int, tuple[str, Sandbox]] = {}
_LOCK = threading.Lock()


def cluster_address(address: str | None = None) -> str:
    """The address the sweeps go to: ``address``, else :data:`CLUSTER_ENV`, else ``local``."""
    return address or os.environ.get(CLUSTER_ENV) or "local"


def _sandbox_key(*parts: Any) -> str:
    import cloudpickle

    return hashlib.sha256(cloudpickle.dumps(parts)).hexdigest()


def run_on_worker(run_one: RunOne, failed_row: FailedRow, task: Any, timeout: float, memory_gb: float | None,
                  mp_context: str | None, max_tasks: int, sweep: str = "") -> dict[str, Any]:
    """Runs on a worker of the cluster: ``task`` in the sandbox of this worker thread, its row.

    The sandbox is kept between the tasks of one sweep (the imports and caches of its process
    stay warm) and replaced when the sweep, the functions or the options change: a sandbox
    forked for an earlier sweep holds the code of that time (a function patched since, a
    module reloaded), and a thread of a later local cluster may get the same identifier.
    """
    process = multiprocessing.current_process()
    if process.daemon:  # a worker started by a nanny is daemonic, and a daemonic process has no child
        process.daemon = False
    key = _sandbox_key(run_one, failed_row, memory_gb, mp_context, max_tasks, sweep)
    ident = threading.get_ident()
    with _LOCK:
        current = _SANDBOXES.get(ident)
    if current is None or current[0] != key:
        if current is not None:
            current[1].stop()
        current = key, Sandbox(run_one, failed_row, memory_gb, mp_context, max_tasks)
        with _LOCK:
            _SANDBOXES[ident] = current
    return current[1].run(task, timeout)


def close_sandboxes(kill: bool = False) -> int:
    """Runs on a worker after a sweep: stops its idle sandboxes; returns how many.
    With ``kill=True`` (a sweep interrupted), the busy ones are killed too: their tasks end as crashes."""
    with _LOCK:
        if kill:
            busy = [s for _, s in _SANDBOXES.values() if s.busy]
            for s in busy:
                if s.process is not None:
                    s.process.kill()  # run() sees the process died and returns at once
        idle = [ident for ident, (_, s) in _SANDBOXES.items() if not s.busy]
        sandboxes = [_SANDBOXES.pop(ident)[1] for ident in idle]
    for s in sandboxes:
        s.stop()
    return len(sandboxes)


def check_sources(client: Any) -> None:
    """Raises when a worker of the cluster runs other sources of fx2onnx or other versions than
    this process (its rows would be cached under a key they do not match)."""

    mine = sources_hash()
    theirs = client.run(sources_hash)
    others = sorted(worker for worker, key in theirs.items() if key != mine)
    if others:
        raise RuntimeError(f"{len(others)} worker(s) of the cluster run other sources of fx2onnx or other "
                           f"versions than this process: {', '.join(others)}; update them (git pull, make venv).")


@contextlib.contextmanager
def _quiet_logs(level: int = logging.ERROR) -> Iterator[None]:
    """dask's loggers at ``level`` (a program logging INFO, the documentation build, would print
    every worker started and stopped)."""
    logger = logging.getLogger("distributed")
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


@contextlib.contextmanager
def connect(address: str = "local", workers: int = 2) -> Iterator[Any]:
    """A ``distributed.Client`` on the cluster at ``address``, or on a local cluster of ``workers``
    workers (threads of this process, one task at a time each) started here and stopped on exit."""
    import dask
    from distributed import Client, LocalCluster

    if address != "local":
        client = Client(address, timeout=30)
        try:
            check_sources(client)
            yield client
        finally:
            client.close()
        return
    # the workers are threads of this process: the sandboxes they fork inherit its imports (a worker
    # process would import torch and the zoo again, seconds per worker), and the sandboxes isolate the tasks
    # no statistical profiler sampling the worker threads every 10 ms, the event loop's blocking check every
    # second, not every 20 ms, and the system monitor every 5 s: an idle cluster of 2 workers took 6.6 % of a
    # core, now 0.8 %, CPU the tasks beside it lose (bench/bench_runner.py, design/runner.rst)
    with dask.config.set({"distributed.worker.daemon": False, "distributed.worker.profile.enabled": False,
                          "distributed.admin.tick.interval": "1s", "distributed.admin.system-monitor.interval": "5s"}):
        # the scheduler's HTTP server on a free port of the loopback: two sweeps side by side do not collide
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=False,
                               dashboard_address="127.0.0.1:0", memory_limit=0, silence_logs=logging.ERROR)
    try:
        with Client(cluster) as client:
            yield client
    finally:
        cluster.close()


def run_on_cluster(
    tasks: Sequence[Any], run_one: RunOne, failed_row: FailedRow, workers: int, timeout: float,
    on_row: Callable[[int, dict[str, Any]], None], address: str = "local", max_tasks_per_worker: int = 400,
    mp_context: str | None = None, memory_gb: float | None = None,
) -> None:
    """Runs every task on the cluster; ``on_row(index, row)`` receives each row as soon as it is known.

    A task whose worker was lost as many times as the scheduler allows (``KilledWorker``)
    becomes a failed row (step ``crash``) too.
    """
    from distributed import as_completed

    with _quiet_logs(), connect(address, max(1, min(workers, len(tasks)))) as client:
        sweep = uuid.uuid4().hex[:8]
        futures = {
            client.submit(run_on_worker, run_one, failed_row, task, timeout, memory_gb, mp_context,
                          max_tasks_per_worker, sweep, key=f"row-{sweep}-{index}", pure=False): index
            for index, task in enumerate(tasks)
        }
        interrupted = True
        try:
            for future in as_completed(futures):
                index = futures[future]
                try:
                    row = future.result()
                except Exception as e:  # noqa: BLE001 - the engine lost the worker running it
                    row = failed_row(tasks[index], "crash", f"the cluster lost its worker: {first_line(e)}", 0.0)
                on_row(index, row)
            interrupted = False
        finally:
            client.cancel(list(futures))
            with contextlib.suppress(Exception):  # an interrupted sweep (Ctrl-C) leaves no task running
                client.run(close_sandboxes, kill=interrupted)
