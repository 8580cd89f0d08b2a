"""torchvision's detection and segmentation models through both exporters: capture, convert, match,
export time, and onnxruntime's latency at 1 and 2 threads beside eager's.

For each model of :mod:`fx2onnx.zoo.torchvision_models` (small images, checkable random weights)
and each exporter (``to_onnx``, ``torch.onnx.export(dynamo=True)``), one row: the step reached
(``capture``, ``convert``, ``match``), the first line of the error, the export time, the largest
difference with eager over the case's other images (detections paired up to the order of
near-equal scores; an image list whose detections differ is compared again with eager's IoU
thresholds moved by ``IOU_TIE`` either way, counted in ``iou_ties``), then the median latency of
onnxruntime with 1 and 2 intra-op threads and of eager on the export's images. Rows go to
``_doc/bench/torchvision_detection.json`` (the models page renders them).

    python bench/bench_torchvision_detection.py --only 'fasterrcnn_mobilenet_v3_large_fpn$|lraspp'

``--noise 1e-5`` exports nothing: it compares eager with itself on the case's images moved by
Gaussian noise of that size and adds the largest difference to the model's ``to_onnx`` row
(``noise_diff``): a detection model whose own outputs part at that noise (a box kept or
suppressed by an IoU a few 1e-5 from the threshold) cannot match another runtime exactly.

``--nothing`` exports each detection model again with its score threshold between the best scores
of the two images of its first check (one image then detects nothing: every head after the last
suppression runs on no box) and adds to the model's ``to_onnx`` row the largest difference with
eager on those images (``nothing_diff``) and the number of detections of each (``nothing_counts``).

``--timeout`` bounds each row (default 1200 s): a row running over it records ``timeout`` and the
step it was at, and the table goes on with the next one. Each row is merged into the JSON as it
ends (the file is read again first): two runs on different models may share the file.

The timings are noisy when the machine is shared: each latency is a median of a few runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils import _pytree as pytree

import fx2onnx
from fx2onnx.zoo.torchvision_models import (
    DETECTION,
    IOU_TIE,
    SEGMENTATION,
    build_torchvision_model,
    detecting_nothing,
    detection_differences,
    moved_iou_thresholds,
    resize_scales,
    suppressions,
)

OUTPUT = Path(__file__).resolve().parents[1] / "_doc" / "bench" / "torchvision_detection.json"
EXPORTERS = ("to_onnx", "dynamo")


class RowTimeout(BaseException):
    """A row ran over its time (a BaseException: the exporters' own ``except Exception`` lets it through)."""


def _on_alarm(signum, frame) -> None:
    raise RowTimeout()


def _export(exporter: str, case, path: str, failures: list | None = None) -> None:
    """Exports ``case``; ``failures`` receives the capture strategies of ``torch.onnx.export`` which
    failed (it tries torch.export non-strict, then strict, and raises the first one's error)."""
    if exporter == "to_onnx":
        fx2onnx.to_onnx(case.model, case.export_args, dynamic_shapes=case.dynamic_shapes, filename=path)
        return
    from torch.onnx._internal.exporter import _capture_strategies

    dims = pytree.tree_map(lambda name: torch.export.Dim.DYNAMIC, case.dynamic_shapes)
    strategy = _capture_strategies.CaptureStrategy
    call = strategy.__call__

    def recording(self, *args, **kwargs):
        result = call(self, *args, **kwargs)
        if result.exception is not None and failures is not None:
            failures.append(result)
        return result

    strategy.__call__ = recording
    try:
        program = torch.onnx.export(case.model, case.export_args, dynamic_shapes=dims, dynamo=True, verbose=False)
    finally:
        strategy.__call__ = call
    program.save(path)


def _session(path: str, threads: int):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _feeds(session, args) -> dict:
    return dict(zip([i.name for i in session.get_inputs()], [x.numpy() for x in pytree.tree_leaves(args)]))


def _found(case, args, want, got) -> dict[str, float]:
    """The largest difference per output between eager's ``want`` and onnxruntime's ``got`` on ``args``."""
    if case.task == "segmentation":
        return {k: float((torch.from_numpy(got[k]) - want[k]).abs().max()) for k in want}
    found: dict[str, float] = {}
    for w, o, resize in zip(want, got, resize_scales(case.model, args[0])):
        for key, value in detection_differences(w, o, resize=resize).items():
            found[key] = max(found.get(key, 0.0), value)
    return found


def _across_a_tie(case, args, got, found: dict[str, float]) -> tuple[dict[str, float], bool]:
    """The differences with eager whose suppressions (all, or one at a time) have their IoU
    thresholds moved by ``IOU_TIE`` either way, the first that pairs every detection; ``found``
    when none does."""
    owners = suppressions(case.model)
    choices = [owners] + ([[owner] for owner in owners] if len(owners) > 1 else [])
    for shift in (IOU_TIE, -IOU_TIE):
        for chosen in choices:
            with moved_iou_thresholds(chosen, shift), torch.no_grad():
                moved = _found(case, args, case.model(*args), got)
            if all(math.isfinite(v) for v in moved.values()):
                return moved, True
    return found, False


def _difference(case, session) -> tuple[float, str, int]:
    """The largest difference with eager over the case's images, the output where it is, and the
    number of image lists matched only by eager with IoU thresholds moved by ``IOU_TIE``
    (a suppression decided within that of its threshold goes either way between runtimes)."""
    worst, where, ties = 0.0, "", 0
    for args in [case.export_args] + case.check_args:
        with torch.no_grad():
            want = case.model(*args)
        got = pytree.tree_unflatten(session.run(None, _feeds(session, args)), pytree.tree_structure(want))
        found = _found(case, args, want, got)
        if case.task == "detection" and not all(math.isfinite(v) for v in found.values()):
            found, tied = _across_a_tie(case, args, got, found)
            ties += tied
        for key, value in found.items():
            if not value <= worst:
                worst, where = value, key
    return worst, where, ties


def eager_noise(case, eps: float, seed: int = 0) -> float:
    """The largest difference of eager with itself on the case's images moved by noise of ``eps``
    (detections paired as in the check)."""
    g = torch.Generator().manual_seed(seed)
    worst = 0.0
    for args in [case.export_args] + case.check_args:
        moved = pytree.tree_map(lambda x: x + eps * torch.randn(x.shape, generator=g), args)
        with torch.no_grad():
            want, got = case.model(*args), case.model(*moved)
        if case.task == "segmentation":
            found = [float((got[k] - want[k]).abs().max()) for k in want]
        else:
            found = [max(_found(case, args, want, got).values(), default=0.0)]
        worst = max([worst] + found)
    return worst


def nothing_row(name: str, timeout: int = 0) -> dict:
    """The model exported by ``to_onnx`` with a score threshold making one image of its first check
    detect nothing: the largest difference with eager on those images and each one's detections."""
    found: dict = {}
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout)
    try:
        case = detecting_nothing(build_torchvision_model(name))
        with tempfile.TemporaryDirectory() as folder:
            path = str(Path(folder) / "model.onnx")
            _export("to_onnx", case, path)
            session = _session(path, 1)
            args = case.check_args[0]
            with torch.no_grad():
                want = case.model(*args)
            got = pytree.tree_unflatten(session.run(None, _feeds(session, args)), pytree.tree_structure(want))
            diff = max(_found(case, args, want, got).values(), default=0.0)
            found = dict(nothing_diff=diff if math.isfinite(diff) else None,
                         nothing_counts=[[int(w["boxes"].shape[0]) for w in want],
                                         [int(o["boxes"].shape[0]) for o in got]])
    except RowTimeout:
        found = dict(nothing_error=f"timeout: over {timeout} s")
    except Exception as e:  # noqa: BLE001 - the row records the failure
        found = dict(nothing_error=_first_line(e))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return found


def _median_ms(call, repeat: int) -> float:
    call()
    times = []
    for _ in range(repeat):
        begin = time.perf_counter()
        call()
        times.append(time.perf_counter() - begin)
    return round(1000 * statistics.median(times), 2)


def _first_line(error: BaseException) -> str:
    """The innermost cause's type and first line (torch.onnx.export wraps the capture's error in a
    TorchExportError saying only which step failed), without terminal colours."""
    while error.__cause__ is not None:
        error = error.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def run_row(name: str, exporter: str, repeat: int = 5, atol: float = 1e-2, case=None, timeout: int = 0) -> dict:
    """One row: the steps reached by ``exporter`` on model ``name`` (built unless ``case`` is
    given) and the timings, stopped after ``timeout`` seconds (0: no limit)."""
    row: dict = dict(model=name, exporter=exporter, step="build", success=False, error=None)
    failures: list = []
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout)
    try:
        case = case or build_torchvision_model(name)
        row["task"] = case.task
        with tempfile.TemporaryDirectory() as folder:
            path = str(Path(folder) / "model.onnx")
            row["step"] = "capture"
            begin = time.perf_counter()
            _export(exporter, case, path, failures)
            row["export_s"] = round(time.perf_counter() - begin, 1)
            row["step"] = "convert"
            session = _session(path, 1)
            row["step"] = "match"
            diff, where, ties = _difference(case, session)
            row["max_diff"] = diff if math.isfinite(diff) else None
            if ties:
                row["iou_ties"] = ties
            if not diff < atol:
                row["error"] = f"outputs differ from eager: {diff:.3g} ({where})"
                return row
            row["success"] = True
            with torch.no_grad():
                row["eager_ms"] = _median_ms(lambda: case.model(*case.export_args), repeat)
            for threads in (1, 2):
                session = _session(path, threads)
                feeds = _feeds(session, case.export_args)
                row[f"ort{threads}_ms"] = _median_ms(lambda: session.run(None, feeds), repeat)
    except RowTimeout:
        row["error"] = f"timeout: over {timeout} s (at {row['step']})"
        if failures:  # the error torch.onnx.export raises in the end: its first strategy's
            row["error"] = _first_line(failures[0].exception)
            row["note"] = (f"{failures[0].strategy} failed; the capture tried after it ran over the row's "
                           f"{timeout} s")
    except Exception as e:  # noqa: BLE001 - the row records the failure
        row["error"] = _first_line(e)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return row


def _save(output: Path, row: dict) -> None:
    """``row`` replaces the row of its model and exporter in ``output`` (read again: another run
    may have written it since)."""
    rows = json.loads(output.read_text()) if output.exists() else []
    rows = [r for r in rows if (r["model"], r["exporter"]) != (row["model"], row["exporter"])] + [row]
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(rows, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=".", help="regular expression on the model names")
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--output", default=str(OUTPUT))
    parser.add_argument("--repeat", type=int, default=3, help="runs of each latency (a median)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per row (0: no limit)")
    parser.add_argument("--noise", type=float, default=0.0,
                        help="no export: eager against itself on images moved by this noise, into the to_onnx row")
    parser.add_argument("--nothing", action="store_true",
                        help="export again with one image detecting nothing, into the to_onnx row")
    args = parser.parse_args(argv)
    output = Path(args.output)
    rows = json.loads(output.read_text()) if output.exists() else []
    if args.nothing:
        for name in DETECTION:
            row = next((r for r in rows if (r["model"], r["exporter"]) == (name, "to_onnx")), None)
            if row is None or not re.search(args.only, name):
                continue
            found = nothing_row(name, args.timeout)
            print(name, found, flush=True)
            rows = json.loads(output.read_text())  # read again: another run may have written since
            row = next(r for r in rows if (r["model"], r["exporter"]) == (name, "to_onnx"))
            for key in ("nothing_diff", "nothing_counts", "nothing_error"):
                row.pop(key, None)
            _save(output, dict(row, **found))
        return 0
    if args.noise:
        for row in rows:
            if row["exporter"] == "to_onnx" and re.search(args.only, row["model"]):
                diff = eager_noise(build_torchvision_model(row["model"]), args.noise)
                row.update(noise_eps=args.noise, noise_diff=diff if math.isfinite(diff) else None)
                print(row["model"], row["noise_diff"], flush=True)
                output.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    for name in DETECTION + SEGMENTATION:
        if not re.search(args.only, name):
            continue
        try:  # once for both exporters (calibrating takes a while)
            case = build_torchvision_model(name)
        except Exception:  # noqa: BLE001 - run_row builds it again and records the error
            case = None
        for exporter in args.exporters.split(","):
            row = run_row(name, exporter, repeat=args.repeat, case=case, timeout=args.timeout)
            row.update(date=datetime.date.today().isoformat(), command=" ".join(["python"] + sys.argv))
            print(json.dumps(row), flush=True)
            _save(output, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
