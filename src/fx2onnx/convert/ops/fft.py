"""FFTs through ONNX ``DFT``: ``_fft_r2c``, ``_fft_c2c``, ``_fft_c2r`` on real pairs.

torch.export keeps ``fft_rfft``, ``fft_fft2``...; the targeted decompositions of
:mod:`fx2onnx.convert.decompose` turn them into these three primitives (plus the
padding or trimming ``n``/``s`` ask for). Complex values are real pairs (a trailing
dimension of 2, see :mod:`fx2onnx.convert.complex_values`), which is also how
``DFT`` takes and returns them. ``normalization`` follows torch: 0 none,
1 ``1/sqrt(n)``, 2 ``1/n``, ``n`` being the number of points of the signal;
ONNX's inverse ``DFT`` already divides by the length of each axis.

Opset 17 to 19 give ``DFT`` its axis as an attribute, opset 20 as an input. A
leading axis of size 1 is added around the transforms (the batch axis of ``DFT``).
"""

from __future__ import annotations

import math

import torch

from ..complex_values import pair_dtype
from ..registry import complex_converter, converter
from ._common import fake_of
from .complex import conj, real_part

aten = torch.ops.aten


def _dims(fx_arg, dims) -> list[int]:
    v = fake_of(fx_arg)
    rank = v.dim() if isinstance(v, torch.Tensor) else 0
    return [d + rank if d < 0 else d for d in dims]


def _dft(ctx, x, axis: int, inverse: bool = False, onesided: bool = False):
    """One DFT along ``axis`` of a batched tensor (axis 0 is the batch axis of size 1)."""
    attrs = {"inverse": int(inverse), "onesided": int(onesided)}
    if ctx.opset >= 20:
        return ctx.op.DFT(x, None, ctx.const(axis, torch.int64), **attrs)
    return ctx.op.DFT(x, axis=axis, **attrs)


def _batched(ctx, x):
    return ctx.op.Unsqueeze(x, ctx.const([0], torch.int64))


def _unbatched(ctx, x):
    return ctx.op.Squeeze(x, ctx.const([0], torch.int64))


def _signal_size(ctx, sizes: list, dtype: torch.dtype):
    """Number of points of the signal: an int when static, a 0-d float value otherwise."""
    if all(isinstance(s, int) for s in sizes):
        return math.prod(sizes)
    total = None
    for s in sizes:
        v = ctx.cast(s, torch.int64) if hasattr(s, "producer") else ctx.const(int(s), torch.int64)
        total = v if total is None else ctx.op.Mul(total, v)
    return ctx.cast(total, dtype)


def _size_of(ctx, value, fake_dim, batched_axis: int):
    """A dimension's size: the int when static, read from the batched value otherwise."""
    if isinstance(fake_dim, int):
        return fake_dim
    return ctx.dim_size(value, batched_axis)


def _scale(ctx, y, n, power: float, dtype: torch.dtype):
    """``y * n ** power`` (``n`` an int or a 0-d value)."""
    if power == 0:
        return y
    if isinstance(n, int):
        return ctx.op.Mul(y, ctx.const(float(n) ** power, dtype))
    factor = ctx.op.Sqrt(n) if abs(power) == 0.5 else n
    return ctx.op.Div(y, factor) if power < 0 else ctx.op.Mul(y, factor)


#: power of n the result of a forward ONNX DFT (unnormalized) is multiplied by, per torch mode
_FORWARD_POWER = {0: 0.0, 1: -0.5, 2: -1.0}
#: the same after ONNX's inverse DFT, which already divides by n
_INVERSE_POWER = {0: 1.0, 1: 0.5, 2: 0.0}


@converter(aten._fft_r2c.default)
@complex_converter(aten._fft_r2c.default)
def convert_fft_r2c(ctx, node, x, dim, normalization, onesided):
    dtype = pair_dtype(ctx.out_dtype())
    dims = _dims(node.args[0], dim)
    fake = fake_of(node.args[0])
    x = ctx.op.Unsqueeze(ctx.cast(x, dtype), ctx.const([0, fake.dim() + 1], torch.int64))
    sizes = [_size_of(ctx, x, fake.shape[d], d + 1) for d in dims]
    # the one-sided transform needs a real input: it goes first, on the last dimension
    y = _dft(ctx, x, dims[-1] + 1, onesided=bool(onesided))
    for d in dims[:-1]:
        y = _dft(ctx, y, d + 1)
    y = _scale(ctx, _unbatched(ctx, y), _signal_size(ctx, sizes, dtype), _FORWARD_POWER[normalization], dtype)
    return y


@converter(aten._fft_c2c.default)
@complex_converter(aten._fft_c2c.default)
def convert_fft_c2c(ctx, node, x, dim, normalization, forward):
    dtype = pair_dtype(ctx.out_dtype())
    dims = _dims(node.args[0], dim)
    fake = fake_of(node.args[0])
    y = _batched(ctx, x)
    sizes = [_size_of(ctx, y, fake.shape[d], d + 1) for d in dims]
    for d in dims:
        y = _dft(ctx, y, d + 1, inverse=not forward)
    power = (_FORWARD_POWER if forward else _INVERSE_POWER)[normalization]
    return _scale(ctx, _unbatched(ctx, y), _signal_size(ctx, sizes, dtype), power, dtype)


def _hermitian_full(ctx, x, axis: int, n, available, rank: int, dtype: torch.dtype):
    """The full spectrum of length ``n`` along ``axis`` from its first ``n // 2 + 1`` values.

    ``X[n - k] = conj(X[k])``; the imaginary parts torch ignores (``X[0]``, ``X[n/2]``)
    only change the imaginary part of the inverse transform, dropped afterwards.
    """
    axes = ctx.const([axis], torch.int64)
    if isinstance(n, int):
        half, tail_start = n // 2 + 1, (n - 1) // 2
        if isinstance(available, int) and available < half:  # torch pads with zeros
            pads = [0] * (2 * rank)
            pads[rank + axis] = half - available
            x = ctx.op.Pad(x, ctx.const(pads, torch.int64))
        half_v, tail_v = ctx.const([half], torch.int64), ctx.const([tail_start], torch.int64)
    else:
        n = ctx.scalar_1d(n)
        two = ctx.const([2], torch.int64)
        half_v = ctx.op.Add(ctx.op.Div(n, two), ctx.const([1], torch.int64))
        tail_v = ctx.op.Div(ctx.op.Sub(n, ctx.const([1], torch.int64)), two)
    head = ctx.op.Slice(x, ctx.const([0], torch.int64), half_v, axes)
    tail = ctx.op.Slice(x, tail_v, ctx.const([0], torch.int64), axes, ctx.const([-1], torch.int64))
    return ctx.op.Concat(head, conj(ctx, tail, dtype), axis=axis)


@converter(aten._fft_c2r.default)
@complex_converter(aten._fft_c2r.default)
def convert_fft_c2r(ctx, node, x, dim, normalization, last_dim_size):
    dtype = ctx.out_dtype()
    dims = _dims(node.args[0], dim)
    fake = fake_of(node.args[0])
    y = _batched(ctx, ctx.cast(x, dtype))
    sizes = [_size_of(ctx, y, fake.shape[d], d + 1) for d in dims[:-1]] + [last_dim_size]
    for d in dims[:-1]:
        y = _dft(ctx, y, d + 1, inverse=True)
    full = _hermitian_full(ctx, y, dims[-1] + 1, last_dim_size, fake.shape[dims[-1]], fake.dim() + 2, dtype)
    y = _dft(ctx, full, dims[-1] + 1, inverse=True)
    y = real_part(ctx, _unbatched(ctx, y))
    return _scale(ctx, y, _signal_size(ctx, sizes, dtype), _INVERSE_POWER[normalization], dtype)
