"""Convolutions and average pooling as sums of products, for the types onnxruntime's
``Conv`` and ``AveragePool`` do not take (float32 only).

A float64 model is never computed in float32 and an integer one must stay exact, so
for these types a convolution is the sum over the kernel's offsets of the strided
slice of the padded input times the weights at that offset (an ``Einsum`` per offset
over the channels of each group), a transposed convolution the convolution of the
input spread by the stride, and an average pool the window sums (a convolution by
ones) divided by what torch divides by.
"""

from __future__ import annotations

import numpy as np
import torch

#: types onnxruntime has no Conv kernel for (float only) and no exact carrier: convolved as products
CONV_BY_PRODUCTS = (torch.float64, torch.int64, torch.int32)


def conv_by_products(ctx, x, weight, bias, kernel, strides, pads, dilations, groups: int, n: int):
    """A convolution as a sum over the kernel's offsets of the strided slice of the padded input
    times the weights at that offset (an Einsum per offset, over the channels of each group):
    exact in float64 and integers, where onnxruntime's Conv computes in float32 only."""
    if not all(isinstance(k, int) for k in kernel):
        raise ctx.error("A float64 or integer convolution needs a static kernel size.")
    i64 = torch.int64
    padded = ctx.op.Pad(x, ctx.const([0, 0, *pads[:n], 0, 0, *pads[n:]], i64), ctx.const(0, ctx.out_dtype()), mode="constant")
    out_sizes = []  # floor((size - dilation * (k - 1) - 1) / stride) + 1
    for axis, (k, st, d) in enumerate(zip(kernel, strides, dilations)):
        size = ctx.op.Reshape(ctx.dim_size(padded, axis + 2), ctx.const([1], i64))
        out_sizes.append(ctx.op.Add(ctx.op.Div(ctx.op.Sub(size, ctx.const([d * (k - 1) + 1], i64)), ctx.const([st], i64)), ctx.const([1], i64)))
    # Cin / G from the weights rather than -1: a -1 cannot be inferred for an empty batch
    grouped_shape = ctx.op.Concat(ctx.op.Shape(padded, start=0, end=1), ctx.const([groups], i64), ctx.op.Shape(weight, start=1, end=2), *out_sizes, axis=0)
    cout = ctx.op.Shape(weight, start=0, end=1)
    # [G, Cout/G, Cin/G, prod(kernel)]: the weights of each group, one column per kernel offset
    w_grouped = ctx.op.Reshape(weight, ctx.op.Concat(ctx.const([groups, -1], i64), ctx.op.Shape(weight, start=1, end=2), ctx.const([int(np.prod(kernel))], i64), axis=0))
    letters = "hwdxyz"[:n]
    total = None
    for offset in np.ndindex(*kernel):
        starts = [o * d for o, d in zip(offset, dilations)]
        ends = [ctx.op.Add(ctx.op.Mul(ctx.op.Sub(o, ctx.const([1], i64)), ctx.const([st], i64)), ctx.const([s0 + 1], i64)) for o, st, s0 in zip(out_sizes, strides, starts)]
        piece = ctx.op.Slice(padded, ctx.const(starts, i64), ctx.op.Concat(*ends, axis=0), ctx.const(list(range(2, 2 + n)), i64), ctx.const(list(strides), i64))
        piece = ctx.op.Reshape(piece, grouped_shape)  # [N, G, Cin/G, out...]
        w = ctx.op.Gather(w_grouped, ctx.const(int(np.ravel_multi_index(offset, kernel)), i64), axis=3)
        term = ctx.op.Einsum(piece, w, equation=f"ngc{letters},goc->ngo{letters}")
        total = term if total is None else ctx.op.Add(total, term)
    y = ctx.op.Reshape(total, ctx.op.Concat(ctx.op.Shape(padded, start=0, end=1), cout, *out_sizes, axis=0))
    if bias is not None:
        y = ctx.op.Add(y, ctx.op.Reshape(bias, ctx.const([-1] + [1] * n, torch.int64)))
    return y


def _insert_zeros(ctx, x, axis: int, stride: int, rank: int):
    """stride - 1 zeros between the elements of x along ``axis`` (size (n - 1) * stride + 1)."""
    if stride == 1:
        return x
    i64 = torch.int64
    spread = ctx.op.Unsqueeze(x, ctx.const([axis + 1], i64))  # [..., n, 1, ...] -> [..., n, stride, ...]
    pads = [0] * (2 * (rank + 1))
    pads[rank + 1 + axis + 1] = stride - 1
    spread = ctx.op.Pad(spread, ctx.const(pads, i64), ctx.const(0, ctx.out_dtype()), mode="constant")
    size = ctx.op.Reshape(ctx.dim_size(x, axis), ctx.const([1], i64))
    merged = ctx.op.Concat(ctx.op.Shape(x, start=0, end=axis), ctx.op.Mul(size, ctx.const([stride], i64)), ctx.op.Shape(x, start=axis + 1), axis=0)
    end = ctx.op.Add(ctx.op.Mul(ctx.op.Sub(size, ctx.const([1], i64)), ctx.const([stride], i64)), ctx.const([1], i64))
    return ctx.op.Slice(ctx.op.Reshape(spread, merged), ctx.const([0], i64), end, ctx.const([axis], i64))


def conv_transpose_by_products(ctx, x, weight, bias, kernel, strides, pads, extra, groups: int, dilations, n: int):
    """A transposed convolution as the convolution of the input spread by the stride (zeros between
    its elements), padded by dilation * (k - 1) - padding (+ output_padding at the end; negative pads
    crop), with the weights flipped and their channels swapped in each group."""
    if not all(isinstance(k, int) for k in kernel):
        raise ctx.error("A float64 or integer transposed convolution needs a static kernel size.")
    i64 = torch.int64
    for axis, st in enumerate(strides):
        x = _insert_zeros(ctx, x, axis + 2, st, n + 2)
    begin = [d * (k - 1) - p for d, k, p in zip(dilations, kernel, pads)]
    end = [b + e for b, e in zip(begin, extra)]
    x = ctx.op.Pad(x, ctx.const([0, 0, *begin, 0, 0, *end], i64), ctx.const(0, ctx.out_dtype()), mode="constant")
    # [Cin, Cout/G, k...] -> [Cout, Cin/G, k...] flipped
    w = ctx.op.Reshape(weight, ctx.op.Concat(ctx.const([groups, -1], i64), ctx.op.Shape(weight, start=1), axis=0))
    w = ctx.op.Transpose(w, perm=[0, 2, 1, *range(3, n + 3)])
    w = ctx.op.Reshape(w, ctx.op.Concat(ctx.const([-1], i64), ctx.op.Shape(w, start=2), axis=0))
    axes = list(range(2, n + 2))
    w = ctx.op.Slice(w, ctx.const([-1] * n, i64), ctx.const([-(2**62)] * n, i64), ctx.const(axes, i64), ctx.const([-1] * n, i64))
    return conv_by_products(ctx, x, w, bias, kernel, [1] * n, [0] * (2 * n), dilations, groups, n)


def _box_sums(ctx, x, kernel: list[int], strides: list[int], n: int):
    """Sums of every window (no padding): one channel at a time, a convolution by ones."""
    i64 = torch.int64
    # N * C rather than -1: a -1 cannot be inferred for an empty tensor
    planes = ctx.op.ReduceProd(ctx.op.Shape(x, start=0, end=2), keepdims=1)
    single = ctx.op.Reshape(x, ctx.op.Concat(planes, ctx.const([1], i64), ctx.op.Shape(x, start=2), axis=0))
    ones = ctx.const(np.ones([1, 1, *kernel], dtype=np.float64), ctx.out_dtype())
    if ctx.out_dtype() in CONV_BY_PRODUCTS:
        sums = conv_by_products(ctx, single, ones, None, kernel, strides, [0] * (2 * n), [1] * n, 1, n)
    else:
        sums = ctx.op.Conv(single, ones, kernel_shape=kernel, strides=strides)
    return ctx.op.Reshape(sums, ctx.op.Concat(ctx.op.Shape(x, start=0, end=2), ctx.op.Shape(sums, start=2), axis=0))


def pool_by_sums(ctx, x, kernel: list[int], strides: list[int], pads: list[int], n: int, ceil_mode: bool, include_pad: bool, divisor_override):
    """avg_pool as window sums / divisor, for what AveragePool cannot do (divisor_override with
    ceil_mode, float64): zeros padded on the left and on the right, where ceil_mode adds what the
    last window torch keeps (it starts inside the input or its left padding) needs; the divisor
    counts the window's elements inside the input, and its padding with count_include_pad."""
    i64 = torch.int64
    ends = []
    for axis, (k, st, p) in enumerate(zip(kernel, strides, pads[:n])):
        if not ceil_mode:
            ends.append(ctx.const([p], i64))
            continue
        size = ctx.op.Reshape(ctx.dim_size(x, axis + 2), ctx.const([1], i64))
        # count = ceil((size + 2p - k) / s) + 1, one less when the last window starts in the right padding
        count = ctx.op.Add(ctx.op.Div(ctx.op.Add(size, ctx.const([2 * p - k + st - 1], i64)), ctx.const([st], i64)), ctx.const([1], i64))
        last_start = ctx.op.Mul(ctx.op.Sub(count, ctx.const([1], i64)), ctx.const([st], i64))
        count = ctx.op.Sub(count, ctx.cast(ctx.op.GreaterOrEqual(last_start, ctx.op.Add(size, ctx.const([p], i64))), i64))
        reach = ctx.op.Add(ctx.op.Mul(ctx.op.Sub(count, ctx.const([1], i64)), ctx.const([st], i64)), ctx.const([k], i64))
        ends.append(ctx.op.Max(ctx.op.Sub(ctx.op.Sub(reach, size), ctx.const([p], i64)), ctx.const([p], i64)))
    dtype = ctx.out_dtype()
    padding = ctx.op.Concat(ctx.const([0, 0] + list(pads[:n]) + [0, 0], i64), *ends, axis=0)
    sums = _box_sums(ctx, ctx.op.Pad(x, padding, ctx.const(0.0, dtype), mode="constant"), kernel, strides, n)
    if divisor_override is not None:
        return ctx.op.Div(sums, ctx.const(float(divisor_override), dtype))
    ones = ctx.op.Expand(ctx.const(1.0, dtype), ctx.op.Shape(x))
    if include_pad:  # the padding counts, the ceil_mode overhang does not
        ones = ctx.op.Pad(ones, ctx.const([0, 0, *pads[:n], 0, 0, *pads[:n]], i64), ctx.const(1.0, dtype), mode="constant")
        overhang = ctx.op.Concat(ctx.const([0] * (n + 2) + [0, 0], i64), *[ctx.op.Sub(e, ctx.const([p], i64)) for e, p in zip(ends, pads[:n])], axis=0)
        mask = ctx.op.Pad(ones, overhang, ctx.const(0.0, dtype), mode="constant")
    else:
        mask = ctx.op.Pad(ones, padding, ctx.const(0.0, dtype), mode="constant")
    return ctx.op.Div(sums, _box_sums(ctx, mask, kernel, strides, n))
