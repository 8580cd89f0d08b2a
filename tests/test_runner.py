"""The shared runner: a worker whose task ran out of memory is replaced before the next task."""

from __future__ import annotations

import os

from fx2onnx.runner import out_of_memory, run_tasks

#: set by a task which ran out of memory: the process stays broken (as oneDNN after a MemoryError)
BROKEN = False


def _run_one(task: str) -> dict:
    global BROKEN
    if BROKEN:
        return dict(task=task, pid=os.getpid(), error="RuntimeError: could not create a primitive")
    if task == "raise":  # the worker catches it
        BROKEN = True
        raise MemoryError
    if task == "caught":  # the task catches it and reports it in its row (as the zoos do)
        BROKEN = True
        return dict(task=task, pid=os.getpid(), error="MemoryError: std::bad_alloc")
    return dict(task=task, pid=os.getpid(), error=None)


def _failed_row(task: str, step: str, error: str, elapsed: float) -> dict:
    return dict(task=task, pid=None, error=error, step=step)


def test_worker_replaced_after_out_of_memory():
    tasks = ["a", "raise", "b", "caught", "c", "d"]
    rows = run_tasks(tasks, _run_one, _failed_row, workers=1, timeout=60, progress=False, mp_context="fork",
                     address="pool")
    assert [r["task"] for r in rows] == tasks
    assert rows[1]["step"] == "crash" and rows[1]["error"].startswith("MemoryError")
    assert rows[3]["error"] == "MemoryError: std::bad_alloc"
    # the tasks after an out-of-memory one run in a fresh process
    assert [r["error"] for r in rows if r["task"] in "abcd"] == [None] * 4
    pids = [r["pid"] for r in rows]
    # "caught" ran out of memory after "b" in the same process: tried again alone, in a fresh one
    assert pids[0] != pids[2] and pids[2] != pids[3] and pids[3] != pids[4] and pids[4] == pids[5]


#: the tasks a process ran: one which ran two runs out of memory (what a long-lived process kept)
DONE: list[str] = []


def _run_tired(task: str) -> dict:
    DONE.append(task)
    if len(DONE) > 2:
        return dict(task=task, pid=os.getpid(), generate=dict(error="RuntimeError: unable to mmap: Cannot allocate "
                                                                    "memory (12)"))
    return dict(task=task, pid=os.getpid(), generate=dict(error=None))


def test_a_task_out_of_memory_in_a_used_process_runs_again_alone():
    """The out-of-memory error of a row's entry counts (the tasks page's generate); the task runs once
    more in a fresh process, and is reported failed only when it fails alone too."""
    tasks = ["a", "b", "c", "d", "e"]
    rows = run_tasks(tasks, _run_tired, _failed_row, workers=1, timeout=60, progress=False, mp_context="fork",
                     address="pool")
    assert [r["task"] for r in rows] == tasks
    assert [r["generate"]["error"] for r in rows] == [None] * 5
    pids = [r["pid"] for r in rows]
    assert pids[0] == pids[1] != pids[2]  # "c" failed after two tasks, passed alone


def test_out_of_memory_rows():
    assert out_of_memory(dict(error="RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried..."))
    assert out_of_memory(dict(error="RuntimeError: could not create a primitive"))
    assert not out_of_memory(dict(error="TypeError: unsupported operand"))
    assert not out_of_memory(dict(error=None)) and not out_of_memory(None)
    assert out_of_memory(dict(error=None, generate=dict(error="export: MemoryError: Cannot allocate memory")))


def test_a_capture_mismatch_is_a_capture_failure():
    """A row flagged by to_onnx's capture check fails at the capture, not at the conversion."""
    import pytest

    from fx2onnx import CaptureMismatchError
    from fx2onnx.runner import label_export_step

    for error, step in ((CaptureMismatchError("differs"), "capture"), (ValueError("no converter"), "conversion")):
        with pytest.raises(type(error)) as info, label_export_step("capture"):
            raise error
        assert info.value.step == step


def _gc_state(task: str) -> dict:
    import gc

    return dict(task=task, frozen=gc.get_freeze_count(), threshold=gc.get_threshold()[0], error=None)


def test_a_task_does_not_collect_what_its_process_inherited():
    """The objects of the parent (forked) are out of the collections, and a collection comes every
    10,000 allocations: an export makes many short-lived objects."""
    import gc

    before = gc.get_threshold(), gc.get_freeze_count()
    rows = run_tasks(["a"], _gc_state, _failed_row, workers=1, timeout=60, progress=False, mp_context="fork",
                     address="pool")
    assert rows[0]["frozen"] >= len(gc.get_objects()) // 2, rows
    assert rows[0]["threshold"] == 10_000
    assert (gc.get_threshold(), gc.get_freeze_count()) == before  # the parent keeps its own


def _die(task: str) -> dict:
    os._exit(3)


def test_a_crash_is_seen_while_a_sibling_holds_the_pipe(monkeypatch):
    """Two worker threads start their sandboxes at the same time: a process forked by one between
    the Pipe() and the close of the child's end of the other holds that end too, and the death of
    the other's process gives no end of file. The crash is seen from the process itself."""
    import time

    from fx2onnx.runner import sandbox

    kept = []

    def start_keeping_the_child_end(self):
        self.conn, child = self.context.Pipe()
        self.process = self.context.Process(
            target=sandbox._sandbox_main, args=(child, self.run_one, self.failed_row, self.memory_gb), daemon=True)
        self.process.start()
        kept.append(child)  # open here as in a sibling forked meanwhile
        self.done = 0

    monkeypatch.setattr(sandbox.Sandbox, "_start", start_keeping_the_child_end)
    begin = time.perf_counter()
    box = sandbox.Sandbox(_die, _failed_row, mp_context="fork")
    try:
        row = box.run("a", timeout=30)
    finally:
        box.stop(kill=True)
    assert row["step"] == "crash" and "exit code 3" in row["error"], row
    rows = run_tasks(["b"], _die, _failed_row, workers=1, timeout=30, progress=False, mp_context="fork",
                     address="pool")
    assert rows[0]["step"] == "crash" and "exit code 3" in rows[0]["error"], rows
    assert time.perf_counter() - begin < 25  # not the timeout
    for end in kept:
        end.close()


def test_a_process_which_cannot_start_fails_its_tasks_with_the_reason():
    """A function that cannot reach the process (spawn pickles it: a lambda cannot be) fails each task with a row
    saying why, on the pool and on the local cluster, instead of an exception out of the sweep or the engine."""
    for address in ("pool", "local"):
        rows = run_tasks(["a", "b"], lambda task: dict(task=task, error=None), _failed_row, workers=1, timeout=60,
                         progress=False, mp_context="spawn", address=address)
        assert [r["task"] for r in rows] == ["a", "b"], address
        assert all(r["step"] == "crash" and r["error"].startswith("the task's process could not start: ")
                   and "pickle" in r["error"].lower() for r in rows), rows
