"""The torchvision page of the supported models, rendered from bench rows."""

from __future__ import annotations

import json

from pathlib import Path

import pytest
import torch

from fx2onnx.zoo.torchvision_models import (
    DETECTION,
    IOU_TIE,
    SEGMENTATION,
    detection_differences,
    match_detections,
    moved_iou_thresholds,
    suppressions,
)
from fx2onnx.zoo.torchvision_report import torchvision_page, write_torchvision_page

ROWS = Path(__file__).resolve().parents[2] / "_doc" / "bench" / "torchvision_detection.json"


def test_page_shows_both_exporters(tmp_path):
    rows = [dict(model="fasterrcnn_mobilenet_v3_large_fpn", exporter="to_onnx", task="detection", success=True,
                 step="match", max_diff=2e-4, export_s=95.0, ort1_ms=80.0, ort2_ms=50.0, eager_ms=120.0,
                 date="2026-12-07"),
            dict(model="fasterrcnn_mobilenet_v3_large_fpn", exporter="dynamo", task="detection", success=False,
                 step="capture", error="GuardOnDataDependentSymNode: Could not guard | on u1")]
    text = torchvision_page(rows)
    assert "Detection\n---------" in text and "Segmentation\n------------" in text
    # every builder of both modules has a line, "not run" without rows
    assert all(f"    * - ``{name}``" in text for name in DETECTION + SEGMENTATION)
    assert "    * - ``fcn_resnet50``\n      - not run\n      - not run" in text
    assert "OK (0.0002)" in text and "fails at capture: ``GuardOnDataDependentSymNode" in text
    assert "| on u1" not in text  # a bar would break the table
    assert "Keypoint R-CNN" not in text  # a note only where its model has a row
    keypoints = dict(model="keypointrcnn_resnet50_fpn", exporter="to_onnx", task="detection", success=False,
                     step="match", error="outputs differ from eager: 0.3 (keypoints)")
    noted = torchvision_page(rows + [keypoints])
    assert "* ``keypointrcnn_resnet50_fpn``: Keypoint R-CNN is checked with heatmaps peaked" in noted
    # eager against itself on images moved by noise (bench --noise): a line under the table
    noisy = dict(rows[0], noise_eps=1e-5, noise_diff=None)
    assert ("* ``fasterrcnn_mobilenet_v3_large_fpn``: eager against eager on the same images moved by Gaussian "
            "noise of 1e-05: a detection kept by one side only") in torchvision_page([noisy] + rows[1:])
    assert "the largest difference is 3e-05" in torchvision_page([dict(noisy, noise_diff=3e-5)])
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


def _detections(boxes, scores, keypoints=None):
    out = dict(boxes=torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
               labels=torch.ones(len(boxes), dtype=torch.int64), scores=torch.tensor(scores))
    if keypoints is not None:
        out["keypoints"] = torch.tensor(keypoints, dtype=torch.float32)
    return out


def test_match_detections_allows_a_different_box_only_at_the_cut():
    """Which of two near-equal scores makes the cut depends on rounding: a box kept by one runtime
    only is allowed there, nowhere else; paired rows are compared (keypoints included)."""
    boxes = [[0.0, 0, 50, 50], [60, 60, 120, 100], [10, 80, 40, 150], [100, 0, 180, 40]]
    want = _detections(boxes[:3], [0.9, 0.6, 0.5003], [[[5.0, 5, 1]], [[70, 70, 1]], [[20, 90, 1]]])
    at_cut = _detections(boxes[:2] + boxes[3:], [0.9, 0.6, 0.5001],
                         [[[5.0, 5, 1]], [[70, 70, 1]], [[150, 20, 1]]])
    assert match_detections(want, at_cut) == 0.0
    assert match_detections(want, at_cut, tie=0.0) == float("inf")
    above_cut = _detections([boxes[0], boxes[3], boxes[2]], [0.9, 0.6, 0.5003], [[[5.0, 5, 1]], [[150, 20, 1]],
                                                                                [[20, 90, 1]]])
    assert match_detections(want, above_cut) == float("inf")  # the box of 0.6 is missing
    moved = _detections(boxes[:3], [0.9, 0.6, 0.5003], [[[5.0, 5, 1]], [[70, 90, 1]], [[20, 90, 1]]])
    assert match_detections(want, moved) == pytest.approx(20 / 90)  # 20 pixels, relative to the largest coordinate
    assert match_detections(want, _detections(boxes[:0], [])) == float("inf")


def test_page_says_what_an_export_detecting_nothing_gave():
    """bench --nothing: the model exported again with one image detecting nothing, a line under the table."""
    row = dict(model="maskrcnn_resnet50_fpn_v2", exporter="to_onnx", task="detection", success=True,
               step="match", max_diff=1e-3, export_s=900.0, nothing_diff=2e-4, nothing_counts=[[0, 6], [0, 6]])
    text = torchvision_page([row])
    assert ("* ``maskrcnn_resnet50_fpn_v2``: exported again with a score threshold making one image detect "
            "nothing (detections per image: eager [0, 6], onnxruntime [0, 6]") in text
    assert "the largest difference is 0.0002." in text
    failed = torchvision_page([dict(row, nothing_error="timeout: over 900 s")])
    assert "it fails: ``timeout: over 900 s``." in failed
    assert "making every image detect nothing" in torchvision_page([dict(row, nothing_counts=[[0, 0], [0, 0]])])


def test_page_renders_a_rows_note():
    row = dict(model="retinanet_resnet50_fpn", exporter="dynamo", task="detection", success=False, step="capture",
               error="GuardOnDataDependentSymNode: Could not guard", note="TorchExportNonStrictStrategy failed")
    assert ("* ``retinanet_resnet50_fpn`` (``torch.onnx.export`` (dynamo)): TorchExportNonStrictStrategy failed."
            in torchvision_page([row]))


def test_keypoints_compared_only_where_both_boxes_resample_to_one_size():
    """Keypoint R-CNN resamples each box's heatmaps to ceil of its size: a box whose width crosses an
    integer in the other runtime has other keypoint scores, not compared; every other pair is."""
    boxes = [[0.0, 0, 40.0, 30], [50, 50, 90.5, 80.5]]
    want = dict(_detections(boxes, [0.9, 0.8], [[[5.0, 5, 1]], [[60, 60, 1]]]),
                keypoints_scores=torch.tensor([[5.0], [4.0]]))
    crossing = [[0.0, 0, 40.004, 30], [50, 50, 90.5, 80.5]]  # 40 pixels wide in eager, ceil 41 here
    got = dict(_detections(crossing, [0.9, 0.8], [[[5.3, 5, 1]], [[60, 60, 1]]]),
               keypoints_scores=torch.tensor([[4.5], [4.003]]))
    found = detection_differences(want, got)
    assert found["keypoints_scores"] == pytest.approx(3e-3, abs=1e-6)  # the second box only
    assert found["keypoints"] == 0.0 and found["boxes"] == pytest.approx(0.004 / 90.5, rel=1e-2)
    same = dict(got, boxes=want["boxes"])
    assert detection_differences(want, same)["keypoints_scores"] == pytest.approx(0.5)


def test_moved_iou_thresholds_restores_the_model():
    """bench: eager with its suppressions' IoU thresholds moved, as the other side of a near-tie."""
    model = torch.nn.Module()
    model.rpn, model.roi_heads = torch.nn.Module(), torch.nn.Module()
    model.rpn.nms_thresh, model.roi_heads.nms_thresh = 0.7, 0.5
    assert suppressions(model) == [model.rpn, model.roi_heads]
    with moved_iou_thresholds([model.rpn], -IOU_TIE):
        assert (model.rpn.nms_thresh, model.roi_heads.nms_thresh) == (0.7 - IOU_TIE, 0.5)
    assert (model.rpn.nms_thresh, model.roi_heads.nms_thresh) == (0.7, 0.5)


def test_page_says_which_rows_matched_across_an_iou_tie():
    row = dict(model="fasterrcnn_resnet50_fpn", exporter="to_onnx", task="detection", success=True, step="match",
               max_diff=3e-4, export_s=800.0, iou_ties=1)
    assert ("* ``fasterrcnn_resnet50_fpn``: on 1 image list of its check, onnxruntime's detections equal eager's "
            "with the suppressions' IoU thresholds moved by 0.001") in torchvision_page([row])


def test_keypoints_resampled_at_the_models_resized_size():
    """The heatmaps are resampled to ceil of the box's size in the image the model resized: boxes 40.4
    and 40.6 pixels wide are one size at the original scale, two (81 and 82) at twice it."""
    want = dict(_detections([[0.0, 0, 40.4, 30]], [0.9], [[[5.0, 5, 1]]]), keypoints_scores=torch.tensor([[5.0]]))
    got = dict(_detections([[0.0, 0, 40.6, 30]], [0.9], [[[5.0, 5, 1]]]), keypoints_scores=torch.tensor([[4.0]]))
    assert detection_differences(want, got)["keypoints_scores"] == 1.0
    assert detection_differences(want, got, resize=(2.0, 2.0))["keypoints_scores"] == 0.0
