"""The checkable torchvision cases of fx2onnx.zoo.torchvision_models: Keypoint R-CNN's peaked heatmaps."""

from __future__ import annotations

import pytest
import torch

torchvision = pytest.importorskip("torchvision")

from torchvision.models.detection.keypoint_rcnn import KeypointRCNNHeads, KeypointRCNNPredictor  # noqa: E402
from torchvision.models.detection.roi_heads import heatmaps_to_keypoints  # noqa: E402

from fx2onnx.zoo.torchvision_models import PEAK, _peak_keypoints  # noqa: E402


class _KeypointBranch(torch.nn.Module):
    """Keypoint R-CNN's keypoint head and predictor, as ``roi_heads`` holds them, on pooled features."""

    def __init__(self):
        super().__init__()
        self.roi_heads = torch.nn.Module()
        self.roi_heads.keypoint_head = KeypointRCNNHeads(8, (16, 16))
        self.roi_heads.keypoint_predictor = KeypointRCNNPredictor(16, 5)

    def forward(self, pooled):
        return self.roi_heads.keypoint_predictor(self.roi_heads.keypoint_head(pooled))


def test_peaked_heatmaps_put_each_keypoint_at_a_corner_and_stay_there():
    """With random weights a heatmap is flat and its argmax jumps when a box moves by a hundredth of a
    pixel; peaked, each keypoint sits at its corner of the box and moves with the box only."""
    torch.manual_seed(0)
    branch = _KeypointBranch().eval()
    pooled = torch.randn(6, 8, 14, 14)
    _peak_keypoints(branch, (pooled,))
    with torch.no_grad():
        maps = branch(pooled)
    g = torch.Generator().manual_seed(1)
    xy = torch.rand(6, 2, generator=g) * 100
    rois = torch.cat([xy, xy + 20 + torch.rand(6, 2, generator=g) * 100], 1)
    keypoints, scores = heatmaps_to_keypoints(maps, rois)
    corners = torch.stack([rois[:, [0, 1]], rois[:, [2, 1]], rois[:, [0, 3]], rois[:, [2, 3]], rois[:, [0, 1]]], 1)
    # within a pixel and a half of the corner (the argmax is a pixel's centre inside the box)
    assert (keypoints[..., :2] - corners).abs().max() < 1.5
    assert scores.min() > 0.5 * PEAK  # the peak, moved by the random part of the features
    # a box 0.03 pixel larger crosses an integer width for some boxes: the keypoints move as little
    moved, _ = heatmaps_to_keypoints(maps, rois + torch.tensor([0.0, 0.0, 0.03, 0.03]))
    assert (moved - keypoints).abs().max() < 1.0
