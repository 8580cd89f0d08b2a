"""Symbolic values: sizes (``sym_size``), arithmetic on SymInt, assertions, getitem.

A SymInt is a 0-d int64 tensor in ONNX, a SymFloat a 0-d float, a SymBool a 0-d bool.
"""

from __future__ import annotations

import math
import operator

import torch

from ..registry import converter
from ._common import input_rank, integer_floor_div, normalize_axis

aten = torch.ops.aten


@converter(aten.sym_size.int)
def convert_sym_size(ctx, node, x, dim):
    return ctx.dim_size(x, normalize_axis(dim, input_rank(ctx)))


@converter(aten.sym_numel.default, aten.numel.default)
def convert_numel(ctx, node, x):
    return ctx.op.Size(x)


@converter(aten.sym_storage_offset.default)
def convert_storage_offset(ctx, node, x):
    return ctx.const(0, torch.int64)


@converter(operator.getitem)
def convert_getitem(ctx, node, seq, index):
    if isinstance(seq, (list, tuple)):
        return seq[index]
    raise ctx.error(f"getitem on {type(seq).__name__} is not supported.")


#: an item of a tuple of complex values (the outputs of a no_grad block) is the pair it holds
convert_getitem.supports_complex = True


def _sym_dtype(ctx):
    return ctx.out_dtype()


def _sym_binary(op_type: str):
    def convert_sym_binary(ctx, node, a, b):
        dtype = _sym_dtype(ctx)
        if op_type in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "NotEqual"):
            both = [ctx.as_value(v) for v in (a, b)]
            dt = torch.float32 if any(ctx.dtype(v) == torch.float32 for v in both) else torch.int64
            x, y = ctx.cast(both[0], dt), ctx.cast(both[1], dt)
            if op_type == "NotEqual":
                return ctx.op.Not(ctx.op.Equal(x, y))
            return getattr(ctx.op, op_type)(x, y)
        x, y = ctx.as_value(a, dtype), ctx.as_value(b, dtype)
        if op_type == "FloorDiv":
            if dtype == torch.int64:
                return integer_floor_div(ctx, x, y)
            return ctx.op.Floor(ctx.op.Div(x, y))
        if op_type == "Mod":
            return ctx.op.Mod(x, y, fmod=0)
        if op_type in ("And", "Or"):
            return getattr(ctx.op, op_type)(ctx.cast(x, torch.bool), ctx.cast(y, torch.bool))
        return getattr(ctx.op, op_type)(x, y)

    convert_sym_binary.__name__ = f"convert_sym_{op_type.lower()}"
    return convert_sym_binary


for _target, _op in {
    operator.add: "Add",
    operator.sub: "Sub",
    operator.mul: "Mul",
    operator.floordiv: "FloorDiv",
    operator.mod: "Mod",
    operator.pow: "Pow",
    operator.eq: "Equal",
    operator.ne: "NotEqual",
    operator.lt: "Less",
    operator.le: "LessOrEqual",
    operator.gt: "Greater",
    operator.ge: "GreaterOrEqual",
    operator.and_: "And",
    operator.or_: "Or",
    torch.sym_max: "Max",
    torch.sym_min: "Min",
}.items():
    converter(_target)(_sym_binary(_op))


@converter(operator.truediv)
def convert_sym_truediv(ctx, node, a, b):
    return ctx.op.Div(ctx.as_value(a, torch.float32), ctx.as_value(b, torch.float32))


@converter(operator.neg)
def convert_sym_neg(ctx, node, a):
    return ctx.op.Neg(ctx.as_value(a))


@converter(torch.sym_not, operator.not_)
def convert_sym_not(ctx, node, a):
    return ctx.op.Not(ctx.as_value(a, torch.bool))


@converter(torch.sym_ite)
def convert_sym_ite(ctx, node, condition, then, otherwise):
    dtype = _sym_dtype(ctx)
    return ctx.op.Where(ctx.as_value(condition, torch.bool), ctx.as_value(then, dtype), ctx.as_value(otherwise, dtype))


@converter(torch.sym_float)
def convert_sym_float(ctx, node, a):
    return ctx.as_value(a, torch.float32)


@converter(torch.sym_int, math.floor, math.trunc)
def convert_sym_int(ctx, node, a):
    v = ctx.as_value(a)
    if ctx.dtype(v) in (torch.float32, torch.float64):
        v = ctx.op.Floor(v) if node.target is math.floor else ctx.op.Mul(ctx.op.Sign(v), ctx.op.Floor(ctx.op.Abs(v)))
    return ctx.cast(v, torch.int64)


@converter(math.ceil)
def convert_sym_ceil(ctx, node, a):
    return ctx.cast(ctx.op.Ceil(ctx.as_value(a, torch.float32)), torch.int64)


@converter(round)
def convert_sym_round(ctx, node, a, ndigits=None):
    """Python's ``round``: halves to even, like ONNX's Round; an int without ``ndigits``."""
    v = ctx.as_value(a, torch.float32)
    if ndigits is None:
        return ctx.cast(ctx.op.Round(v), torch.int64)
    scale = ctx.const(10.0 ** int(ndigits), torch.float32)
    return ctx.op.Div(ctx.op.Round(ctx.op.Mul(v, scale)), scale)


@converter(aten.scalar_tensor.default)
def convert_scalar_tensor(ctx, node, value, dtype=None, layout=None, device=None, pin_memory=None):
    return ctx.as_value(value, ctx.out_dtype())


@converter(aten._local_scalar_dense.default, aten.item.default)
def convert_item(ctx, node, x):
    # a 0-d (or one element) tensor becomes a scalar value
    v = ctx.op.Reshape(x, ctx.const([], torch.int64))
    return ctx.cast(v, ctx.out_dtype())


def _no_op(ctx, node, *args, **kwargs):
    """Runtime assertions and hints of torch.export: checked by torch at export time, nothing in ONNX."""
    return None


#: an assertion on a complex tensor (``_assert_tensor_metadata`` after a complex ``mul``) is dropped too
_no_op.supports_complex = True


for _target in (
    aten._assert_scalar.default,
    aten.sym_constrain_range_for_size.default,
    aten.sym_constrain_range.default,
    aten._assert_tensor_metadata.default,
    aten._assert_async.msg,
    aten._assert_async.default,
    torch._check,
    torch._check_is_size,
):
    converter(_target)(_no_op)
