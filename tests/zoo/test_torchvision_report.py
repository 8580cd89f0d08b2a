"""The torchvision page of the supported models, rendered from bench rows."""

from __future__ import annotations

import json

from pathlib import Path

from fx2onnx.zoo.torchvision_models import DETECTION, SEGMENTATION
from fx2onnx.zoo.torchvision_report import torchvision_page, write_torchvision_page

ROWS = Path(__file__).resolve().parents[2] / "_doc" / "bench" / "torchvision_detection.json"


def test_page_shows_both_exporters(tmp_path):
    rows = [dict(model="fasterrcnn_mobilenet_v3_large_fpn", exporter="to_onnx", task="detection", success=True,
                 step="match", max_diff=2e-4, export_s=95.0, ort1_ms=80.0, ort2_ms=50.0, eager_ms=120.0,
                 date="2026-12-07"),
            dict(model="fasterrcnn_mobilenet_v3_large_fpn", exporter="dynamo", task="detection", success=False,
                 step="capture", error="GuardOnDataDependentSymNode: Could not guard | on u1")]
    text = torchvision_page(rows)
    assert "Detection\n---------" in text and "Segmentation" not in text
    assert "OK (0.0002)" in text and "fails at capture: ``GuardOnDataDependentSymNode" in text
    assert "| on u1" not in text  # a bar would break the table
    path = tmp_path / "rows.json"
    assert write_torchvision_page(path, tmp_path) == []
    path.write_text(json.dumps(rows))
    assert write_torchvision_page(path, tmp_path) == ["torchvision"]
    assert (tmp_path / "torchvision.rst").read_text() == text


def test_stored_rows_are_builders_and_matches_are_close():
    """The stored rows (bench/bench_torchvision_detection.py) name builders of torchvision's detection and
    segmentation models; a row marked successful matched eager on images of other sizes, one which
    failed says where and why."""
    rows = json.loads(ROWS.read_text(encoding="utf-8"))
    assert {r["model"] for r in rows} <= set(DETECTION + SEGMENTATION)
    assert {r["exporter"] for r in rows} == {"to_onnx", "dynamo"}
    for row in rows:
        if row["success"]:
            assert row["step"] == "match" and row["max_diff"] < 1e-2 and row["export_s"] > 0, row
        else:
            assert row["step"] in ("build", "capture", "convert", "match") and row["error"], row
