"""The runner shared by the sweeps (scenarios, models, timm, diffusers, tasks): tasks on a cluster, a results cache.

* :func:`run_tasks` runs one function over a list of tasks on dask distributed: a
  local cluster started and stopped by the sweep (the default, nothing to set up), or a
  running cluster given by ``address`` or the environment variable ``FX2ONNX_CLUSTER``
  (``python -m fx2onnx models --address tcp://host:8786``). Every task runs in a sandbox
  process of its worker with a timeout and a memory cap: a task that hangs, crashes its
  process or exhausts its memory becomes a failed row, the sweep goes on; the process is
  replaced. Rows come back in the order of the tasks. See :mod:`fx2onnx.runner.cluster`.
* :func:`sources_hash` keys a results cache on the sources of fx2onnx and the
  versions of the packages the results depend on.

.. code-block:: python

    from fx2onnx.runner import run_tasks

    rows = run_tasks(tasks, run_one, failed_row, workers=2, timeout=300)
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Any, Callable, Sequence

from .cluster import CLUSTER_ENV, cluster_address
from .export import (
    CAPTURE_ERRORS,
    KEY_PACKAGES,
    dynamo_export,
    first_line,
    label_export_step,
    reuse_torchlib_registry,
    sources_hash,
)
from .sandbox import OUT_OF_MEMORY, Sandbox, out_of_memory

__all__ = [
    "CAPTURE_ERRORS", "CLUSTER_ENV", "KEY_PACKAGES", "OUT_OF_MEMORY", "Progress", "Sandbox", "cluster_address",
    "dynamo_export", "first_line", "label_export_step", "out_of_memory", "reuse_torchlib_registry", "run_tasks",
    "sources_hash", "sweep_context",
]


def sweep_context(command: str) -> dict[str, Any]:
    """What a sweep's stored JSON says of its run: ``date`` (UTC), ``machine``, ``versions`` (python, torch,
    transformers, onnxruntime) and the ``command`` which ran it."""
    import datetime
    import os
    import platform

    import onnxruntime
    import torch
    import transformers

    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other jobs)",
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__},
            "command": command}


def failed(row: Any) -> bool:
    """Whether a row is a failure: ``success`` False, or (rows without it) an ``error``."""
    if not isinstance(row, dict):
        return True
    if "success" in row:
        return not row["success"]
    return bool(row.get("error"))


class Progress:
    """The progress bar of a sweep: rows done, failed and left, and (tqdm's) estimate of the time left.

    :param total: the number of rows
    :param description: the label of the bar
    :param show: draw the bar (otherwise only count)
    """

    def __init__(self, total: int, description: str = "tasks", show: bool = True):
        self.total, self.done, self.failed = total, 0, 0
        self.bar = None
        if show:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=description, unit="row")

    def update(self, row: Any) -> None:
        """Counts one more row."""
        self.done += 1
        self.failed += failed(row)
        if self.bar is not None:
            self.bar.set_postfix_str(f"failed {self.failed}, left {self.total - self.done}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        """Closes the bar."""
        if self.bar is not None:
            self.bar.close()


def run_tasks(
    tasks: Sequence[Any],
    run_one: Callable[[Any], dict[str, Any]],
    failed_row: Callable[[Any, str, str, float], dict[str, Any]],
    workers: int = 2,
    timeout: float = 180.0,
    progress: bool | None = None,
    max_tasks_per_worker: int = 400,
    mp_context: str | None = None,
    memory_gb: float | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    description: str = "tasks",
    address: str | None = None,
) -> list[dict[str, Any]]:
    """Runs ``run_one(task)`` for every task and returns the rows in the order of ``tasks``.

    :param tasks: picklable task descriptions
    :param run_one: returns the row of one task (a module-level function: the workers import it)
    :param failed_row: ``failed_row(task, step, error, elapsed)``: the row of a task
        which timed out (``step="timeout"``) or crashed its process (``step="crash"``)
    :param workers: number of workers of the local cluster (each runs one task at a time in
        its sandbox process); 0 runs every task in this process (no protection against hangs
        or crashes then); a running cluster (``address``) has its own
    :param timeout: seconds after which a task is killed
    :param progress: show a progress bar (default: when stderr is a terminal)
    :param max_tasks_per_worker: a task's process is replaced after that many tasks
    :param mp_context: how a worker starts the process of the tasks, ``fork`` or ``spawn``
        (default: fork on Linux)
    :param memory_gb: caps the memory a task's process may add (a task beyond it fails
        with a MemoryError instead of starving the machine)
    :param on_row: called with every row as soon as it is known (to save partial results)
    :param description: label of the progress bar
    :param address: where the tasks run: ``local`` (a local cluster of ``workers`` workers,
        started and stopped here), ``tcp://host:port`` (the scheduler of a running dask
        cluster) or ``pool`` (the local pool, no engine); default: the environment variable
        ``FX2ONNX_CLUSTER``, else ``local``
    """
    if progress is None:
        progress = sys.stderr.isatty()
    bar = Progress(len(tasks), description, show=bool(progress))
    results: dict[int, dict[str, Any]] = {}

    def collect(index: int, row: dict[str, Any]) -> None:
        results[index] = row
        if on_row is not None:
            on_row(row)
        bar.update(row)

    try:
        if workers <= 0:
            for index, task in enumerate(tasks):
                with contextlib.redirect_stdout(io.StringIO()):
                    row = run_one(task)
                collect(index, row)
            return [results[i] for i in range(len(tasks))]
        if not tasks:
            return []
        where = cluster_address(address)
        options = dict(max_tasks_per_worker=max_tasks_per_worker, mp_context=mp_context, memory_gb=memory_gb)
        try:
            import distributed  # noqa: F401
        except ImportError:
            if where != "local":
                raise
            where = "pool"
        if where == "pool":
            from .pool import run_in_pool

            run_in_pool(tasks, run_one, failed_row, workers, timeout, collect, **options)
        else:
            from .cluster import run_on_cluster

            run_on_cluster(tasks, run_one, failed_row, workers, timeout, collect, address=where, **options)
        return [results[i] for i in range(len(tasks))]
    finally:
        bar.close()
