"""The local pool: ``workers`` sandboxes driven by this process, with no engine.

It is what :func:`fx2onnx.runner.run_tasks` ran before the sweeps went to a cluster, kept as
``address="pool"`` (``FX2ONNX_CLUSTER=pool``): the reference the cluster is measured against
(``bench/bench_runner.py``) and the fallback where dask is not installed.
"""

from __future__ import annotations

import collections
from multiprocessing.connection import wait
from typing import Any, Callable, Sequence

from .sandbox import FailedRow, RunOne, Sandbox


def run_in_pool(
    tasks: Sequence[Any], run_one: RunOne, failed_row: FailedRow, workers: int, timeout: float,
    on_row: Callable[[int, dict[str, Any]], None], max_tasks_per_worker: int = 400,
    mp_context: str | None = None, memory_gb: float | None = None,
) -> None:
    """Runs every task in one of ``workers`` sandboxes; ``on_row(index, row)`` receives each row
    as soon as it is known (in the order the tasks end)."""
    pending = collections.deque(enumerate(tasks))
    pool = [Sandbox(run_one, failed_row, memory_gb, mp_context, max_tasks_per_worker)
            for _ in range(min(workers, len(tasks)))]
    try:
        while pending or any(s.busy for s in pool):
            for s in pool:
                if not s.busy and pending:
                    index, task = pending.popleft()
                    failed = s.submit(task)
                    if failed is not None:  # no process could be started for it
                        on_row(index, failed)
                        continue
                    s.index = index  # type: ignore[attr-defined]
            busy = [s for s in pool if s.busy]
            ready = wait([s.conn for s in busy] + [s.process.sentinel for s in busy], timeout=0.5)
            for s in busy:
                index = s.index  # type: ignore[attr-defined]
                row = s.collect(timeout, s.conn in ready)
                if row is not None:
                    on_row(index, row)
    finally:
        for s in pool:
            s.stop(kill=s.busy)
