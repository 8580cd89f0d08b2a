"""torchvision's detection operators exported by to_onnx (NonMaxSuppression, RoiAlign, MaxRoiPool,
DeformConv), checked on onnxruntime against eager with other numbers of boxes, none included."""

from __future__ import annotations

import pytest
import torch
from helpers import check_export

torchvision = pytest.importorskip("torchvision")


def _boxes(n: int, seed: int, size: float = 30.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * size
    return torch.cat([xy, xy + torch.rand(n, 2, generator=g) * size / 2 + 1], 1)


class Nms(torch.nn.Module):
    def forward(self, boxes, scores):
        return torchvision.ops.nms(boxes, scores, 0.4)


def test_nms_dynamic_boxes():
    g = torch.Generator().manual_seed(0)
    inputs = (_boxes(60, 1), torch.rand(60, generator=g))
    others = [(_boxes(n, n), torch.rand(n, generator=g)) for n in (25, 1, 0)]
    onx = check_export(Nms(), inputs, dynamic_shapes=({0: "boxes"}, {0: "boxes"}), inputs2=(others[0], None))
    assert any(n.op_type == "NonMaxSuppression" for n in onx.graph.node)
    from helpers import _check_one

    for other in others[1:]:  # one box, no box
        _check_one(onx, Nms(), other, {}, 1e-4, 1e-3, f"{other[0].shape[0]} boxes")


class Pool(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x, rois):
        return self.op(x, rois)


def _rois(n: int, seed: int, batch: int = 2) -> torch.Tensor:
    index = torch.randint(0, batch, (n, 1), generator=torch.Generator().manual_seed(seed)).float()
    return torch.cat([index, _boxes(n, seed)], 1)


@pytest.mark.parametrize(
    "name",
    ["roi_align", pytest.param("roi_align_aligned", marks=pytest.mark.slow), pytest.param("roi_pool", marks=pytest.mark.slow),
     pytest.param("ps_roi_align", marks=pytest.mark.slow)],
)
def test_roi_ops(name):
    ops = torchvision.ops
    op = {
        "roi_align": lambda x, r: ops.roi_align(x, r, (3, 4), 0.5, -1, False),
        "roi_align_aligned": lambda x, r: ops.roi_align(x, r, (2, 2), 0.5, 2, True),
        "roi_pool": lambda x, r: ops.roi_pool(x, r, (3, 2), 0.5),
        "ps_roi_align": lambda x, r: ops.ps_roi_align(x, r, (2, 2), 0.5, 2),
    }[name]
    channels = 8
    x, x2 = torch.rand(2, channels, 20, 24), torch.rand(2, channels, 17, 13)
    onx = check_export(Pool(op), (x, _rois(12, 0)), dynamic_shapes=({2: "h", 3: "w"}, {0: "rois"}),
                       inputs2=((x2, _rois(5, 1)), None))
    from helpers import _check_one

    _check_one(onx, Pool(op), (x2, _rois(0, 2)), {}, 1e-4, 1e-3, "no box")


class Deform(torch.nn.Module):
    def __init__(self, use_mask: bool):
        super().__init__()
        self.conv = torchvision.ops.DeformConv2d(4, 6, 3, padding=1, groups=2)
        self.offset = torch.nn.Conv2d(4, 2 * 9, 3, padding=1)
        self.use_mask = use_mask

    def forward(self, x):
        offset = self.offset(x)
        mask = torch.sigmoid(offset[:, :9]) if self.use_mask else None
        return self.conv(x, offset, mask)


@pytest.mark.parametrize("use_mask", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_deform_conv2d(use_mask):
    try:
        check_export(Deform(use_mask), (torch.rand(2, 4, 9, 11),), dynamic_shapes=({2: "h", 3: "w"},),
                     inputs2=((torch.rand(2, 4, 6, 7),), None))
    except Exception as e:  # noqa: BLE001
        if "DeformConv" in str(e) and "NOT_IMPLEMENTED" in str(e):
            pytest.skip(f"this onnxruntime has no DeformConv kernel: {str(e)[:200]}")
        raise
