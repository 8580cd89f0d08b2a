"""Complex tensors are carried as real pairs; nodes without such a converter are refused.

A complex tensor of shape ``S`` becomes, in ONNX, a float tensor of shape
``S + [2]`` (real part, imaginary part), what :func:`torch.view_as_real` gives
(``complex64`` -> ``float32``, ``complex128`` -> ``float64``). A model input or
output that is complex is therefore such a pair: users feed
``torch.view_as_real(x)`` and :func:`fx2onnx.validate` does it for them.

A node taking or producing a complex tensor is converted by the converter
registered with :func:`fx2onnx.convert.registry.complex_converter` for its target
(``convert/ops/complex.py``, ``convert/ops/fft.py``), a built-in converter with
the attribute ``supports_complex = True`` or any converter given through
:class:`fx2onnx.Dispatcher` (it receives the pairs). Any other node is refused
before the conversion with a message naming it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from . import registry
from .errors import ConversionError, target_name

#: the real dtype of each complex dtype (the dtype of the pair)
PAIR_DTYPE: dict[torch.dtype, torch.dtype] = {
    torch.complex64: torch.float32,
    torch.complex128: torch.float64,
    torch.complex32: torch.float16,
}


def pair_dtype(dtype: torch.dtype) -> torch.dtype:
    """``complex64`` -> ``float32``; a real dtype is returned unchanged."""
    return PAIR_DTYPE.get(dtype, dtype)


def _complex_dtype(value: Any) -> torch.dtype | None:
    """The first complex dtype found in a fake value (tensors, tuples, lists)."""
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor) and leaf.dtype.is_complex:
            return leaf.dtype
    return None


def _complex_input(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.dtype] | None:
    for arg in node.all_input_nodes:
        dtype = _complex_dtype(arg.meta.get("val"))
        if dtype is not None:
            return arg, dtype
    return None


def involves_complex(node: torch.fx.Node) -> bool:
    """Whether ``node`` takes or produces a complex tensor."""
    return _complex_dtype(node.meta.get("val")) is not None or _complex_input(node) is not None


def _accepts_complex(target: Any, dispatcher: Any) -> bool:
    if dispatcher is not None and dispatcher.find(target) is not None:
        return True
    return registry.lookup_complex(target) is not None


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
                f"Node {node.name!r} ({target_name(node.target)}) {what}: no converter handles "
                f"complex values for {target_name(node.target)}. Complex tensors are carried as real "
                f"pairs (a trailing dimension of 2, like torch.view_as_real) for polar, abs, angle, "
                f"view_as_real/view_as_complex, arithmetic, exp, log, matmul and the FFTs. Rewrite this part with the real "
                f"and imaginary parts as real tensors (torch.view_as_real gives them), or give a "
                f"converter working on the pairs through fx2onnx.Dispatcher.",
                node,
            )


def _value_type(val: Any) -> tuple[torch.dtype | None, list | None]:
    """dtype and shape (with symbols) of a fake value."""
    if isinstance(val, torch.Tensor):
        if val.dtype.is_complex:  # carried as a real pair: a trailing dimension of 2
            return pair_dtype(val.dtype), [*val.shape, 2]
        return val.dtype, list(val.shape)
    if isinstance(val, (torch.SymBool, bool)):
        return torch.bool, []
    if isinstance(val, (torch.SymInt, int)):
        return torch.int64, []
    if isinstance(val, (torch.SymFloat, float)):
        return torch.float32, []
    return None, None
