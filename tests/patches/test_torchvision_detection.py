"""torchvision's detection and segmentation models through to_onnx with dynamic image sizes: the
patches of fx2onnx.patches.torchvision_detection, the capture, the ONNX model against eager on
images of other sizes (other numbers of boxes)."""

from __future__ import annotations

import math

import onnxruntime
import pytest
import torch
from torch.utils import _pytree as pytree

import fx2onnx
from fx2onnx.patches.registry import PatchSet
from fx2onnx.patches.torchvision_detection import torchvision_patches

torchvision = pytest.importorskip("torchvision")

from fx2onnx.zoo.torchvision_models import build_torchvision_model, detecting_nothing, match_detections  # noqa: E402


def test_every_patch_applies():
    with PatchSet(torchvision_patches()) as patches:
        reports = patches.reports
    assert reports and all(r.status == "applied" for r in reports), [(r.name, r.reason) for r in reports]


def test_batched_nms_captured_with_a_dynamic_number_of_boxes():
    class Keep(torch.nn.Module):
        def forward(self, boxes, scores, labels):
            return torchvision.ops.batched_nms(boxes, scores, labels, 0.5)

    g = torch.Generator().manual_seed(0)
    xy = torch.rand(3000, 2, generator=g) * 100
    boxes = torch.cat([xy, xy + 10], 1)
    scores, labels = torch.rand(3000, generator=g), torch.randint(0, 3, (3000,), generator=g)
    dim = torch.export.Dim("boxes")
    with PatchSet(torchvision_patches()):  # above 4000 coordinates batched_nms loops over the classes
        ep = torch.export.export(Keep(), (boxes, scores, labels), dynamic_shapes=({0: dim}, {0: dim}, {0: dim}))
    assert sum(n.target == torch.ops.torchvision.nms.default for n in ep.graph.nodes) == 1
    for n in (3000, 7, 0):
        torch.testing.assert_close(ep.module()(boxes[:n], scores[:n], labels[:n]), Keep()(boxes[:n], scores[:n], labels[:n]))


def _run(path: str, args: tuple) -> list:
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, [x.numpy() for x in pytree.tree_leaves(args)])))


def check_torchvision_model(name: str, tmp_path) -> None:
    """Exports ``name`` with to_onnx (patches="auto") and checks it on every input of its case."""
    case = build_torchvision_model(name)
    path = str(tmp_path / f"{name}.onnx")
    fx2onnx.to_onnx(case.model, case.export_args, dynamic_shapes=case.dynamic_shapes, filename=path)
    for args in [case.export_args] + case.check_args:
        with torch.no_grad():
            want = case.model(*args)
        got = pytree.tree_unflatten(_run(path, args), pytree.tree_structure(want))
        if case.task == "segmentation":
            for key in want:
                torch.testing.assert_close(torch.from_numpy(got[key]), want[key], atol=1e-3, rtol=1e-3)
            continue
        counts = [w["boxes"].shape[0] for w in want]
        assert sum(counts) > 0, "the case should detect something"
        for w, o in zip(want, got):
            diff = match_detections(w, o)
            assert math.isfinite(diff) and diff < 1e-2, (name, counts, diff)


@pytest.mark.slow  # about two minutes on 2 cores
def test_faster_rcnn_mobilenet(tmp_path):
    check_torchvision_model("fasterrcnn_mobilenet_v3_large_fpn", tmp_path)


@pytest.mark.slow  # about a minute on 2 cores
def test_ssdlite_on_an_image_detecting_nothing(tmp_path):
    case = detecting_nothing(build_torchvision_model("ssdlite320_mobilenet_v3_large"))
    path = str(tmp_path / "ssdlite.onnx")
    fx2onnx.to_onnx(case.model, case.export_args, dynamic_shapes=case.dynamic_shapes, filename=path)
    for args in [case.export_args] + case.check_args:
        with torch.no_grad():
            want = case.model(*args)
        got = pytree.tree_unflatten(_run(path, args), pytree.tree_structure(want))
        assert [match_detections(w, o) < 1e-2 for w, o in zip(want, got)] == [True, True]
        if args is case.check_args[0]:  # one image detects nothing, the other something
            assert sorted(w["boxes"].shape[0] == 0 for w in want) == [False, True]
            assert sorted(o["boxes"].shape[0] == 0 for o in got) == [False, True]


@pytest.mark.slow  # about half a minute
def test_lraspp_segmentation(tmp_path):
    check_torchvision_model("lraspp_mobilenet_v3_large", tmp_path)


def test_paste_masks_as_products(monkeypatch):
    from torchvision.models.detection import transform

    import fx2onnx.patches.torchvision_detection as patches

    pasted = patches.make_paste_masks(transform.paste_masks_in_image)
    monkeypatch.setattr(patches, "_exporting", lambda: True)
    g = torch.Generator().manual_seed(0)
    masks = torch.rand(7, 1, 28, 28, generator=g)
    xy = torch.rand(7, 2, generator=g) * 80 - 10
    boxes = torch.cat([xy, xy + torch.rand(7, 2, generator=g) * 60], 1)
    boxes[3] = torch.tensor([5.0, 5, 5.2, 5.3])  # one pixel
    want = transform.paste_masks_in_image(masks, boxes, (90, 70))
    torch.testing.assert_close(pasted(masks, boxes, (90, 70)), want, atol=1e-5, rtol=1e-5)
    assert pasted(masks[:0], boxes[:0], (90, 70)).shape == (0, 1, 90, 70)


# Mask R-CNN is exported and checked against eager on images of other sizes by the gallery page
# _doc/examples/03_to_onnx/plot_torchvision_detection.py (four minutes on 2 cores: once per CI run)


def test_heatmaps_to_keypoints_as_products(monkeypatch):
    from torchvision.models.detection import roi_heads

    import fx2onnx.patches.torchvision_detection as patches

    batched = patches.make_heatmaps_to_keypoints(roi_heads.heatmaps_to_keypoints)
    monkeypatch.setattr(patches, "_exporting", lambda: True)
    g = torch.Generator().manual_seed(0)
    maps = torch.randn(9, 5, 56, 56, generator=g)
    xy = torch.rand(9, 2, generator=g) * 80
    rois = torch.cat([xy, xy + torch.rand(9, 2, generator=g) * 120], 1)
    rois[3] = torch.tensor([5.0, 5, 5.2, 5.3])  # smaller than a pixel
    want = roi_heads.heatmaps_to_keypoints(maps, rois)
    got = batched(maps, rois)
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(got[1], want[1], atol=1e-4, rtol=1e-4)
    assert [t.shape for t in batched(maps[:0], rois[:0])] == [(0, 5, 3), (0, 5)]


@pytest.mark.slow  # a few seconds, ten on a loaded machine
def test_heatmaps_to_keypoints_through_onnx(tmp_path):
    """Keypoint R-CNN's keypoints read from heatmaps, exported with a dynamic number of boxes: the
    ONNX model equals eager on other boxes (none included)."""
    from torchvision.models.detection import roi_heads

    class Keypoints(torch.nn.Module):
        def forward(self, maps, rois):
            return roi_heads.heatmaps_to_keypoints(maps, rois)

    g = torch.Generator().manual_seed(0)

    def boxes(count):
        xy = torch.rand(count, 2, generator=g) * 80
        rois = torch.cat([xy, xy + torch.rand(count, 2, generator=g) * 120], 1)
        return torch.randn(count, 5, 56, 56, generator=g), rois

    path = str(tmp_path / "keypoints.onnx")
    with PatchSet(torchvision_patches()):
        fx2onnx.to_onnx(Keypoints(), boxes(6), dynamic_shapes=({0: "boxes"}, {0: "boxes"}), filename=path,
                        patches=False)
    for count in (9, 1, 0):
        maps, rois = boxes(count)
        want = roi_heads.heatmaps_to_keypoints(maps, rois)
        got = _run(path, (maps, rois))
        torch.testing.assert_close(torch.from_numpy(got[0]), want[0], atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.from_numpy(got[1]), want[1], atol=1e-4, rtol=1e-4)


@pytest.mark.slow  # 5-25 s each on a loaded machine
@pytest.mark.parametrize("head", ["box", "mask"])
def test_v2_heads_with_batch_norms_capture_any_number_of_boxes(head, tmp_path):
    """The v2 R-CNNs' convolutional heads over the pooled boxes hold batch norms (aten's batch_norm
    guards on the number of boxes being zero): exported over the boxes scoring above a threshold
    (an unbacked count), the ONNX model equals eager on other scores, none above included."""
    from torchvision.models.detection.faster_rcnn import FastRCNNConvFCHead
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads

    torch.manual_seed(0)
    if head == "box":
        layers = FastRCNNConvFCHead((8, 7, 7), [16, 16], [32], norm_layer=torch.nn.BatchNorm2d)
    else:
        layers = MaskRCNNHeads(8, [16, 16], 1, norm_layer=torch.nn.BatchNorm2d)
    for norm in (m for m in layers.modules() if isinstance(m, torch.nn.BatchNorm2d)):
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
        torch.nn.init.uniform_(norm.weight, 0.5, 1.5)
        torch.nn.init.uniform_(norm.bias, -1, 1)

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = layers.eval()

        def forward(self, pooled, scores):
            return self.layers(pooled[scores > 0.5])

    g = torch.Generator().manual_seed(0)
    pooled, scores = torch.randn(12, 8, 7, 7, generator=g), torch.rand(12, generator=g)
    path = str(tmp_path / f"{head}.onnx")
    with PatchSet(torchvision_patches()):
        fx2onnx.to_onnx(Head(), (pooled, scores), dynamic_shapes=({0: "boxes"}, {0: "boxes"}), filename=path,
                        patches=False)
    for count, low in ((12, 0.0), (5, 0.0), (12, -1.0)):  # -1: no score above the threshold
        args = (torch.randn(count, 8, 7, 7, generator=g), torch.rand(count, generator=g) + low)
        with torch.no_grad():
            want = Head()(*args)
        got = torch.from_numpy(_run(path, args)[0])
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
