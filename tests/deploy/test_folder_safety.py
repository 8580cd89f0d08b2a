"""A failed export never leaves a broken folder and never touches the checkpoint.

The checkpoint folder's bytes and modification times are the same after every command, failing ones
included; an output inside the checkpoint (or holding it) is refused before anything is written; the
export writes beside ``--out`` and renames the folder into place once checked, so that an export killed
at any moment (SIGINT, SIGTERM, SIGKILL), a failed check or a full disk leaves the previous folder or
nothing; a second export to the same ``--out`` is refused while one runs; ``generate`` refuses a folder
changed after the export."""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from fx2onnx.__main__ import main
from fx2onnx.deploy import disk, export_folder
from fx2onnx.deploy.output_folder import LOCK, OutputFolder, partial_folders
from fx2onnx.testing.tokenizer import tiny_qwen3_config, write_checkpoint_folder
from fx2onnx.runtime.integrity import SAMPLE_BYTES, WHOLE_BYTES, file_checksum


def _config():
    return tiny_qwen3_config(hidden_size=32, intermediate_size=64, head_dim=8, max_position_embeddings=64)


def snapshot(folder: str) -> dict[str, tuple]:
    """Every file and folder under ``folder``: size, modification time (ns) and SHA-256 of the files."""
    result = {".": ("dir", os.stat(folder).st_mtime_ns, tuple(sorted(os.listdir(folder))))}
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            path = os.path.join(root, name)
            result[os.path.relpath(path, folder)] = ("dir", os.stat(path).st_mtime_ns)
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            stat = os.stat(path)
            result[os.path.relpath(path, folder)] = (stat.st_size, stat.st_mtime_ns, digest)
    return result


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny bf16 checkpoint and the folder ``export`` wrote from it (checked against eager)."""
    root = tmp_path_factory.mktemp("safety")
    checkpoint, out = str(root / "ck"), str(root / "ck_onnx")
    write_checkpoint_folder(_config(), checkpoint, dtype="bfloat16", std=0.3)
    before = snapshot(checkpoint)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    assert snapshot(checkpoint) == before
    return checkpoint, out


def _one_error_line(capsys, *words):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error:"), err
    for word in words:
        assert word in err, (word, err)
    return err


def test_the_checkpoint_is_never_written(exported, tmp_path, capsys):
    checkpoint, out = exported
    before = snapshot(checkpoint)
    parent = os.path.dirname(checkpoint)
    # the output in the checkpoint, inside it, holding it: refused before anything is written
    for target, words in [(checkpoint, "checkpoint folder itself"), (os.path.join(checkpoint, "onnx"), "inside"),
                          (os.path.join(checkpoint, "model.onnx"), "checkpoint folder itself"),
                          (parent, "holds the checkpoint")]:
        capsys.readouterr()
        assert main(["export", checkpoint, "--out", target, "--quiet"]) == 2
        _one_error_line(capsys, words)
        assert snapshot(checkpoint) == before
        assert not partial_folders(target)
    # through a link to the checkpoint too
    link = str(tmp_path / "link")
    os.symlink(checkpoint, link)
    assert main(["export", checkpoint, "--out", link, "--quiet"]) == 2
    _one_error_line(capsys, "checkpoint folder itself")
    # a failing export (refused options) and a successful one, then generate: the checkpoint the same
    assert main(["export", checkpoint, "--out", str(tmp_path / "o"), "--quantize", "int4", "--optimize", "none"]) == 2
    assert main(["export", checkpoint, "--out", str(tmp_path / "o"), "--quiet", "--no-validate"]) == 0
    assert main(["generate", str(tmp_path / "o"), "--ids", "1,2,3", "--max-new-tokens", "2"]) == 0
    assert snapshot(checkpoint) == before


def test_existing_out_replaced_only_when_ours(exported, tmp_path, capsys):
    checkpoint, out = exported
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    capsys.readouterr()
    assert main(["export", checkpoint, "--out", str(foreign), "--quiet", "--no-validate"]) == 2
    _one_error_line(capsys, "did not write", "another --out")
    assert os.listdir(foreign) == ["notes.txt"]
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert main(["export", checkpoint, "--out", str(a_file), "--quiet", "--no-validate"]) == 2
    _one_error_line(capsys, "not a folder")
    # an empty folder and a folder the export wrote are replaced
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", checkpoint, "--out", str(empty), "--quiet", "--no-validate"]) == 0
    assert "fx2onnx.json" in os.listdir(empty)
    assert main(["export", checkpoint, "--out", str(empty), "--quiet", "--no-validate", "--all-logits"]) == 0
    assert json.load(open(empty / "fx2onnx.json"))["logits"] == "all"
    assert not partial_folders(empty) and not os.path.exists(tmp_path / f".empty{LOCK}")


def test_a_failed_check_keeps_the_previous_folder(exported, tmp_path, capsys, monkeypatch):
    checkpoint, out = exported
    monkeypatch.setattr("fx2onnx.deploy.check.REDUCED_PRECISION_FACTOR", 0.0)  # no float64 second opinion's margin
    previous = str(tmp_path / "previous")
    shutil.copytree(out, previous)
    before = snapshot(previous)
    capsys.readouterr()
    # no tolerance: the float32 export differs from eager by ~1e-6, the check fails
    assert main(["export", checkpoint, "--out", previous, "--quiet", "--atol", "0", "--rtol", "0"]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out and "nothing written" in captured.out
    assert snapshot(previous) == before and not partial_folders(previous)


@pytest.mark.slow  # the fast tier keeps the case with a previous folder
def test_a_failed_check_without_previous_folder_leaves_nothing(exported, tmp_path, capsys, monkeypatch):
    checkpoint, _ = exported
    monkeypatch.setattr("fx2onnx.deploy.check.REDUCED_PRECISION_FACTOR", 0.0)
    fresh = str(tmp_path / "fresh")
    assert main(["export", checkpoint, "--out", fresh, "--quiet", "--atol", "0", "--rtol", "0"]) == 1
    assert not os.path.exists(fresh) and not partial_folders(fresh)


def test_a_second_export_is_refused_and_a_killed_exports_leftover_removed(exported, tmp_path, capsys):
    checkpoint, _ = exported
    out = str(tmp_path / "busy")
    with OutputFolder(out) as staging:  # an export running: its lock is held
        capsys.readouterr()
        assert main(["export", checkpoint, "--out", out, "--quiet", "--no-validate"]) == 2
        _one_error_line(capsys, "another export", "lock")
        assert os.path.isdir(staging.path)  # the running export's folder untouched
    assert not os.path.exists(out) and not partial_folders(out)
    # what a SIGKILL leaves: recognised by its name, removed by the next export to the same --out
    leftover = tmp_path / ".busy.fx2onnx-partial-dead1234"
    leftover.mkdir()
    (leftover / "model.onnx.data").write_bytes(b"\0" * 100)
    assert partial_folders(out) == [str(leftover)]
    assert main(["export", checkpoint, "--out", out, "--quiet", "--no-validate"]) == 0
    assert not leftover.exists() and os.path.isfile(os.path.join(out, "fx2onnx.json"))


def test_not_enough_space_is_refused_before_writing(exported, tmp_path, capsys, monkeypatch):
    checkpoint, _ = exported
    needed = disk.needed_bytes(checkpoint)
    stored = sum(os.path.getsize(os.path.join(checkpoint, n)) for n in os.listdir(checkpoint)
                 if n.endswith(".safetensors"))
    assert needed > 2 * stored - 1024  # bf16 weights written as float32
    assert disk.needed_bytes(checkpoint, quantize="int4") < needed
    monkeypatch.setattr(disk, "free_bytes", lambda path: 1000)
    out = str(tmp_path / "full")
    capsys.readouterr()
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 2
    err = _one_error_line(capsys, "needs about", "has 0.0 MiB")
    assert f"{(needed) / 2**20:.1f} MiB" in err
    assert not os.path.exists(out) and not partial_folders(out)


def test_max_memory_is_refused_before_loading(exported, tmp_path, capsys):
    from fx2onnx.deploy.memory import BASE, needed_memory, parse_size

    checkpoint, _ = exported
    assert parse_size("1.5GiB") == 3 * 2**29 and parse_size("16GB") == 16 * 10**9 and parse_size("1024") == 1024
    checked, streamed = needed_memory(checkpoint), needed_memory(checkpoint, validate=False)
    assert BASE < streamed < checked
    out = str(tmp_path / "small")
    capsys.readouterr()
    assert main(["export", checkpoint, "--out", out, "--quiet", "--max-memory", "100MB"]) == 2
    _one_error_line(capsys, "needs about", "--max-memory is 95 MiB", "--no-validate")
    assert main(["export", checkpoint, "--out", out, "--quiet", "--max-memory", "lots"]) == 2
    _one_error_line(capsys, "16GB")
    assert not os.path.exists(out) and not partial_folders(out)


def _export_command(checkpoint: str, out: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "fx2onnx", "export", checkpoint, "--out", out, "--quiet", *options]


@pytest.mark.slow  # a process of its own (about 15 s)
def test_a_disk_filling_during_the_export_leaves_nothing(exported, tmp_path):
    """A file size limit below the weights' data (the write fails with EFBIG as on a full disk): one line,
    nothing at --out, no temporary folder."""
    checkpoint, _ = exported
    out = str(tmp_path / "limited")

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    done = subprocess.run(_export_command(checkpoint, out, "--no-validate"), preexec_fn=limit, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "nothing was written" in last and "Traceback" not in done.stderr
    assert not os.path.exists(out) and not partial_folders(out)


def test_generate_refuses_a_folder_changed_after_export(exported, tmp_path, capsys):
    _, out = exported
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert {"onnx/model.onnx", "onnx/model.onnx_data", "tokenizer.json"} <= set(metadata["files"])
    changed = str(tmp_path / "changed")
    for what in ("truncated", "missing", "rewritten", "tokenizer missing"):
        shutil.rmtree(changed, ignore_errors=True)
        shutil.copytree(out, changed)
        data = os.path.join(changed, "onnx", "model.onnx_data")
        if what == "truncated":
            with open(data, "r+b") as f:
                f.truncate(os.path.getsize(data) // 2)
        elif what == "missing":
            os.remove(data)
        elif what == "rewritten":
            with open(data, "r+b") as f:
                f.write(b"\1" * 16)
        else:  # a tokenizer removed on purpose: token ids still run, a prompt is refused by the loop
            os.remove(os.path.join(changed, "tokenizer.json"))
        capsys.readouterr()
        code = main(["generate", changed, "--ids", "1,2,3", "--max-new-tokens", "2"])
        if what == "tokenizer missing":
            assert code == 0
            continue
        assert code == 2
        _one_error_line(capsys, "model.onnx_data", "export it again")


def test_an_interruption_after_the_swap_says_the_folder_is_complete(tmp_path):
    from fx2onnx.cli.main import _what_was_written

    out = str(tmp_path / "out")
    with OutputFolder(out) as staging:
        with open(os.path.join(staging.path, "fx2onnx.json"), "w") as f:
            f.write("{}")
        staging.commit()
    assert _what_was_written("export") == f" after the folder was written: {out} is complete"
    assert _what_was_written("generate") == ""


def test_sampled_checksum_of_a_large_file(tmp_path):
    path = str(tmp_path / "big.data")
    size = WHOLE_BYTES + 3 * SAMPLE_BYTES + 7
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    checksum, sampled = file_checksum(path)
    assert sampled
    with open(path, "r+b") as f:  # the last block is always sampled
        f.seek(size - 1)
        f.write(b"\0" if open(path, "rb").read()[-1:] != b"\0" else b"\1")
    assert file_checksum(path)[0] != checksum


def _wait_for(predicate, process, timeout=240.0):
    begin = time.monotonic()
    while time.monotonic() - begin < timeout:
        if predicate():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def _sigint_as_in_a_terminal() -> None:
    """SIGINT raises KeyboardInterrupt in the export process, as in a terminal: a suite started in the
    background (``make test-all &``) runs with SIGINT ignored, and its processes inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _kill_export(checkpoint: str, out: str, sig: int, moment: str) -> subprocess.Popen:
    """Starts an export to ``out`` and sends ``sig`` at ``moment``: ``writing`` (its temporary folder exists),
    ``checking`` (its fx2onnx.json written: the check against eager runs)."""
    process = subprocess.Popen(_export_command(checkpoint, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, preexec_fn=_sigint_as_in_a_terminal)
    if moment == "writing":
        reached = _wait_for(lambda: partial_folders(out), process)
    else:
        reached = _wait_for(lambda: any(os.path.exists(os.path.join(p, "fx2onnx.json")) for p in partial_folders(out)),
                            process)
    assert reached, f"the export ended before {moment}: {process.stderr.read() if process.stderr else ''}"
    process.send_signal(sig)
    process.wait(timeout=120)
    return process


def test_sigterm_during_the_check_removes_the_temporary_folder(exported, tmp_path):
    """SIGTERM sent to this process while the export checks its folder: KeyboardInterrupt, the temporary folder
    removed, the previous folder untouched (the kills of a real export process are in the slow tier)."""
    checkpoint, out = exported
    previous = str(tmp_path / "previous")
    shutil.copytree(out, previous)
    before = snapshot(previous)
    late = []
    # the handler the export restores when it ends: a signal arriving after it is recorded, not fatal to pytest
    old = signal.signal(signal.SIGTERM, lambda *_: late.append(True))

    def send_when_checking():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if any(os.path.exists(os.path.join(p, "fx2onnx.json")) for p in partial_folders(previous)):
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.01)

    sender = threading.Thread(target=send_when_checking, daemon=True)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            export_folder(checkpoint, previous)
    finally:
        sender.join(timeout=10)
        signal.signal(signal.SIGTERM, old)
    assert not late
    assert snapshot(previous) == before
    assert not partial_folders(previous) and not os.path.exists(os.path.join(str(tmp_path), f".previous{LOCK}"))


KILLS = [(signal.SIGTERM, "checking"), (signal.SIGTERM, "writing"), (signal.SIGINT, "writing"),
         (signal.SIGINT, "checking"), (signal.SIGKILL, "writing"), (signal.SIGKILL, "checking")]


@pytest.mark.slow  # two export processes each
@pytest.mark.parametrize("sig,moment", [pytest.param(*k, id=f"{signal.Signals(k[0]).name}-{k[1]}") for k in KILLS])
def test_a_killed_export_leaves_the_previous_folder(exported, tmp_path, sig, moment):
    checkpoint, out = exported
    previous = str(tmp_path / "previous")
    shutil.copytree(out, previous)
    before = snapshot(previous)
    process = _kill_export(checkpoint, previous, sig, moment)
    assert snapshot(previous) == before  # the previous complete folder, untouched
    if sig == signal.SIGKILL:  # no cleanup possible: the leftover is recognisable, the next export removes it
        assert partial_folders(previous)
        with OutputFolder(previous):
            pass
    else:
        assert process.returncode != 0
        assert "Traceback" not in process.stderr.read()
    assert not partial_folders(previous)
    assert not os.path.exists(os.path.join(str(tmp_path), f".previous{LOCK}"))
    # no previous folder: nothing at all
    fresh = str(tmp_path / "fresh")
    _kill_export(checkpoint, fresh, sig, moment)
    assert not os.path.exists(fresh)


@pytest.mark.slow  # four export processes
def test_kills_at_random_moments_leave_the_previous_folder_or_a_complete_one(exported, tmp_path):
    from fx2onnx.runtime.integrity import check_folder_files

    checkpoint, out = exported
    rng = random.Random(3)
    for i in range(4):
        target = str(tmp_path / f"target{i}")
        shutil.copytree(out, target)
        before = snapshot(target)
        sig = rng.choice([signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
        process = subprocess.Popen(_export_command(checkpoint, target), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, preexec_fn=_sigint_as_in_a_terminal)
        time.sleep(rng.uniform(0.5, 20.0))  # an export of the tiny folder takes 10 to 40 s here
        process.send_signal(sig)
        process.wait(timeout=300)
        if snapshot(target) != before:  # the swap came first: the new folder, complete and checked
            # the signal may land after the swap (printing the summary, or the interpreter's exit): the folder
            # is complete all the same, and the command says so
            assert process.returncode in (0, 130, -signal.SIGINT, -signal.SIGTERM, -signal.SIGKILL)
            check_folder_files(target, json.load(open(os.path.join(target, "fx2onnx.json"))))
        with OutputFolder(target):  # what the next export does first: a SIGKILL's leftover removed
            pass
        assert not partial_folders(target)
