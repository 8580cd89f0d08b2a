"""timm functions rewritten while exporting: sizes converted to floats keep their symbols, and
shortcuts taken at one size give way to the general code at a dynamic size.

``float(s)`` on a dynamic size asks torch.export for a Python float: it takes the
example's value and records that the size equals it. timm's rotary embeddings
(``timm.layers.pos_embed_sincos``: EVA, DINOv3, ViTs with RoPE) divide the grid
coordinates by ``float(size)``: exported as it is, the model divides by the
example's grid size at every size (torch.onnx.export drops the assertion and
returns such a model; its logits stay within 1e-5 of eager with random weights,
the error hides in the rotary phases). The rewritten functions call
:func:`torch.sym_float` on a symbolic size (a float kept symbolic in the graph)
and :class:`float` otherwise, so eager results do not change.

.. code-block:: python

    import torch
    from fx2onnx.patches.timm_fixes import float_of_size, rewrite_floats_of_sizes

    def scale(x):
        return x / float(x.shape[0])

    g = rewrite_floats_of_sizes(scale).function
    torch.testing.assert_close(g(torch.ones(4)), scale(torch.ones(4)))

Some timm blocks take a shortcut when the feature map is exactly one window
(``if H == self.window_size and W == self.window_size: attention on the whole map``,
else pad, partition into windows, attend, merge): both branches compute the same
at that size. Exported at such a size, the graph holds the shortcut only and other
sizes are refused (the condition is recorded). The rewritten methods
(:data:`SHORTCUTS`, :func:`fx2onnx.patches.shortcuts.rewrite_shortcuts`) take the general
branch when one of the sizes the condition reads is symbolic; eager calls and static sizes
keep the shortcut.
"""

from __future__ import annotations

import ast
import sys
from typing import Any, Callable

import torch

from .registry import Patch, source_guard
from .rewrite import RewrittenFunction, transform_function
from .shortcuts import calls_builtin, shortcut_patches

_HELPER = "_fx2onnx_float_of_size"

#: (module, function) whose ``float(...)`` calls are rewritten, when timm has imported the module
FUNCTIONS = (
    ("timm.layers.pos_embed_sincos", "_build_grid"),
    ("timm.layers.pos_embed_sincos", "_build_bands"),
)


_ONE_WINDOW = "one window: the windowed branch partitions the map into one window and computes the same"
_SAME_SIZE = "a bilinear interpolation of the map to its own size returns the map"

#: (module, function, condition, its value at a dynamic size, why the value holds at every size)
SHORTCUTS = (
    ("timm.models.tiny_vit", "TinyVitBlock.forward", "H == self.window_size and W == self.window_size", False, _ONE_WINDOW),
    ("timm.models.tiny_vit", "TinyVitBlock.forward", "pad_b > 0 or pad_r > 0", True,
     "padding by zero rows and columns, then cropping them, changes nothing"),
    ("timm.models.efficientvit_msra", "LocalWindowAttention.forward", "H == ws and W == ws", False, _ONE_WINDOW),
    ("timm.models.vision_transformer_sam", "get_rel_pos", "rel_pos.shape[0] != max_rel_dist", True,
     "a linear interpolation to the table's own length returns the table (the length stays symbolic: int() kept)"),
    ("timm.models.twins", "LocallyGroupedAttn.forward", "pad_r > 0 or pad_b > 0", True,
     "cropping the map to its own size changes nothing"),
    ("timm.models.mobilevit", "MobileVitBlock.forward", "new_h != H or new_w != W", True, _SAME_SIZE),
    ("timm.models.mobilevit", "MobileVitV2Block.forward", "new_h != H or new_w != W", True, _SAME_SIZE),
    ("timm.models.qwen3_vit", "resample_pos_embed_grid", "H == grid_size and W == grid_size", False,
     "a bilinear interpolation (corners aligned) to the grid's own size returns the table"),
)


def float_of_size(value: Any) -> Any:
    """``torch.sym_float(value)`` for a symbolic integer, ``float(value)`` otherwise."""
    if isinstance(value, torch.SymInt):
        return torch.sym_float(value)
    return float(value)


class _FloatCalls(ast.NodeTransformer):
    def __init__(self) -> None:
        self.lines: list[int] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if calls_builtin(node, "float"):
            self.lines.append(node.lineno)
            return ast.copy_location(ast.Call(func=ast.Name(id=_HELPER, ctx=ast.Load()), args=node.args, keywords=[]),
                                     node)
        return node


def rewrite_floats_of_sizes(function: Callable[..., Any]) -> RewrittenFunction:
    """``function`` with every ``float(x)`` call replaced by :func:`float_of_size`."""
    calls = _FloatCalls()
    return transform_function(function, calls.visit, {_HELPER: float_of_size}, lambda: calls.lines)


def timm_patches() -> list[Patch]:
    """The rewrites of :data:`FUNCTIONS` and :data:`SHORTCUTS` for the timm modules already imported."""
    patches = shortcut_patches("timm", SHORTCUTS)
    for module, attribute in FUNCTIONS:
        if module not in sys.modules:
            continue
        patches.append(Patch(
            name=f"timm_{attribute.strip('_')}_symbolic_floats",
            kind="timm",
            target=f"{module}.{attribute}",
            make=lambda original: rewrite_floats_of_sizes(original).function,
            guard=source_guard(attribute, "float(", absent="no float(...) call left to rewrite"),
            doc="float(size) becomes torch.sym_float(size) for a symbolic size: the grid follows the image size",
        ))
    return patches

