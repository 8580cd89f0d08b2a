"""Torch fixes: each test fails without its patch."""

from __future__ import annotations

import pytest
import torch

from fx2onnx.patches import torch_export_patches
from fx2onnx.patches.torch_fixes import DynamicDimensionBecameStatic


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class Specialize(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 4:
            return x * 2
        return x


def _named_equal_dims():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    ds = ({0: torch.export.Dim("a")}, {0: torch.export.Dim("b")})
    return (x, y), ds


def test_catch_constraints():
    args, ds = _named_equal_dims()
    with pytest.raises(Exception, match="Constraints violated"):
        torch.export.export(Add(), args, dynamic_shapes=ds, strict=False)
    with pytest.warns(UserWarning, match="ignored a constraint violation"):
        with torch_export_patches(catch_constraints=True):
            ep = torch.export.export(Add(), args, dynamic_shapes=ds, strict=False)
    # both dimensions are still dynamic, merged into one
    x, y = torch.randn(5, 4), torch.randn(5, 4)
    torch.testing.assert_close(ep.module()(x, y), x + y)
    # restored: the error comes back
    with pytest.raises(Exception, match="Constraints violated"):
        torch.export.export(Add(), args, dynamic_shapes=ds, strict=False)


def test_catch_constraints_disabled():
    args, ds = _named_equal_dims()
    with torch_export_patches(catch_constraints=False):
        with pytest.raises(Exception, match="Constraints violated"):
            torch.export.export(Add(), args, dynamic_shapes=ds, strict=False)


def test_stop_if_static():
    ds = ({0: torch.export.Dim.DYNAMIC},)
    x = (torch.randn(4, 3),)
    # without the patch: a generic error at the end of the export
    with pytest.raises(Exception, match="specialized it to be a constant") as plain:
        torch.export.export(Specialize(), x, dynamic_shapes=ds, strict=False)
    assert not isinstance(plain.value, DynamicDimensionBecameStatic)
    # with the patch: the export stops where it happens, naming the input and the line
    with torch_export_patches(stop_if_static=1):
        with pytest.raises(
            DynamicDimensionBecameStatic, match=r"L\['x'\].size\(\)\[0\].*= 4.*test_patches_torch.py"
        ):
            torch.export.export(Specialize(), x, dynamic_shapes=ds, strict=False)


class SlidingWindows(torch.nn.Module):
    """A depthwise causal convolution written with unfold, as Inkling 2 does."""

    def forward(self, x, w):
        batch, seq, _ = x.shape
        context = torch.nn.functional.pad(x.transpose(1, 2), (3, 0))
        windows = context.unfold(-1, 4, 1).flip(-1).transpose(1, 2)
        return (windows.reshape(batch, seq, 2, -1, 4) * w).sum(-1)


def test_layout_without_guards():
    x, w = torch.randn(2, 3, 8), torch.randn(2, 3, 2, 1, 4)
    seq = torch.export.Dim.DYNAMIC
    ds = ({1: seq}, {1: seq})
    # without the patch: the layout of `windows * w` guards `seq < 4`
    ep = torch.export.export(SlidingWindows(), (x, w), dynamic_shapes=ds, strict=False)
    assert [(r.lower, r.upper) for r in ep.range_constraints.values()] == [(2, 3)]
    with torch_export_patches(patch_torch=True):
        ep = torch.export.export(SlidingWindows(), (x, w), dynamic_shapes=ds, strict=False)
    (bounds,) = ep.range_constraints.values()
    assert bounds.upper > 4096
    for seq_len in (1, 2, 4, 9):
        x, w = torch.randn(2, seq_len, 8), torch.randn(2, seq_len, 2, 1, 4)
        torch.testing.assert_close(ep.module()(x, w), SlidingWindows()(x, w))


class FeatureMapGrid(torch.nn.Module):
    """The sizes of a feature map as a tensor and its reference points (a multi-scale deformable attention's)."""

    def forward(self, x):
        height, width = x.shape[2], x.shape[3]
        sizes = torch.as_tensor([(height, width)], dtype=torch.long, device=x.device)
        points = torch.linspace(0.5, height - 0.5, height, dtype=x.dtype, device=x.device)
        return x.mean(1) * points[:, None] + sizes.prod().to(x.dtype)


def test_sizes_as_tensor_and_linspace_stay_symbolic():
    dims = ({2: torch.export.Dim("height"), 3: torch.export.Dim("width")},)
    # without the patches: both freeze the example's height (torch.export raises on the named dimension)
    with pytest.raises(Exception, match="height"):
        torch.export.export(FeatureMapGrid(), (torch.randn(1, 3, 8, 12),), dynamic_shapes=dims, strict=False)
    with torch_export_patches(patch_torch=True):
        ep = torch.export.export(FeatureMapGrid(), (torch.randn(1, 3, 8, 12),), dynamic_shapes=dims, strict=False)
    for shape in ((1, 3, 8, 12), (1, 3, 7, 5), (1, 3, 1, 3), (1, 3, 33, 4)):
        x = torch.randn(shape)
        torch.testing.assert_close(ep.module()(x), FeatureMapGrid()(x))


@pytest.mark.slow
def test_sizes_as_tensor_and_linspace_in_onnx(tmp_path):
    import numpy as np
    import onnxruntime

    import fx2onnx

    path = str(tmp_path / "grid.onnx")
    fx2onnx.to_onnx(FeatureMapGrid(), (torch.randn(1, 3, 8, 12),), dynamic_shapes=({2: "height", 3: "width"},),
                    filename=path, patches=True)  # (a transformers model gets them from patches="auto")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for shape in ((1, 3, 8, 12), (1, 3, 7, 5), (1, 3, 1, 3), (1, 3, 33, 4)):
        x = torch.randn(shape)
        (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        np.testing.assert_allclose(got, FeatureMapGrid()(x).numpy(), rtol=1e-6, atol=1e-5)


@pytest.mark.slow  # Mask2Former's Swin backbone, pixel decoder and transformer decoder: minutes on a loaded machine
def test_mask2former_exported_for_any_image_size(tmp_path):
    """Mask2Former's pixel decoder (sizes as a tensor, reference points by linspace) no longer freezes the example's
    feature map sizes: another image size gives eager's masks (max abs diff 11.5 before the patches)."""
    import numpy as np
    import onnxruntime

    import fx2onnx
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    model, _ = tiny_task_model(get_task_architecture("universal-segmentation", "mask2former"))

    class Segmenter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, pixel_values):
            out = self.model(pixel_values=pixel_values)
            return out.class_queries_logits, out.masks_queries_logits

    path = str(tmp_path / "mask2former.onnx")
    fx2onnx.to_onnx(Segmenter(), (torch.randn(2, 3, 64, 96),),
                    dynamic_shapes=({0: "batch", 2: "height", 3: "width"},), filename=path)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    # (the last Swin stage no larger than its tiny window of 2 in both sizes: that branch stays the example's)
    for shape in ((2, 3, 64, 96), (3, 3, 96, 64)):
        x = torch.randn(shape)
        with torch.no_grad():
            expected = Segmenter()(x)
        got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e.numpy(), atol=1e-3 * max(1.0, float(e.abs().max())))
