"""Complex tensors as real pairs: view_as_real/complex, polar, abs, angle, arithmetic, exp, log, matmul.

A complex tensor of shape ``S`` is carried as a float tensor of shape ``S + [2]``
(real part, imaginary part), like :func:`torch.view_as_real` (see
:mod:`fx2onnx.convert.complex_values`). The interpreter calls these converters
instead of the real ones whenever a node takes or produces a complex tensor;
operators which always involve complex values (``view_as_real``, ``polar``...)
are also registered as regular converters.
"""

from __future__ import annotations

import math

import torch

from ..complex_values import pair_dtype
from ..registry import complex_converter, converter
from ._common import fake_of
from ._math import atan2_value
from .shape import (
    convert_narrow,
    convert_select,
    convert_slice,
    convert_squeeze,
    convert_unsqueeze,
)

aten = torch.ops.aten


def is_complex_arg(fx_arg) -> bool:
    """Whether an FX argument (node or Python constant) is complex."""
    v = fake_of(fx_arg)
    if isinstance(v, torch.Tensor):
        return v.dtype.is_complex
    return isinstance(v, complex)


def out_pair_dtype(ctx, index: int | None = None) -> torch.dtype:
    """The real dtype carrying the current node's (complex) output."""
    return pair_dtype(ctx.out_dtype(index))


def complex_rank(fx_arg) -> int:
    """Rank of the complex tensor (without the trailing pair dimension)."""
    v = fake_of(fx_arg)
    return v.dim() if isinstance(v, torch.Tensor) else 0


def real_part(ctx, x):
    return ctx.op.Gather(x, ctx.const(0, torch.int64), axis=-1)


def imag_part(ctx, x):
    return ctx.op.Gather(x, ctx.const(1, torch.int64), axis=-1)


def make_pair(ctx, re, im):
    """Stacks real and imaginary parts of the same shape into a pair."""
    axis = ctx.const([-1], torch.int64)
    return ctx.op.Concat(ctx.op.Unsqueeze(re, axis), ctx.op.Unsqueeze(im, axis), axis=-1)


def real_to_pair(ctx, x, rank: int):
    """A real tensor of rank ``rank`` as a pair with a zero imaginary part."""
    x = ctx.op.Unsqueeze(x, ctx.const([-1], torch.int64))
    pads = ctx.const([0] * (rank + 1) + [0] * rank + [1], torch.int64)
    return ctx.op.Pad(x, pads)


def as_pair(ctx, fx_arg, value, dtype: torch.dtype):
    """Any operand (complex or real tensor, Python scalar) as a pair of ``dtype``."""
    if isinstance(value, complex):
        return ctx.const([value.real, value.imag], dtype)
    if not hasattr(value, "producer"):  # a Python real scalar
        return ctx.const([float(value), 0.0], dtype)
    value = ctx.cast(value, dtype)
    if is_complex_arg(fx_arg):
        return value
    return real_to_pair(ctx, value, complex_rank(fx_arg))


def _operand(ctx, fx_arg, value, dtype: torch.dtype):
    """``(value, is_pair)``: complex operands as pairs, real ones kept real (cheaper products)."""
    if is_complex_arg(fx_arg):
        return as_pair(ctx, fx_arg, value, dtype), True
    if hasattr(value, "producer"):
        return ctx.cast(value, dtype), False
    return ctx.const(float(value), dtype), False


def _unsqueeze_last(ctx, x):
    return ctx.op.Unsqueeze(x, ctx.const([-1], torch.int64))


def complex_mul(ctx, a, b):
    ar, ai, br, bi = real_part(ctx, a), imag_part(ctx, a), real_part(ctx, b), imag_part(ctx, b)
    re = ctx.op.Sub(ctx.op.Mul(ar, br), ctx.op.Mul(ai, bi))
    im = ctx.op.Add(ctx.op.Mul(ar, bi), ctx.op.Mul(ai, br))
    return make_pair(ctx, re, im)


def conj(ctx, x, dtype: torch.dtype):
    return ctx.op.Mul(x, ctx.const([1.0, -1.0], dtype))


def squared_abs(ctx, x):
    return ctx.op.ReduceSum(ctx.op.Mul(x, x), ctx.const([-1], torch.int64), keepdims=0)


# conversions between complex and real pairs
@converter(aten.view_as_real.default, aten.view_as_complex.default, aten.view_as_real_copy.default, aten.view_as_complex_copy.default)
@complex_converter(
    aten.view_as_real.default,
    aten.view_as_complex.default,
    aten.view_as_real_copy.default,
    aten.view_as_complex_copy.default,
    aten.resolve_conj.default,
    aten.resolve_neg.default,
    aten.clone.default,
    aten.alias.default,
    aten.detach.default,
    aten.lift_fresh_copy.default,
)
def convert_view_as_pair(ctx, node, x, *args, **kwargs):
    """The pair already is the real view: nothing to compute."""
    return ctx.op.Identity(x)


@converter(aten.complex.default)
@complex_converter(aten.complex.default)
def convert_complex(ctx, node, re, im):
    dtype = out_pair_dtype(ctx)
    re, im = ctx.cast(re, dtype), ctx.cast(im, dtype)
    re = ctx.op.Expand(re, ctx.op.Shape(im))  # Expand broadcasts both ways
    im = ctx.op.Expand(im, ctx.op.Shape(re))
    return make_pair(ctx, re, im)


@converter(aten.polar.default)
@complex_converter(aten.polar.default)
def convert_polar(ctx, node, magnitude, phase):
    dtype = out_pair_dtype(ctx)
    magnitude, phase = ctx.cast(magnitude, dtype), ctx.cast(phase, dtype)
    return make_pair(ctx, ctx.op.Mul(magnitude, ctx.op.Cos(phase)), ctx.op.Mul(magnitude, ctx.op.Sin(phase)))


@converter(aten.real.default)
@complex_converter(aten.real.default)
def convert_real(ctx, node, x):
    return real_part(ctx, x) if is_complex_arg(node.args[0]) else ctx.op.Identity(x)


@converter(aten.imag.default)
@complex_converter(aten.imag.default)
def convert_imag(ctx, node, x):
    return imag_part(ctx, x)


@complex_converter(aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.device, aten.to.other, aten.type_as.default)
def convert_to_complex(ctx, node, x, *args, **kwargs):
    """A cast to or between complex dtypes (``x.to(torch.complex64)``)."""
    dtype = out_pair_dtype(ctx)
    if not ctx.out_dtype().is_complex:
        raise ctx.error(
            f"Casting a complex tensor to {ctx.out_dtype()} drops its imaginary part: use x.real "
            f"(complex tensors are carried as real pairs)."
        )
    return as_pair(ctx, node.args[0], x, dtype)


# elementwise
@complex_converter(aten.abs.default)
def convert_complex_abs(ctx, node, x):
    return ctx.op.Sqrt(squared_abs(ctx, x))


def atan2(ctx, y, x, dtype: torch.dtype):
    """atan2 with torch's quadrants; atan2(0, 0) = 0.

    onnxruntime has no double ``Atan``: float64 goes through float32 then one Newton
    step on ``y cos(t) - x sin(t) = 0`` in double brings back the precision.
    """
    if dtype == torch.float64:
        t = ctx.cast(atan2_value(ctx, ctx.cast(y, torch.float32), ctx.cast(x, torch.float32), torch.float32), dtype)
        cos, sin = ctx.op.Cos(t), ctx.op.Sin(t)
        step = ctx.op.Div(ctx.op.Sub(ctx.op.Mul(y, cos), ctx.op.Mul(x, sin)), ctx.op.Add(ctx.op.Mul(x, cos), ctx.op.Mul(y, sin)))
        finite = ctx.op.Not(ctx.op.Or(ctx.op.IsNaN(step), ctx.op.IsInf(step)))
        return ctx.op.Add(t, ctx.op.Where(finite, step, ctx.const(0.0, dtype)))
    return atan2_value(ctx, y, x, dtype)


@converter(aten.angle.default)
@complex_converter(aten.angle.default)
def convert_angle(ctx, node, x):
    """atan2(imag, real) for complex values; pi where x < 0 else 0 (nan kept) for real ones."""
    dtype = ctx.out_dtype()
    if is_complex_arg(node.args[0]):
        return atan2(ctx, imag_part(ctx, x), real_part(ctx, x), dtype)
    x = ctx.cast(x, dtype)
    zero = ctx.const(0.0, dtype)
    angle = ctx.op.Where(ctx.op.Less(x, zero), ctx.const(math.pi, dtype), zero)
    return ctx.op.Where(ctx.op.IsNaN(x), x, angle)


@converter(aten._conj.default, aten.conj_physical.default, aten.conj.default)
@complex_converter(aten._conj.default, aten.conj_physical.default, aten.conj.default)
def convert_conj(ctx, node, x):
    if not is_complex_arg(node.args[0]):
        return ctx.op.Identity(x)
    return conj(ctx, x, out_pair_dtype(ctx))


@complex_converter(aten.neg.default)
def convert_complex_neg(ctx, node, x):
    return ctx.op.Neg(x)


@complex_converter(aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar)
def convert_complex_add(ctx, node, a, b, alpha=1):
    dtype = out_pair_dtype(ctx)
    x = as_pair(ctx, node.args[0], a, dtype)
    y = as_pair(ctx, node.args[1], b, dtype)
    if alpha != 1:
        y = complex_mul(ctx, y, as_pair(ctx, alpha, alpha, dtype)) if isinstance(alpha, complex) else ctx.op.Mul(y, ctx.const(float(alpha), dtype))
    return ctx.op.Sub(x, y) if node.target.overloadpacket is aten.sub else ctx.op.Add(x, y)


@complex_converter(aten.mul.Tensor, aten.mul.Scalar)
def convert_complex_mul(ctx, node, a, b):
    dtype = out_pair_dtype(ctx)
    x, x_pair = _operand(ctx, node.args[0], a, dtype)
    y, y_pair = _operand(ctx, node.args[1], b, dtype)
    if x_pair and y_pair:
        return complex_mul(ctx, x, y)
    if x_pair:  # complex times real: scales both parts
        return ctx.op.Mul(x, _unsqueeze_last(ctx, y) if hasattr(b, "producer") else y)
    return ctx.op.Mul(_unsqueeze_last(ctx, x) if hasattr(a, "producer") else x, y)


@complex_converter(aten.div.Tensor, aten.div.Scalar)
def convert_complex_div(ctx, node, a, b):
    dtype = out_pair_dtype(ctx)
    x = as_pair(ctx, node.args[0], a, dtype)
    if not is_complex_arg(node.args[1]):
        y = ctx.cast(b, dtype) if hasattr(b, "producer") else ctx.const(float(b), dtype)
        return ctx.op.Div(x, _unsqueeze_last(ctx, y) if hasattr(b, "producer") else y)
    y = as_pair(ctx, node.args[1], b, dtype)
    numerator = complex_mul(ctx, x, conj(ctx, y, dtype))
    return ctx.op.Div(numerator, _unsqueeze_last(ctx, squared_abs(ctx, y)))


# reductions over the complex dimensions (never the pair axis)
def _complex_axes(node, dims) -> list[int]:
    rank = complex_rank(node.args[0])
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [d + rank if d < 0 else d for d in dims]


@complex_converter(aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default)
def convert_complex_sum(ctx, node, x, dim=None, keepdim=False, dtype=None):
    axes = _complex_axes(node, dim)
    x = ctx.cast(x, out_pair_dtype(ctx))
    if not axes:
        return ctx.op.Identity(x)
    op = ctx.op.ReduceMean if node.target.overloadpacket is aten.mean else ctx.op.ReduceSum
    return op(x, ctx.const(axes, torch.int64), keepdims=int(bool(keepdim)))


__all__ = ["as_pair", "make_pair", "real_part", "imag_part", "complex_mul", "conj", "atan2"]


# structural operators: they normalize their axis with the complex rank, which leaves the pair axis last
def _register_structural() -> None:
    complex_converter(aten.slice.Tensor)(convert_slice)
    complex_converter(aten.narrow.default)(convert_narrow)
    complex_converter(aten.select.int)(convert_select)
    complex_converter(aten.unsqueeze.default)(convert_unsqueeze)
    complex_converter(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)(convert_squeeze)


_register_structural()


@complex_converter(aten.cat.default)
def convert_complex_cat(ctx, node, tensors, dim=0):
    dtype = out_pair_dtype(ctx)
    rank = ctx.out_rank()
    pairs = [as_pair(ctx, f, v, dtype) for f, v in zip(node.args[0], tensors)]
    return ctx.op.Concat(*pairs, axis=dim + rank if dim < 0 else dim)


@complex_converter(aten.constant_pad_nd.default)
def convert_complex_pad(ctx, node, x, pad, value=0):
    """Zero padding (what the FFTs' ``n`` and ``s`` do); the pair axis is never padded."""
    if value != 0 or not all(isinstance(p, int) for p in pad):
        raise ctx.error("Only zero padding with static sizes is converted for complex tensors (real pairs).")
    rank = complex_rank(node.args[0]) + 1
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 2 - i], ends[rank - 2 - i] = pad[2 * i], pad[2 * i + 1]
    if any(p < 0 for p in begins + ends):
        raise ctx.error("Negative padding of a complex tensor is not converted.")
    return ctx.op.Pad(x, ctx.const(begins + ends, torch.int64))


def _pair_shape(ctx, size):
    """The shape of the pair for a complex shape ``size``: static from the fake value when possible."""
    out = ctx.val()
    if isinstance(out, torch.Tensor) and all(isinstance(d, int) for d in out.shape):
        return ctx.const([*out.shape, 2], torch.int64)
    return ctx.shape_value([*size, 2])


@complex_converter(aten.view.default, aten.reshape.default, aten._unsafe_view.default)
def convert_complex_view(ctx, node, x, shape):
    return ctx.op.Reshape(x, _pair_shape(ctx, shape))


@complex_converter(aten.expand.default)
def convert_complex_expand(ctx, node, x, size, implicit=False):
    return ctx.op.Expand(x, _pair_shape(ctx, [1 if isinstance(s, int) and s == -1 else s for s in size]))


@complex_converter(aten.permute.default)
def convert_complex_permute(ctx, node, x, dims):
    rank = complex_rank(node.args[0])
    return ctx.op.Transpose(x, perm=[d + rank if d < 0 else d for d in dims] + [rank])


@complex_converter(aten.transpose.int)
def convert_complex_transpose(ctx, node, x, dim0, dim1):
    rank = complex_rank(node.args[0])
    perm = list(range(rank + 1))
    a, b = dim0 + rank if dim0 < 0 else dim0, dim1 + rank if dim1 < 0 else dim1
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.op.Transpose(x, perm=perm)


# exp, log, matrix products
@complex_converter(aten.exp.default)
def convert_complex_exp(ctx, node, x):
    """exp(a + ib) = exp(a) (cos b + i sin b)."""
    magnitude, phase = ctx.op.Exp(real_part(ctx, x)), imag_part(ctx, x)
    return make_pair(ctx, ctx.op.Mul(magnitude, ctx.op.Cos(phase)), ctx.op.Mul(magnitude, ctx.op.Sin(phase)))


@complex_converter(aten.log.default)
def convert_complex_log(ctx, node, x):
    """log(z) = log|z| + i atan2(b, a) (the principal branch, as torch)."""
    dtype = out_pair_dtype(ctx)
    log_abs = ctx.op.Mul(ctx.op.Log(squared_abs(ctx, x)), ctx.const(0.5, dtype))
    return make_pair(ctx, log_abs, atan2(ctx, imag_part(ctx, x), real_part(ctx, x), dtype))


@complex_converter(aten.matmul.default, aten.mm.default, aten.bmm.default)
def convert_complex_matmul(ctx, node, a, b):
    """(A + iB)(C + iD) = (AC - BD) + i(AD + BC); a real operand skips its imaginary products."""
    dtype = out_pair_dtype(ctx)
    parts = []
    for fx_arg, value in ((node.args[0], a), (node.args[1], b)):
        value, is_pair = _operand(ctx, fx_arg, value, dtype)
        parts.append((real_part(ctx, value), imag_part(ctx, value)) if is_pair else (value, None))
    (ar, ai), (br, bi) = parts
    re, im = ctx.op.MatMul(ar, br), None
    if ai is not None and bi is not None:
        re = ctx.op.Sub(re, ctx.op.MatMul(ai, bi))
    for left, right in ((ar, bi), (ai, br)):
        if left is not None and right is not None:
            product = ctx.op.MatMul(left, right)
            im = product if im is None else ctx.op.Add(im, product)
    return make_pair(ctx, re, im)
