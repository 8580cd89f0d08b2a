"""diffusers functions rewritten while exporting: shortcuts taken at the configured size give
way to the general code at a dynamic size (see :mod:`fx2onnx.patches.shortcuts`).

diffusers' ``PatchEmbed`` (DiT, PixArt, the SD3 family without a cropped table) keeps the
sine-cosine position table of the sample size it was configured with and recomputes it only
when the latent has another size. Exported at the configured size, the graph holds the stored
table and other latent sizes were refused; rewritten, the table is computed from the symbolic
height and width, which gives the stored table at the configured size.
"""

from __future__ import annotations

from .registry import Patch
from .shortcuts import shortcut_patches

#: (module, function, condition, its value at a dynamic size, why the value holds at every size)
SHORTCUTS = (
    ("diffusers.models.embeddings", "PatchEmbed.forward", "self.height != height or self.width != width", True,
     "the table recomputed at the configured size is the stored one (both from get_2d_sincos_pos_embed)"),
)


def diffusers_patches() -> list[Patch]:
    """The rewrites of :data:`SHORTCUTS` for the diffusers modules already imported."""
    return shortcut_patches("diffusers", SHORTCUTS)
