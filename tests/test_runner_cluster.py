"""The sweeps on the cluster: a hang, a crash of the interpreter and an out-of-memory become rows.

The fast test runs a local cluster of 2 workers; the slow ones compare it with the local pool
(one machine, no engine) and with a cluster started as separate processes, a scheduler and a
worker process as a second machine would start them (``dask scheduler``, ``dask worker``).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fx2onnx.runner import Progress, run_tasks

#: task -> (step, start of the error) of its row; the others succeed
EXPECTED = {
    "hang": ("timeout", "no result after"),
    "exit": ("crash", "the worker process died (exit code 3)"),
    "segfault": ("crash", "the worker process died (exit code -11)"),
    "allocate": ("crash", "MemoryError"),
}
TASKS = ["a", "hang", "b", "exit", "c", "allocate", "d", "segfault", "e"]


def _run_one(task: str) -> dict:
    if task == "hang":
        time.sleep(600)
    elif task == "exit":
        os._exit(3)
    elif task == "segfault":
        ctypes.string_at(0)
    elif task == "allocate":  # beyond the cap of 1 GB given to the sweep
        bytearray(3 << 30)
    return dict(task=task, success=True, step=None, error=None, pid=os.getpid())


def _failed_row(task: str, step: str, error: str, elapsed: float) -> dict:
    return dict(task=task, success=False, step=step, error=error, pid=None)


def _sweep(**kwargs) -> list[dict]:
    begin = time.perf_counter()
    rows = run_tasks(TASKS, _run_one, _failed_row, timeout=4, memory_gb=1.0, progress=False, **kwargs)
    rows = [{k: v for k, v in r.items() if k != "pid"} for r in rows]
    assert time.perf_counter() - begin < 60
    return rows


def _check(rows: list[dict]) -> None:
    assert [r["task"] for r in rows] == TASKS  # the order of the tasks
    for row in rows:
        step, error = EXPECTED.get(row["task"], (None, None))
        assert row["step"] == step, row
        assert (row["error"] or "").startswith(error or ""), row
        assert row["success"] == (step is None)


def test_local_cluster_faults():
    """2 workers started and stopped by the sweep; every task after a fault runs in a fresh process."""
    _check(_sweep(workers=2, address="local"))


@pytest.mark.slow
def test_cluster_rows_equal_one_machine(tmp_path: Path):
    """The local pool (one machine), the local cluster and a cluster of separate processes give the same rows."""
    pool = _sweep(workers=2, address="pool")
    _check(pool)
    assert _sweep(workers=2, address="local") == pool
    scheduler_file = tmp_path / "scheduler.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "dask"]
    processes = [subprocess.Popen(command + ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                             "--scheduler-file", str(scheduler_file)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(300):
            if scheduler_file.exists() and scheduler_file.stat().st_size:
                break
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        # a second machine joining: a nanny with 2 worker processes of one thread each
        processes.append(subprocess.Popen(command + ["worker", address, "--nworkers", "2", "--nthreads", "1",
                                                     "--memory-limit", "0", "--no-dashboard"],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        assert _sweep(workers=2, address=address) == pool
        os.environ["FX2ONNX_CLUSTER"] = address  # the environment variable sends the sweep there too
        try:
            assert _sweep(workers=2) == pool
        finally:
            del os.environ["FX2ONNX_CLUSTER"]
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()


def test_progress_counts():
    progress = Progress(3, show=False)
    for row in (dict(success=True), dict(success=False), dict(error="E")):
        progress.update(row)
    assert (progress.done, progress.failed) == (3, 2)


def test_address_from_environment(monkeypatch):
    from fx2onnx.runner import cluster_address

    monkeypatch.delenv("FX2ONNX_CLUSTER", raising=False)
    assert cluster_address() == "local" and cluster_address("pool") == "pool"
    monkeypatch.setenv("FX2ONNX_CLUSTER", "tcp://127.0.0.1:8786")
    assert cluster_address() == "tcp://127.0.0.1:8786" and cluster_address("local") == "local"


def test_interrupted_sweep_stops_its_tasks():
    """An exception in the sweep's process (Ctrl-C) kills the tasks still running: no wait for their timeout."""
    def on_row(row):
        raise KeyboardInterrupt

    begin = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_tasks(["a", "hang"], _run_one, _failed_row, workers=2, timeout=300, progress=False, on_row=on_row,
                  address="local")
    assert time.perf_counter() - begin < 30
