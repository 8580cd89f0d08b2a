"""The process a task runs in: a hang, a crash or an out-of-memory of a task becomes its row.

A :class:`Sandbox` is one child process, forked (or spawned) by whoever runs the
tasks, the local pool (:mod:`fx2onnx.runner.pool`) or a worker of the cluster
(:mod:`fx2onnx.runner.cluster`). It runs the tasks it receives one after the other,
under a memory cap, with its output silenced; the parent kills it when a task runs
past its timeout, notices when it died (``os._exit``, a segmentation fault, the
kernel's out-of-memory killer), and starts a fresh one for the next task. After a
task which ran out of memory the process is replaced too (oneDNN stays broken after
a ``MemoryError``), and after ``max_tasks`` tasks (memory a long-lived process keeps); a
task which ran out of memory in a process that had run others first runs once more in the
fresh one (what the process kept may have been the cause: a sweep of the tasks page's
``generate`` entries failed its last rows so, which pass alone).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import sys
import time
from multiprocessing.connection import wait
from typing import Any, Callable

#: an error of a row matching this leaves its worker suspect (oneDNN fails with "could not create a
#: primitive" at every later eager run after a MemoryError): the worker is replaced after that row
OUT_OF_MEMORY = re.compile(r"MemoryError|out of memory|bad_alloc|can't allocate memory|Cannot allocate memory"
                           r"|could not create a primitive|BFCArena::AllocateRawInternal", re.I)

#: ``run_one(task) -> row``
RunOne = Callable[[Any], dict]
#: ``failed_row(task, step, error, elapsed) -> row``
FailedRow = Callable[[Any, str, str, float], dict]


def out_of_memory(row: Any) -> bool:
    """True when the ``error`` of a row, or of an entry of it (the tasks page's ``generate``), says the
    process ran out of memory (see :data:`OUT_OF_MEMORY`)."""
    if not isinstance(row, dict):
        return False
    errors = [row.get("error")] + [v.get("error") for v in row.values() if isinstance(v, dict)]
    return any(isinstance(e, str) and OUT_OF_MEMORY.search(e) is not None for e in errors)


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


def _sandbox_main(conn, run_one: RunOne, failed_row: FailedRow, memory_gb: float | None) -> None:
    """The child process: runs the tasks it receives until it receives None; sends ``(row, replace)``,
    ``replace`` when the task ran out of memory (the process may be left broken)."""
    import faulthandler
    import gc

    # the parent's callbacks (dask's worker times every collection) would slow every task down
    gc.callbacks.clear()
    # the objects inherited from the parent (170,000 to 205,000 with torch, the zoo and dask imported) are
    # never garbage: out of the collections; exports make many short-lived objects (sympy expressions):
    # a collection every 10,000 allocations, not 700. Measured on 8 scenario exports forked from a parent
    # running a local cluster: 1,938 -> 61 collections, 10-18 % less CPU (bench/bench_runner.py)
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    if faulthandler.is_enabled():  # a crash is the row's error, not a traceback on the parent's terminal
        faulthandler.disable()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    if "torch" in sys.modules:  # imported by the parent (fork): one thread per task
        sys.modules["torch"].set_num_threads(1)
    else:  # torch reads it when a task imports it; a task without torch does not pay for its import
        os.environ["OMP_NUM_THREADS"] = "1"
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
            from .export import first_line

            row = failed_row(task, "crash", first_line(e), time.perf_counter() - begin)
        conn.send((row, replace or out_of_memory(row)))


def default_context() -> str:
    """``fork`` on Linux (the child inherits the imports of its parent), ``spawn`` elsewhere."""
    return "fork" if sys.platform.startswith("linux") else "spawn"


class Sandbox:
    """A child process running tasks one at a time, replaced after a hang, a crash or an out-of-memory.

    :param run_one: returns the row of a task
    :param failed_row: the row of a task which timed out or crashed its process
    :param memory_gb: memory the process may add to what it holds when it starts
    :param mp_context: ``fork`` or ``spawn`` (default: :func:`default_context`)
    :param max_tasks: the process is replaced after that many tasks

    :meth:`run` runs one task and waits for its row (a worker of the cluster);
    :meth:`submit` and :meth:`collect` let one thread drive several sandboxes (the local pool).
    """

    def __init__(self, run_one: RunOne, failed_row: FailedRow, memory_gb: float | None = None,
                 mp_context: str | None = None, max_tasks: int = 400):
        self.run_one, self.failed_row, self.memory_gb = run_one, failed_row, memory_gb
        self.max_tasks = max_tasks
        self.context = multiprocessing.get_context(mp_context or default_context())
        self.task: Any = None
        self.started = 0.0
        self.done = 0
        #: the task now running is the second try of one which ran out of memory in a used process
        self.retry = False
        self.process: Any = None
        self.conn: Any = None

    def _start(self) -> None:
        conn, child = self.context.Pipe()
        process = self.context.Process(
            target=_sandbox_main, args=(child, self.run_one, self.failed_row, self.memory_gb), daemon=True)
        try:
            process.start()  # spawn: the functions pickled; fork: the memory of the process
        except BaseException:
            conn.close()
            raise
        finally:
            child.close()
        self.process, self.conn = process, conn
        self.done = 0

    @property
    def busy(self) -> bool:
        """Whether a task was submitted and its row not collected yet."""
        return self.task is not None

    def submit(self, task: Any) -> dict[str, Any] | None:
        """Sends ``task`` to the process, started (or replaced after ``max_tasks``) first; returns
        the task's failed row (step ``crash``) when no process could be started for it (the next
        task tries again)."""
        try:
            if self.process is None:
                self._start()
            elif self.done >= self.max_tasks:
                self.restart()  # bounds the memory a long-lived process accumulates
        except Exception as e:  # noqa: BLE001 - an unpicklable function (spawn), no memory left to fork
            self.process = self.conn = None
            first = (str(e).strip().splitlines() or [""])[0][:300]
            return self.failed_row(task, "crash", f"the task's process could not start: {type(e).__name__}: {first}",
                                   0.0)
        self.task, self.started = task, time.perf_counter()
        self.conn.send(task)
        return None

    def collect(self, timeout: float, ready: bool) -> dict[str, Any] | None:
        """The row of the task submitted when it is known, None while it runs.

        :param timeout: seconds after which the task is killed (its row says ``timeout``)
        :param ready: whether the connection has something to read (``multiprocessing.connection.wait``)
        """
        task, elapsed = self.task, time.perf_counter() - self.started
        if ready:
            try:
                row, replace = self.conn.recv()
                self.done += 1
                used = self.done > 1  # the process ran other tasks first: their memory may still be held
                if replace:  # a fresh process for the next task
                    self.restart()
                if replace and used and not self.retry and self.process is not None:
                    # what a long-lived process kept (allocator arenas, mappings under the address-space cap)
                    # may be the cause: the task runs once more, alone in the fresh process
                    self.retry = True
                    self.task, self.started = task, time.perf_counter()
                    self.conn.send(task)
                    return None
            except (EOFError, OSError):
                row = self._crashed(task, elapsed)
        elif not self.process.is_alive() and not self.conn.poll():
            # dead without a row: the end of the pipe it wrote to may still be open in a sibling sandbox
            # forked meanwhile by another worker thread, so no end of file tells it
            row = self._crashed(task, elapsed)
        elif elapsed > timeout:
            row = self.failed_row(task, "timeout", f"no result after {timeout:g} s, the task was killed", elapsed)
            self.restart()
        else:
            return None
        self.task, self.retry = None, False
        return row

    def _crashed(self, task: Any, elapsed: float) -> dict[str, Any]:
        """The row of a task whose process died, and a fresh process."""
        self.process.join(5)
        row = self.failed_row(task, "crash", f"the worker process died (exit code {self.process.exitcode})", elapsed)
        self.restart()
        return row

    def run(self, task: Any, timeout: float) -> dict[str, Any]:
        """Runs one task and returns its row (a failed row after a timeout or a crash)."""
        failed = self.submit(task)
        if failed is not None:
            return failed
        while True:
            remaining = max(0.0, timeout - (time.perf_counter() - self.started))
            ready = self.conn in wait([self.conn, self.process.sentinel], timeout=min(remaining, 1.0) + 0.05)
            row = self.collect(timeout, ready)
            if row is not None:
                return row

    def restart(self) -> None:
        """Kills the process and starts a fresh one (when that fails, the next :meth:`submit` tries
        again and gives its task the reason)."""
        self.stop(kill=True)
        with contextlib.suppress(Exception):
            self._start()

    def stop(self, kill: bool = False) -> None:
        """Ends the process: asks it to stop, or kills it (``kill=True``, a task still runs)."""
        if self.process is None:
            return
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
        self.process = self.conn = None
