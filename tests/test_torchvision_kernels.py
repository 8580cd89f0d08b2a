"""The CPU kernels of torchvision's operators (fx2onnx.torchvision_kernels) against references:
torchvision's own pure-Python roi_align, loops written from the operators' definitions, and
small cases checked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from fx2onnx.torchvision_cpu import ensure_torchvision
from fx2onnx.torchvision_kernels import deform_conv2d, nms, ps_roi_align, ps_roi_pool, roi_align, roi_pool

torchvision = pytest.importorskip("torchvision")


def _rois(k: int, size: float, batch: int = 2, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(k, 2, generator=g) * size * 0.7 - 2
    wh = torch.rand(k, 2, generator=g) * size * 0.5 + 0.3
    index = torch.randint(0, batch, (k, 1), generator=g).float()
    return torch.cat([index, xy, xy + wh], 1)


def test_nms_by_hand():
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 5]])
    scores = torch.tensor([0.8, 0.9, 0.7, 0.6])
    # box 1 (best) removes box 0 (IoU 81/119 > 0.5); box 3 overlaps box 1 by 36/(100+50-36) < 0.5
    assert nms(boxes, scores, 0.5).tolist() == [1, 2, 3]
    assert nms(boxes, scores, 0.2).tolist() == [1, 2]
    assert nms(boxes[:0], scores[:0], 0.5).shape == (0,)


def test_nms_against_a_loop():
    g = torch.Generator().manual_seed(1)
    xy = torch.rand(200, 2, generator=g) * 50
    boxes = torch.cat([xy, xy + torch.rand(200, 2, generator=g) * 20 + 1], 1)
    scores = torch.rand(200, generator=g)
    iou = torchvision.ops.box_iou(boxes, boxes)
    expected, removed = [], set()
    for i in scores.argsort(descending=True).tolist():
        if i in removed:
            continue
        expected.append(i)
        removed |= {j for j in range(200) if iou[i, j] > 0.3}
    assert nms(boxes, scores, 0.3).tolist() == expected
    assert torchvision.ops.nms(boxes, scores, 0.3).tolist() == expected  # through torchvision's operator


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [-1, 2])
def test_roi_align_against_torchvision_python(aligned, sampling_ratio):
    from torchvision.ops.roi_align import _roi_align

    reference = _roi_align.__wrapped__  # torchvision's pure-Python version, not compiled
    x = torch.rand(2, 3, 12, 15)
    # inside the map: the Python version clamps the samples beyond a pixel outside, the C++ kernel
    # (and ours) counts them as zeros (test_roi_align_by_hand)
    rois = _rois(9, 14.0)
    rois[:, 1:] = rois[:, 1:].clamp(0, 11)
    for scale in (1.0, 0.5):
        got = roi_align(x, rois, scale, 3, 4, sampling_ratio, aligned)
        want = reference(x, rois, scale, 3, 4, sampling_ratio, aligned)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert roi_align(x, rois[:0], 1.0, 3, 4, -1, aligned).shape == (0, 3, 3, 4)


def test_roi_align_by_hand():
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    # one sample per bin at the bin's centre: (0.5, 0.5) is the mean of the 2x2 top-left pixels
    out = roi_align(x, torch.tensor([[0.0, 0, 0, 2, 2]]), 1.0, 2, 2, 1, True)
    assert out.flatten().tolist() == [0.0, 1.0, 4.0, 5.0]
    # one sample at (1, 1) without the half-pixel shift: pixel 5
    out = roi_align(x, torch.tensor([[0.0, 0, 0, 2, 2]]), 1.0, 1, 1, 1, False)
    assert out.item() == 5.0
    # samples at x in (-2, 0), y in (0.5, 1.5): the two at x = -2, more than a pixel outside, count
    # as zeros (torchvision's Python version would clamp them to column 0 and return 4)
    out = roi_align(x, torch.tensor([[0.0, -3, 0, 1, 2]]), 1.0, 1, 1, 2, False)
    assert out.item() == pytest.approx((0 + 0 + 2 + 6) / 4)


def _round(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def _roi_pool_loop(x, rois, scale, ph_, pw_):
    out = torch.zeros(rois.shape[0], x.shape[1], ph_, pw_)
    height, width = x.shape[2:]
    for n, (b, *box) in enumerate(rois.tolist()):
        x1, y1, x2, y2 = (_round(v * scale) for v in box)
        rw, rh = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
        for ph in range(ph_):
            for pw in range(pw_):
                hs = min(max(math.floor(ph * rh / ph_) + y1, 0), height)
                he = min(max(math.ceil((ph + 1) * rh / ph_) + y1, 0), height)
                ws = min(max(math.floor(pw * rw / pw_) + x1, 0), width)
                we = min(max(math.ceil((pw + 1) * rw / pw_) + x1, 0), width)
                if he > hs and we > ws:
                    out[n, :, ph, pw] = x[int(b), :, hs:he, ws:we].amax((1, 2))
    return out


def test_roi_pool_against_a_loop():
    x = torch.rand(2, 3, 10, 13)
    rois = _rois(8, 12.0)
    got, argmax = roi_pool(x, rois, 0.5, 3, 2)
    torch.testing.assert_close(got, _roi_pool_loop(x, rois, 0.5, 3, 2))
    flat = x.reshape(2, 3, -1)[rois[:, 0].long()]
    picked = torch.gather(flat, 2, argmax.long().clamp_min(0).reshape(8, 3, -1)).reshape(got.shape)
    torch.testing.assert_close(torch.where(argmax >= 0, picked, 0.0), got)
    out = torchvision.ops.roi_pool(x, rois, (3, 2), 0.5)
    torch.testing.assert_close(out, got)


def _ps_loop(x, rois, scale, ph_, pw_, align: bool, sampling_ratio: int = -1):
    c_out = x.shape[1] // (ph_ * pw_)
    out = torch.zeros(rois.shape[0], c_out, ph_, pw_)
    height, width = x.shape[2:]
    for n, (b, *box) in enumerate(rois.tolist()):
        for c in range(c_out):
            for ph in range(ph_):
                for pw in range(pw_):
                    plane = x[int(b), (c * ph_ + ph) * pw_ + pw : (c * ph_ + ph) * pw_ + pw + 1]
                    if align:
                        rois_one = torch.tensor([[0.0, *box]])
                        # one bin of a 1-channel roi_align over the same box (half-pixel shift, no minimum size)
                        full = roi_align(plane[None], rois_one, scale, ph_, pw_, sampling_ratio, True)
                        out[n, c, ph, pw] = full[0, 0, ph, pw]
                        continue
                    x1, y1, x2, y2 = (_round(v * scale) for v in box)
                    rw, rh = max(x2 - x1, 1), max(y2 - y1, 1)
                    hs = min(max(math.floor(ph * rh / ph_) + y1, 0), height - 1)
                    he = min(max(math.ceil((ph + 1) * rh / ph_) + y1, 0), height - 1)
                    ws = min(max(math.floor(pw * rw / pw_) + x1, 0), width - 1)
                    we = min(max(math.ceil((pw + 1) * rw / pw_) + x1, 0), width - 1)
                    if he > hs and we > ws:
                        out[n, c, ph, pw] = plane[0, hs:he, ws:we].mean()
    return out


def test_ps_roi_pool_against_a_loop():
    x = torch.rand(2, 2 * 6, 9, 11)
    rois = _rois(6, 10.0)
    got, mapping = ps_roi_pool(x, rois, 1.0, 2, 3)
    torch.testing.assert_close(got, _ps_loop(x, rois, 1.0, 2, 3, False), atol=1e-5, rtol=1e-5)
    assert mapping[0].flatten().tolist() == list(range(12))
    torch.testing.assert_close(torchvision.ops.ps_roi_pool(x, rois, (2, 3), 1.0), got)


def test_ps_roi_align_against_a_loop():
    x = torch.rand(2, 2 * 4, 9, 11)
    rois = _rois(5, 10.0)
    got, _ = ps_roi_align(x, rois, 1.0, 2, 2, 2)
    torch.testing.assert_close(got, _ps_loop(x, rois, 1.0, 2, 2, True, 2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torchvision.ops.ps_roi_align(x, rois, 2, 1.0, 2), got)


def test_deform_conv2d_references():
    x = torch.rand(2, 4, 7, 8)
    weight, bias = torch.rand(6, 2, 3, 3), torch.rand(6)
    zeros = torch.zeros(2, 2 * 9, 4, 4)
    ones = torch.ones(2, 9, 4, 4)
    args = (2, 2, 1, 1, 1, 1, 2, 1)
    conv = torch.nn.functional.conv2d(x, weight, bias, stride=2, padding=1, groups=2)
    # no offset: a grouped convolution, with or without a mask of ones
    torch.testing.assert_close(deform_conv2d(x, weight, zeros, ones, bias, *args, True), conv)
    torch.testing.assert_close(deform_conv2d(x, weight, zeros, ones[:, :0], bias, *args, False), conv)
    # no padding below: every tap stays inside the map
    args, zeros, ones = (2, 2, 0, 0, 1, 1, 2, 1), zeros[..., :3, :3], ones[..., :3, :3]
    # an offset of one pixel down everywhere: the convolution of the image moved one row up
    down = zeros.clone()
    down[:, 0::2] = 1.0
    moved = torch.cat([x[:, :, 1:], torch.zeros(2, 4, 1, 8)], 2)
    expected = torch.nn.functional.conv2d(moved, weight, bias, stride=2, groups=2)
    torch.testing.assert_close(deform_conv2d(x, weight, down, ones, bias, *args, True), expected)
    # half a pixel right with a mask of 0.5: the mean of two neighbours, halved
    right = zeros.clone()
    right[:, 1::2] = 0.5
    shifted = 0.5 * (x[..., :-1] + x[..., 1:]) * 0.5
    expected = torch.nn.functional.conv2d(shifted, weight, stride=2, groups=2) + bias[:, None, None]
    torch.testing.assert_close(deform_conv2d(x, weight, right, ones * 0.5, bias, *args, True), expected)
    got = torchvision.ops.deform_conv2d(x, right, weight, bias, stride=2, mask=ones * 0.5)
    torch.testing.assert_close(got, expected)


def test_roi_pool_backward_through_torchvision():
    assert ensure_torchvision() in ("native", "schemas")
    x = torch.rand(1, 2, 8, 8, requires_grad=True)
    rois = torch.tensor([[0.0, 1, 1, 6, 5]])
    torchvision.ops.roi_pool(x, rois, 2, 1.0).sum().backward()
    # each bin's maximum receives a gradient of one
    assert x.grad.sum().item() == 8.0 and set(x.grad.unique().tolist()) <= {0.0, 1.0, 2.0}


def test_roi_align_in_chunks_of_boxes(monkeypatch):
    """The boxes are summed a chunk at a time (memory bounded): several chunks give the same result."""
    import fx2onnx.torchvision_kernels as kernels

    x = torch.rand(2, 3, 12, 15)
    rois = _rois(9, 14.0)
    whole = roi_align(x, rois, 0.5, 3, 4, -1, False)
    monkeypatch.setattr(kernels, "_CHUNK", 200)  # a few boxes a chunk
    torch.testing.assert_close(roi_align(x, rois, 0.5, 3, 4, -1, False), whole, atol=0, rtol=0)
