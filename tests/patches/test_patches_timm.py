"""timm rewrites: ``float(size)`` keeps the size symbolic (rotary embeddings follow the image size)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import fx2onnx
from fx2onnx.patches import torch_export_patches
from fx2onnx.patches.auto import auto_patches
from fx2onnx.patches.context import active_patches
from fx2onnx.patches.shortcuts import any_symbolic, rewrite_shortcuts
from fx2onnx.patches.timm_fixes import float_of_size, rewrite_floats_of_sizes
from fx2onnx.validation import validate


def centered_grid(n):
    """timm's centered coordinates divided by the grid size."""
    return (torch.arange(0.5, n, dtype=torch.float32)) / float(n)


def check_export(model, args, dynamic_shapes, inputs2, **kwargs):
    """Exported, then checked against eager on other sizes, nothing frozen."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", fx2onnx.FrozenInputWarning)
        onx = fx2onnx.to_onnx(model, args, dynamic_shapes=dynamic_shapes, **kwargs)
    with torch.no_grad():
        report = validate(onx, model, inputs2[0])
    assert report.ok, report


class Grid(torch.nn.Module):
    def __init__(self, grid):
        super().__init__()
        self.grid = grid

    def forward(self, x):
        return x + self.grid(x.shape[1])


def test_float_of_size_keeps_python_values():
    assert float_of_size(3) == 3.0 and isinstance(float_of_size(3), float)
    assert float_of_size(np.int64(5)) == 5.0


def test_rewritten_function_is_the_same_in_eager():
    rewritten = rewrite_floats_of_sizes(centered_grid)
    assert "_fx2onnx_float_of_size(n)" in rewritten.source
    torch.testing.assert_close(rewritten.function(7), centered_grid(7))


def test_without_the_rewrite_the_size_is_refused_with_it_it_follows():
    x, x2 = torch.randn(2, 8), torch.randn(2, 11)
    with pytest.raises(fx2onnx.ExportError, match=r"became the constant 8 at .*float\(n\)"):
        fx2onnx.to_onnx(Grid(centered_grid), (x,), dynamic_shapes=({1: "n"},))
    check_export(Grid(rewrite_floats_of_sizes(centered_grid).function), (x,), dynamic_shapes=({1: "n"},),
                 inputs2=((x2,), None))


def test_timm_rotary_embedding_follows_the_image_size():
    pytest.importorskip("timm")
    from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3

    class Rope(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rope = RotaryEmbeddingDinoV3(dim=32, feat_shape=[4, 4])

        def forward(self, x):
            return self.rope.get_embed([x.shape[2] // 16, x.shape[3] // 16]) * x.mean()

    model = Rope().eval()
    x, x2 = torch.rand(1, 3, 64, 64), torch.rand(1, 3, 96, 128)
    dynamic = ({2: "height", 3: "width"},)
    with pytest.warns(fx2onnx.FrozenInputWarning, match=r"x.shape\[2\] // 16\) == 4"):
        fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic, patches=False)
    check_export(model, (x,), dynamic_shapes=dynamic, inputs2=((x2,), None))  # patches="auto"


def test_auto_patches_rewrite_timm_models_only():
    pytest.importorskip("timm")
    from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3

    with auto_patches("auto", torch.nn.Linear(2, 2)) as applied:
        assert applied == []
    with auto_patches("auto", RotaryEmbeddingDinoV3(dim=32, feat_shape=[4, 4])) as applied:
        assert applied == ["patch_timm"] and active_patches()["patch_timm"]
        import timm.layers.pos_embed_sincos as sincos

        assert "_fx2onnx_float_of_size" in sincos._build_grid.__code__.co_freevars
    import timm.layers.pos_embed_sincos as sincos

    assert "_fx2onnx_float_of_size" not in sincos._build_grid.__code__.co_freevars
    with torch_export_patches(patch_torch=False, patch_timm=True):
        with auto_patches("auto", RotaryEmbeddingDinoV3(dim=32, feat_shape=[4, 4])) as applied:
            assert applied == []


def test_rewritten_shortcut_is_the_same_in_eager_and_general_when_traced():
    def rows(x):
        n = x.shape[0]
        return x * 2 if n == 1 else x.sum(0, keepdim=True) * 2

    g = rewrite_shortcuts(rows, {"n == 1": False})
    assert "_fx2onnx_any_symbolic(n)" in g.source
    torch.testing.assert_close(g.function(torch.ones(1, 3)), rows(torch.ones(1, 3)))
    assert any_symbolic(3, torch.ones(1)) is False


def _timm_block(name):
    pytest.importorskip("timm")
    torch.manual_seed(0)
    if name == "tiny_vit":  # maps of B, H, W, C
        from timm.models.tiny_vit import TinyVitBlock

        return TinyVitBlock(dim=16, num_heads=2, window_size=7).eval(), (0, 1, 2), 3
    if name == "efficientvit_msra":  # maps of B, C, H, W
        from timm.models.efficientvit_msra import LocalWindowAttention

        block = LocalWindowAttention(dim=16, key_dim=8, num_heads=2, attn_ratio=1, resolution=7, window_resolution=7)
        return block.eval(), (0, 2, 3), 1
    if name == "mobilevit":  # maps of B, C, H, W unfolded into 2x2 patches (interpolated when not a multiple)
        from timm.models.mobilevit import MobileVitBlock

        return MobileVitBlock(16, 16, patch_size=2, transformer_dim=16, transformer_depth=1, num_heads=2).eval(), \
            (0, 2, 3), 1
    if name == "twins":  # maps of B, H, W, C, cropped after the windows when padded
        from timm.models.twins import LocallyGroupedAttn

        class Windows(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = LocallyGroupedAttn(dim=16, num_heads=2, ws=7)

            def forward(self, x):
                return self.attn(x.flatten(1, 2), (x.shape[1], x.shape[2]))

        return Windows().eval(), (0, 1, 2), 3
    from timm.models.vision_transformer_sam import Attention  # maps of B, H, W, C, relative positions

    block = Attention(dim=16, num_heads=2, use_rel_pos=True, input_size=(7, 7))
    with torch.no_grad():
        block.rel_pos_h.normal_(), block.rel_pos_w.normal_()  # zeros at creation: any table would match
    return block.eval(), (0, 1, 2), 3


@pytest.mark.parametrize("name", ["tiny_vit", "efficientvit_msra", "vision_transformer_sam", "twins", "mobilevit"])
@pytest.mark.slow
def test_timm_shortcuts_at_one_window_give_way_to_the_general_branch(name):
    """Exported with a map of one window (7x7), the block holds the shortcut of that size: refused at
    capture or for other sizes without the rewrite; with it, the graph follows every size."""
    block, (b, h, w), channels = _timm_block(name)

    def shaped(batch, height, width):
        shape = [0] * 4
        shape[b], shape[h], shape[w], shape[channels] = batch, height, width, 16
        return torch.randn(*shape)

    dynamic = ({b: "batch", h: "height", w: "width"},)
    x = shaped(2, 7, 7) if name != "mobilevit" else shaped(2, 8, 8)
    # refused (capture, condition) or, for MobileViT, a reshape onnxruntime rejects: never a wrong result
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    refused = (fx2onnx.ExportError, fx2onnx.FrozenInputError, fx2onnx.FrozenInputWarning, Fail)
    with pytest.raises(refused):
        with warnings.catch_warnings():
            warnings.simplefilter("error", fx2onnx.FrozenInputWarning)
            onx = fx2onnx.to_onnx(block, (x,), dynamic_shapes=dynamic, patches=False)
            validate(onx, block, (shaped(3, 9, 12),))
    with warnings.catch_warnings():
        warnings.simplefilter("error", fx2onnx.FrozenInputWarning)
        onx = fx2onnx.to_onnx(block, (x,), dynamic_shapes=dynamic)
    for size in ((3, 9, 12), (1, 7, 7), (2, 14, 5)):
        assert validate(onx, block, (shaped(*size),)).ok, size


@pytest.mark.slow
def test_the_size_conditions_are_those_of_the_capture():
    """A tiny Twins exports for every image size: re-tracing the decompositions (an in-place add makes
    them run) re-derives the shape checks of a view after the windows' crop, which read like a branch
    (``16 * (h // 32) * (w // 32) == 784``); the conditions kept are those of the capture, where the
    model's code runs."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("twins_svt_small", pretrained=False, num_classes=10, embed_dims=(8, 16, 16, 16),
                              depths=(1, 1, 1, 1), num_heads=(1, 1, 1, 1)).eval()
    check_export(model, (torch.rand(2, 3, 224, 224),), dynamic_shapes=({0: "b", 2: "h", 3: "w"},),
                 inputs2=((torch.rand(3, 3, 256, 288),), None))
