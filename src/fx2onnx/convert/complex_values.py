"""Rejects complex tensors before the conversion, with a message naming the node.

onnxruntime runs almost no operator on ``complex64``: a model with complex
values converts but fails when loaded (``InvalidGraph``). The exporter rather
stops at the first node producing or taking a complex tensor, unless its
converter says it handles them: a built-in converter with the attribute
``supports_complex = True`` or any converter given through
:class:`fx2onnx.Dispatcher` (the user takes responsibility for it).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from . import registry
from .errors import ConversionError, target_name


def _complex_dtype(value: Any) -> torch.dtype | None:
    """The first complex dtype found in a fake value (tensors, tuples, lists)."""
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor) and leaf.dtype.is_complex:
            return leaf.dtype
    return None


def _accepts_complex(target: Any, dispatcher: Any) -> bool:
    if dispatcher is not None and dispatcher.find(target) is not None:
        return True
    fn = registry.lookup(target)
    return bool(getattr(fn, "supports_complex", False))


def _complex_input(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.dtype] | None:
    for arg in node.all_input_nodes:
        dtype = _complex_dtype(arg.meta.get("val"))
        if dtype is not None:
            return arg, dtype
    return None


def check_no_complex(ep: torch.export.ExportedProgram, dispatcher: Any = None) -> None:
    """Raises :class:`fx2onnx.ConversionError` at the first node with a complex tensor it cannot convert."""
    for gm in ep.graph_module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        for node in gm.graph.nodes:
            if node.op != "call_function" or _accepts_complex(node.target, dispatcher):
                continue
            produced = _complex_dtype(node.meta.get("val"))
            taken = _complex_input(node)
            if produced is None and taken is None:
                continue
            if taken is not None:
                what = f"takes a complex tensor ({taken[1]}, from {taken[0].name!r})"
            else:
                what = f"produces a complex tensor ({produced})"
            raise ConversionError(
                f"Node {node.name!r} ({target_name(node.target)}) {what}: complex tensors are not "
                f"supported by this exporter (onnxruntime runs almost no operator on complex "
                f"values). Rewrite the model with the real and imaginary parts as two real tensors "
                f"(torch.view_as_real gives them), or give a converter handling complex values "
                f"through fx2onnx.Dispatcher.",
                node,
            )
