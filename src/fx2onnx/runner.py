"""The runner shared by the generated zoos (scenarios, models): tasks in worker processes, a results cache.

* :func:`run_tasks` runs one function over a list of tasks, each in a worker
  process with a timeout: a task that hangs, crashes its process or exhausts
  its memory becomes a failed row, the run goes on; a worker whose task ran out of
  memory is replaced before the next task.
* :func:`sources_hash` keys a results cache on the sources of fx2onnx and the
  versions of the packages the results depend on.

.. code-block:: python

    from fx2onnx.runner import run_tasks

    rows = run_tasks(tasks, run_one, failed_row, workers=2, timeout=300)
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import multiprocessing
import os
import re
import sys
import time
from importlib import metadata
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

#: packages whose versions key the results caches
KEY_PACKAGES = ("torch", "transformers", "onnx", "onnxruntime", "onnxscript", "onnx-ir")


def sources_hash(extra: Any = None, skip: Iterable[str] = ()) -> str:
    """A hash of the ``.py`` files of fx2onnx (but ``skip``, paths relative to the package),
    the versions of :data:`KEY_PACKAGES`, and ``extra`` (the options)."""
    package = Path(__file__).resolve().parent
    skipped = set(skip)
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative in skipped:
            continue
        digest.update(relative.encode())
        digest.update(path.read_bytes())
    for name in KEY_PACKAGES:
        try:
            digest.update(f"{name}={metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name}=none".encode())
    digest.update(repr(extra).encode())
    return digest.hexdigest()


_TORCHLIB_REGISTRIES: dict[Any, Any] = {}


@contextlib.contextmanager
def reuse_torchlib_registry():
    """Builds the registry of torchlib functions of ``torch.onnx.export`` once per process.

    ``torch.onnx.export(dynamo=True)`` rebuilds it at every call, which is most of its
    time on a small model. Inside this context the first registry built is reused (the
    zoo passes no custom translation table, so nothing modifies it); the export itself
    is unchanged. The original method is restored on exit.
    """
    from torch.onnx._internal.exporter import _registration

    registry_class = _registration.ONNXRegistry
    original = registry_class.__dict__["from_torchlib"]

    def from_torchlib(cls, *args, **kwargs):
        key = (cls, args, tuple(sorted(kwargs.items())))
        if key not in _TORCHLIB_REGISTRIES:
            _TORCHLIB_REGISTRIES[key] = original.__func__(cls, *args, **kwargs)
        return _TORCHLIB_REGISTRIES[key]

    registry_class.from_torchlib = classmethod(from_torchlib)
    try:
        yield
    finally:
        registry_class.from_torchlib = original


#: exception names raised when torch.export.export fails (the capture step)
CAPTURE_ERRORS = ("ExportError", "TorchExportError")


@contextlib.contextmanager
def label_export_step(capture_step: str):
    """Sets ``exc.step`` on an exception raised inside: ``capture_step`` when
    :func:`torch.export.export` failed, ``"conversion"`` otherwise; then re-raises it."""
    try:
        yield
    except Exception as e:
        e.step = capture_step if type(e).__name__ in CAPTURE_ERRORS else "conversion"  # type: ignore[attr-defined]
        raise


def dynamo_export(model, args: tuple, kwargs: dict | None, dynamic_shapes: Any, translations: dict | None = None):
    """``torch.onnx.export(dynamo=True)``, its model proto. Without a custom translation table
    the torchlib registry is built once per process (:func:`reuse_torchlib_registry`);
    a table is registered into the registry, so a new one is built then."""
    import torch

    reuse = contextlib.nullcontext() if translations else reuse_torchlib_registry()
    with reuse:
        program = torch.onnx.export(
            model, args, kwargs=kwargs, dynamic_shapes=dynamic_shapes, dynamo=True,
            verbose=False, custom_translation_table=translations or None,
        )
    return program.model_proto


def _limit_memory(gigabytes: float | None) -> None:
    """Caps the address space of this process ``gigabytes`` above what it uses now."""
    if not gigabytes:
        return
    import resource

    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    current = pages * os.sysconf("SC_PAGE_SIZE")
    limit = current + int(gigabytes * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


#: an error of a row matching this leaves its worker suspect (oneDNN fails with "could not create a
#: primitive" at every later eager run after a MemoryError): the worker is replaced after that row
OUT_OF_MEMORY = re.compile(r"MemoryError|out of memory|bad_alloc|can't allocate memory|Cannot allocate memory"
                           r"|could not create a primitive|BFCArena::AllocateRawInternal", re.I)


def out_of_memory(row: Any) -> bool:
    """True when the ``error`` of a row says the process ran out of memory (see :data:`OUT_OF_MEMORY`)."""
    error = row.get("error") if isinstance(row, dict) else None
    return isinstance(error, str) and OUT_OF_MEMORY.search(error) is not None


def _worker_main(conn, run_one: Callable[[Any], dict], failed_row: Callable, memory_gb: float | None) -> None:
    """A worker process: runs the tasks it receives until it receives None; sends ``(row, replace)``,
    ``replace`` when the task ran out of memory (the process may be left broken)."""
    import torch

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    torch.set_num_threads(1)
    with contextlib.suppress(OSError, ValueError):
        _limit_memory(memory_gb)
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent died
            return
        if task is None:
            return
        begin = time.perf_counter()
        replace = False
        try:
            row = run_one(task)
        except MemoryError:
            row = failed_row(task, "crash", f"MemoryError: the task needs more than {memory_gb} GB",
                             time.perf_counter() - begin)
            replace = True
        except Exception as e:  # noqa: BLE001 - a bug in the runner itself, reported as a row
            row = failed_row(task, "crash", first_line(e), time.perf_counter() - begin)
        conn.send((row, replace or out_of_memory(row)))


def first_line(exc: BaseException, limit: int = 300) -> str:
    r"""``ExceptionType: first non-empty line of the message``, truncated.

    When the exception was raised from another one (``raise ... from cause``), the
    cause says more (torch.onnx.export wraps every error in a generic one):
    ``ExceptionType <- CauseType: first line of the cause``. A first line announcing
    a list (ending with ``:``) is followed by the list's first item.

    >>> first_line(ValueError("Found the following conflicts:\n- dim 1 is static"))
    'ValueError: Found the following conflicts: - dim 1 is static'
    """
    import re

    cause = exc.__cause__
    if cause is not None and cause is not exc:
        return f"{type(exc).__name__} <- {first_line(cause, limit)}"[:limit]
    message = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    head = f"{lines[0]} {lines[1]}" if len(lines) > 1 and lines[0].endswith(":") else lines[0] if lines else ""
    text = f"{type(exc).__name__}: {head}" if head else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Worker:
    """A worker process with the task it runs and since when."""

    def __init__(self, context, target_args: tuple):
        self.context = context
        self.target_args = target_args
        self.task = None
        self.started = 0.0
        self.done = 0
        self._start()

    def _start(self) -> None:
        self.conn, child = self.context.Pipe()
        self.process = self.context.Process(target=_worker_main, args=(child, *self.target_args), daemon=True)
        self.process.start()
        child.close()
        self.done = 0

    def submit(self, indexed_task) -> None:
        self.task, self.started = indexed_task, time.perf_counter()
        self.conn.send(indexed_task[1])

    def restart(self) -> None:
        self.stop(kill=True)
        self._start()

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            with contextlib.suppress(OSError):
                self.conn.send(None)
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def _run_in_workers(tasks, run_one, failed_row, workers, timeout, bar, max_tasks_per_worker, mp_context,
                    memory_gb, on_row):
    method = mp_context or ("fork" if sys.platform.startswith("linux") else "spawn")
    context = multiprocessing.get_context(method)
    pending = collections.deque(enumerate(tasks))
    results: dict[int, dict[str, Any]] = {}
    pool = [_Worker(context, (run_one, failed_row, memory_gb)) for _ in range(min(workers, len(tasks)))]
    try:
        while pending or any(w.task is not None for w in pool):
            for w in pool:
                if w.task is None and pending:
                    if w.done >= max_tasks_per_worker:
                        w.restart()  # bounds the memory a long-lived worker accumulates
                    w.submit(pending.popleft())
            busy = [w for w in pool if w.task is not None]
            ready = wait([w.conn for w in busy], timeout=0.5)
            for w in busy:
                index, task = w.task
                elapsed = time.perf_counter() - w.started
                if w.conn in ready:
                    try:
                        results[index], replace = w.conn.recv()
                        w.done += 1
                        if replace:  # a fresh process for the next task
                            w.restart()
                    except (EOFError, OSError):
                        w.process.join(5)
                        code = w.process.exitcode
                        results[index] = failed_row(task, "crash", f"the worker process died (exit code {code})", elapsed)
                        w.restart()
                elif elapsed > timeout:
                    results[index] = failed_row(task, "timeout", f"no result after {timeout:g} s, the task was killed", elapsed)
                    w.restart()
                else:
                    continue
                w.task = None
                if on_row is not None:
                    on_row(results[index])
                if bar is not None:
                    bar.update(1)
    finally:
        for w in pool:
            w.stop(kill=w.task is not None)
    return [results[i] for i in range(len(tasks))]


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
) -> list[dict[str, Any]]:
    """Runs ``run_one(task)`` for every task and returns the rows in the order of ``tasks``.

    :param tasks: picklable task descriptions
    :param run_one: returns the row of one task (a module-level function under ``spawn``)
    :param failed_row: ``failed_row(task, step, error, elapsed)``: the row of a task
        which timed out (``step="timeout"``) or crashed its worker (``step="crash"``)
    :param workers: number of worker processes; 0 runs every task in this process
        (no protection against hangs or crashes then)
    :param timeout: seconds after which a task is killed
    :param progress: show a tqdm progress bar (default: when stderr is a terminal)
    :param max_tasks_per_worker: a worker is replaced after that many tasks
    :param mp_context: ``fork`` or ``spawn`` (default: fork on Linux)
    :param memory_gb: caps the memory a worker may add (a task beyond it fails
        with a MemoryError instead of starving the machine)
    :param on_row: called with every row as soon as it is known (to save partial results)
    :param description: label of the progress bar
    """
    if progress is None:
        progress = sys.stderr.isatty()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(tasks), desc=description)
    try:
        if workers <= 0:
            rows = []
            for task in tasks:
                with contextlib.redirect_stdout(io.StringIO()):
                    rows.append(run_one(task))
                if on_row is not None:
                    on_row(rows[-1])
                if bar is not None:
                    bar.update(1)
            return rows
        return _run_in_workers(tasks, run_one, failed_row, workers, timeout, bar, max_tasks_per_worker,
                               mp_context, memory_gb, on_row)
    finally:
        if bar is not None:
            bar.close()
