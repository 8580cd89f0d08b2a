"""The torchvision page of the supported models: detection and segmentation models, both exporters.

The rows come from ``_doc/bench/torchvision_detection.json``, written by
``bench/bench_torchvision_detection.py`` (one row per model and exporter: the step reached,
the difference with eager on images of other sizes, the export time, onnxruntime's latency at 1
and 2 threads beside eager's). :func:`write_torchvision_page` renders ``torchvision.rst``.

.. code-block:: python

    from fx2onnx.zoo.torchvision_report import torchvision_page

    print(torchvision_page([dict(model="fcn_resnet50", exporter="to_onnx", task="segmentation",
                                 success=True, step="match", max_diff=1e-5, export_s=20.0)]))
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .torchvision_models import DETECTION, IOU_TIE, SEGMENTATION, V2_PROPOSALS

EXPORTERS = {"to_onnx": "``to_onnx``", "dynamo": "``torch.onnx.export`` (dynamo)"}
_V2 = (f"built with {V2_PROPOSALS} proposals per image (1000 by default): its box head convolves every "
       "proposal four times, twenty times the cost of the rest of the model at 1000.")
#: what a row's numbers do not say, rendered below its table
NOTES = {
    "fasterrcnn_resnet50_fpn_v2": _V2,
    "maskrcnn_resnet50_fpn_v2": _V2,
    "keypointrcnn_resnet50_fpn": (
        "Keypoint R-CNN is checked with heatmaps peaked at a corner of each box (``_peak_keypoints``; flat random "
        "heatmaps make the argmax jump between near-equal maxima). A keypoint is read from its heatmap resampled "
        "to ``ceil`` of its box's size in the image the model resized: a box within rounding of an integer size "
        "there is resampled to another size by the other runtime, and its keypoints' scores move by 0.01 to 3. "
        "Keypoints are compared on the boxes of one size in both runtimes (the boxes themselves on all). The "
        "earlier row's difference of 0.054 in the keypoints' scores was such a box: eager's keypoint branch given "
        "onnxruntime's boxes gives onnxruntime's keypoints' scores to 4e-5."),
    "fasterrcnn_resnet50_fpn": (
        "Faster R-CNN R50 matches across a near-tie, not a conversion bug. On one image of six onnxruntime keeps "
        "a detection eager does not: its region proposal network suppresses, among 2,400 to "
        "2,600 proposals per image, those overlapping a better one by an IoU above 0.7, and onnxruntime's boxes, "
        "1e-4 away from eager's through a random ResNet-50, put a proposal on the other side of 0.7. With that "
        "suppression's threshold at 0.699, eager keeps onnxruntime's detections (within the difference in the "
        "table); at 0.6999 or 0.7001 it does not. Eager does the same against itself: on the same images moved "
        "by noise of 1e-5 it keeps a detection only one side has on two images of six."),
}


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "not run"
    if row.get("success"):
        return f"OK ({row.get('max_diff', 0):.1g})"
    error = re.sub(r"\x1b\[[0-9;]*m", "", row.get("error") or "").replace("|", "/").replace("`", "'")
    error = error[:120].strip()
    # a literal: the page's style sheet wraps it anywhere, a long error name does not widen the table
    return f"fails at {row.get('step')}: ``{error}``" if error else f"fails at {row.get('step')}"


def _noise(row: dict[str, Any]) -> str:
    """What eager gives against itself on the case's images moved by noise (``--noise``)."""
    diff = row.get("noise_diff")
    found = ("a detection kept by one side only, above the cut" if diff is None
             else f"the largest difference is {diff:.2g}")
    return (f"eager against eager on the same images moved by Gaussian noise of {row['noise_eps']:g}: {found} "
            "(an exported model cannot be closer to eager than eager is to itself at its own rounding).")


def _ties(row: dict[str, Any]) -> str:
    """Image lists matched by eager with its IoU thresholds moved (a suppression at a near-tie)."""
    count = row["iou_ties"]
    return (f"on {count} image list{'s' if count > 1 else ''} of its check, onnxruntime's detections equal "
            f"eager's with the suppressions' IoU thresholds moved by {IOU_TIE:g} (a box kept or suppressed by "
            "an IoU within that of the threshold, which boxes a few hundredths of a pixel apart move to the "
            "other side).")


def _nothing(row: dict[str, Any]) -> str:
    """The model exported again with one image of its check detecting nothing (``--nothing``)."""
    if "nothing_error" in row:
        return f"exported with one image detecting nothing, it fails: ``{row['nothing_error'][:120]}``."
    (want, got), diff = row["nothing_counts"], row.get("nothing_diff")
    found = "a detection kept by one side only" if diff is None else f"the largest difference is {diff:.2g}"
    which = "every image" if not any(want) else "one image"  # a check whose images detected nothing already
    return (f"exported again with a score threshold making {which} detect nothing (detections per image: "
            f"eager {want}, onnxruntime {got}; the heads after the last suppression run on no box): {found}.")


def _number(row: dict[str, Any] | None, key: str) -> str:
    value = None if row is None else row.get(key)
    return "" if value is None else f"{value:g}"


def torchvision_page(rows: list[dict[str, Any]]) -> str:
    """The page: a table per task, one line per model, both exporters side by side."""
    by = {(r["model"], r["exporter"]): r for r in rows}
    models = sorted({r["model"] for r in rows})
    dates = sorted({r.get("date", "") for r in rows} - {""})
    lines = [
        "torchvision: detection and segmentation",
        "=======================================",
        "",
        "torchvision's detection models (a list of images of any sizes, a data-dependent number of",
        "detections) and segmentation models (a batch of any size), built with random weights by",
        ":func:`fx2onnx.zoo.torchvision_models.build_torchvision_model`, exported by both exporters",
        "with every image's height and width dynamic (the number of images of a detection model's list",
        "is fixed by the export), then run by onnxruntime on images of other sizes and compared with",
        "eager (detections paired up to the order of near-equal scores, a box at the cut kept by one side",
        "only when its score is within 2e-3 of the other's lowest; keypoints compared where both boxes",
        "have the same ``ceil`` of width and height, the size their heatmaps are resampled to; detections",
        f"which differ compared again with eager's IoU thresholds moved by {IOU_TIE:g}, the other side of a",
        "near-tie suppression). ``to_onnx`` applies the patches",
        "of :mod:`fx2onnx.patches.torchvision_detection`; ``torch.onnx.export`` runs as a user would call it.",
        "The cell gives the largest difference, or the step which failed and the first line of the error;",
        "the export times are those of each exporter (seconds), the latencies those of the model",
        "``to_onnx`` wrote (milliseconds for one call on the export's images, medians of a few runs on a",
        "shared machine: noisy; eager runs with torch's default threads, slowed most by the sharing).",
        "",
        f"Rows written by ``bench/bench_torchvision_detection.py`` ({', '.join(dates) or 'no date'}).",
        "",
    ]
    for task, builders in (("detection", DETECTION), ("segmentation", SEGMENTATION)):
        # every builder of the module, run or not, then any other model of the rows
        names = list(builders) + [m for m in models if m not in builders
                                  and any(by.get((m, e), {}).get("task") == task for e in EXPORTERS)]
        if not names:
            continue
        lines += [task.capitalize(), "-" * len(task), "", ".. list-table::", "    :header-rows: 1", "",
                  "    * - model", *(f"      - {label}" for label in EXPORTERS.values()),
                  *(f"      - export {e} (s)" for e in EXPORTERS),
                  "      - ort 1 thread (ms)", "      - ort 2 threads (ms)", "      - eager (ms)"]
        for name in names:
            ours = by.get((name, "to_onnx"))
            lines += [f"    * - ``{name}``", *(f"      - {_cell(by.get((name, e)))}" for e in EXPORTERS)]
            lines += [f"      - {_number(by.get((name, e)), 'export_s')}" for e in EXPORTERS]
            lines += [f"      - {_number(ours, k)}" for k in ("ort1_ms", "ort2_ms", "eager_ms")]
        lines.append("")
        noted = [name for name in names if name in NOTES and any((name, e) in by for e in EXPORTERS)]
        lines += [f"* ``{name}``: {NOTES[name]}" for name in noted]
        noisy = [by[(name, "to_onnx")] for name in names if "noise_eps" in by.get((name, "to_onnx"), {})]
        lines += [f"* ``{row['model']}``: {_noise(row)}" for row in noisy]
        tied = [by[(name, "to_onnx")] for name in names if by.get((name, "to_onnx"), {}).get("iou_ties")]
        lines += [f"* ``{row['model']}``: {_ties(row)}" for row in tied]
        empty = [by[(name, "to_onnx")] for name in names
                 if {"nothing_counts", "nothing_error"} & set(by.get((name, "to_onnx"), {}))]
        lines += [f"* ``{row['model']}``: {_nothing(row)}" for row in empty]
        # a row's own note (bench: torch.onnx.export's first capture failed, the next one ran out of time)
        remarks = [by[(name, e)] for name in names for e in EXPORTERS if by.get((name, e), {}).get("note")]
        lines += [f"* ``{row['model']}`` ({EXPORTERS[row['exporter']]}): {row['note']}." for row in remarks]
        lines += [""] if noted or noisy or tied or empty or remarks else []
    return "\n".join(lines) + "\n"


def write_torchvision_page(rows_path: str | Path, out_dir: str | Path) -> list[str]:
    """Writes ``torchvision.rst`` into ``out_dir`` when ``rows_path`` holds rows; returns the page
    names written (``["torchvision"]`` or none)."""
    path = Path(rows_path)
    rows = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    if not rows:
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target, text = out / "torchvision.rst", torchvision_page(rows)
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
    return ["torchvision"]
