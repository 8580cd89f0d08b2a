"""What the FX graph proves about an index tensor, read before converting an indexing operator.

An index computed by ``torch.arange`` from a non-negative start (transformers' padding mask
``attention_mask[batch_idx, kv_idx]`` in every decoder, position gathers) needs no wrapping of
negative values (``idx + (idx < 0) * size``: six ONNX nodes per index). It is proven from the
operators producing the index (starts and steps compared symbolically, without adding a guard),
never assumed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ._common import fake_of

aten = torch.ops.aten

_ARANGES = (aten.arange.default, aten.arange.start, aten.arange.start_step)
# operators that keep every value of their first argument (a subset or a copy of them)
_SAME_VALUES = (
    aten.unsqueeze.default, aten.view.default, aten.reshape.default, aten.expand.default, aten.slice.Tensor,
    aten.clone.default, aten.alias.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
    aten._to_copy.default, aten.contiguous.default, aten.select.int,
)
_MAX_DEPTH = 24


def _known(condition: Any) -> bool:
    if isinstance(condition, bool):
        return condition
    try:
        return bool(statically_known_true(condition))
    except Exception:  # noqa: BLE001 - a value torch cannot decide is not known
        return False


def _arange_parts(node: torch.fx.Node) -> tuple[Any, Any, Any]:
    """``(start, end, step)`` of an arange node."""
    args = list(node.args)
    if node.target is aten.arange.default:
        return 0, fake_of(args[0]), 1
    step = fake_of(args[2]) if len(args) > 2 else node.kwargs.get("step", 1)
    return fake_of(args[0]), fake_of(args[1]), step


def _is_integer_arange(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and not val.dtype.is_floating_point and not val.dtype.is_complex


def known_non_negative(arg: Any, depth: int = 0) -> bool:
    """True when every value of the index ``arg`` is >= 0 by construction."""
    if isinstance(arg, (bool, int, torch.SymInt)):
        return _known(arg >= 0)
    if not isinstance(arg, torch.fx.Node) or depth > _MAX_DEPTH:
        return False
    val = arg.meta.get("val")
    if isinstance(val, torch.Tensor) and val.dtype == torch.bool:
        return True  # a mask becomes the positions of its true values
    if arg.op != "call_function":
        return False
    if arg.target in _ARANGES:
        start, _, step = _arange_parts(arg)
        return _is_integer_arange(arg) and _known(start >= 0) and _known(step > 0)
    if arg.target in _SAME_VALUES:
        return known_non_negative(arg.args[0], depth + 1)
    if arg.target in (aten.add.Tensor, aten.add.Scalar, aten.mul.Tensor, aten.mul.Scalar):
        alpha = arg.kwargs.get("alpha", 1)
        return _known(alpha >= 0) and all(known_non_negative(a, depth + 1) for a in arg.args[:2])
    return False
