"""diffusers rewrites: the position table of ``PatchEmbed`` follows the latent size."""

from __future__ import annotations

import warnings

import pytest
import torch

import fx2onnx
from fx2onnx.patches.auto import auto_patches
from fx2onnx.validation import validate


def _patch_embed():
    pytest.importorskip("diffusers")
    from diffusers.models.embeddings import PatchEmbed

    torch.manual_seed(0)
    return PatchEmbed(height=16, width=16, patch_size=2, in_channels=4, embed_dim=32).eval()


def test_patch_embed_table_follows_the_latent_size():
    """Exported at the configured 16x16 latent, the stored table is the graph's: other sizes are refused
    without the rewrite; with it (``patches="auto"``), the table is computed from the symbolic size."""
    model = _patch_embed()
    x = torch.randn(2, 4, 16, 16)
    dynamic = ({0: "batch", 2: "height", 3: "width"},)
    with pytest.raises((fx2onnx.FrozenInputWarning, fx2onnx.FrozenInputError)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", fx2onnx.FrozenInputWarning)
            onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic, patches=False)
            validate(onx, model, (torch.randn(3, 4, 24, 32),))
    with warnings.catch_warnings():
        warnings.simplefilter("error", fx2onnx.FrozenInputWarning)
        onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic)
    for shape in ((3, 4, 24, 32), (1, 4, 16, 16), (2, 4, 8, 40)):
        assert validate(onx, model, (torch.randn(*shape),)).ok, shape


def test_auto_patches_rewrite_diffusers_models_only():
    model = _patch_embed()
    with auto_patches("auto", torch.nn.Linear(2, 2)) as applied:
        assert applied == []
    with auto_patches("auto", model) as applied:
        assert applied == ["patch_diffusers"]
        from diffusers.models.embeddings import PatchEmbed

        assert "_fx2onnx_any_symbolic" in PatchEmbed.forward.__code__.co_freevars
    from diffusers.models.embeddings import PatchEmbed

    assert "_fx2onnx_any_symbolic" not in PatchEmbed.forward.__code__.co_freevars
