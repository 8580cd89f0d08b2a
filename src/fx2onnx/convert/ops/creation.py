"""Tensor creation and casts: zeros, ones, full, arange, *_like, _to_copy, fill."""

from __future__ import annotations

import torch

from ..builder import onnx_dtype
from ..registry import converter
from ._common import input_rank

aten = torch.ops.aten


def _full(ctx, size, value, dtype: torch.dtype):
    static = ctx.val()
    if isinstance(static, torch.Tensor) and all(isinstance(d, int) for d in static.shape):
        shape = ctx.const([int(d) for d in static.shape], torch.int64)
    else:
        shape = ctx.shape_value(list(size))
    fill = ctx.as_value(value, dtype)
    if fill.shape is None or len(fill.shape) != 0:
        fill = ctx.op.Reshape(fill, ctx.const([], torch.int64))
    return ctx.op.Expand(fill, shape)


@converter(aten.zeros.default, aten.new_zeros.default)
def convert_zeros(ctx, node, *args, **kwargs):
    size = args[-1] if node.target is aten.new_zeros.default else args[0]
    return _full(ctx, size, 0, ctx.out_dtype())


@converter(aten.ones.default, aten.new_ones.default)
def convert_ones(ctx, node, *args, **kwargs):
    size = args[-1] if node.target is aten.new_ones.default else args[0]
    return _full(ctx, size, 1, ctx.out_dtype())


@converter(aten.empty.memory_format, aten.new_empty.default, aten.empty_strided.default, aten.new_empty_strided.default)
def convert_empty(ctx, node, *args, **kwargs):
    size = args[1] if node.target in (aten.new_empty.default, aten.new_empty_strided.default) else args[0]
    return _full(ctx, size, 0, ctx.out_dtype())


@converter(aten.full.default)
def convert_full(ctx, node, size, fill_value, **kwargs):
    return _full(ctx, size, fill_value, ctx.out_dtype())


@converter(aten.new_full.default)
def convert_new_full(ctx, node, x, size, fill_value, **kwargs):
    return _full(ctx, size, fill_value, ctx.out_dtype())


def _like(value):
    def convert_like(ctx, node, x, *args, **kwargs):
        v = args[0] if value is None else value
        return ctx.op.Expand(
            ctx.op.Reshape(ctx.as_value(v, ctx.out_dtype()), ctx.const([], torch.int64)), ctx.op.Shape(x)
        )

    return convert_like


converter(aten.zeros_like.default, aten.empty_like.default, aten.zero.default)(_like(0))
converter(aten.ones_like.default)(_like(1))
converter(aten.full_like.default)(_like(None))


@converter(aten.fill.Scalar, aten.fill.Tensor)
def convert_fill(ctx, node, x, value):
    return ctx.op.Expand(
        ctx.op.Reshape(ctx.as_value(value, ctx.out_dtype()), ctx.const([], torch.int64)), ctx.op.Shape(x)
    )


@converter(aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.device, aten.type_as.default)
def convert_to_copy(ctx, node, x, *args, **kwargs):
    x, dtype = ctx.as_value(x), ctx.out_dtype()
    return ctx.cast(x, dtype) if ctx.dtype(x) != dtype else ctx.op.Identity(x)


@converter(aten.arange.default, aten.arange.start, aten.arange.start_step)
def convert_arange(ctx, node, *args, **kwargs):
    dtype = ctx.out_dtype()
    numbers = list(args)
    if len(numbers) == 1:
        start, end, step = 0, numbers[0], 1
    elif len(numbers) == 2:
        (start, end), step = numbers, 1
    else:
        start, end, step = numbers[:3]
    compute = dtype if dtype.is_floating_point else torch.int64
    out = ctx.op.Range(ctx.as_value(start, compute), ctx.as_value(end, compute), ctx.as_value(step, compute))
    return ctx.cast(out, dtype) if compute != dtype else out


@converter(aten.linspace.default)
def convert_linspace(ctx, node, start, end, steps, **kwargs):
    dtype = ctx.out_dtype()
    idx = ctx.op.Range(ctx.const(0, torch.int64), ctx.as_value(steps, torch.int64), ctx.const(1, torch.int64))
    s, e = ctx.as_value(start, torch.float64), ctx.as_value(end, torch.float64)
    n = ctx.cast(ctx.as_value(steps, torch.int64), torch.float64)
    denom = ctx.op.Max(ctx.op.Sub(n, ctx.const(1.0, torch.float64)), ctx.const(1.0, torch.float64))
    step = ctx.op.Div(ctx.op.Sub(e, s), denom)
    out = ctx.op.Add(s, ctx.op.Mul(ctx.cast(idx, torch.float64), step))
    return ctx.cast(out, dtype)


@converter(aten.tril.default, aten.triu.default)
def convert_tril_triu(ctx, node, x, diagonal=0):
    return ctx.op.Trilu(x, ctx.as_value(diagonal, torch.int64), upper=int(node.target is aten.triu.default))


@converter(aten.eye.default, aten.eye.m)
def convert_eye(ctx, node, n, m=None, **kwargs):
    m = n if m is None else m
    dtype = ctx.out_dtype()
    if dtype in _EYE_LIKE_TYPES:
        return ctx.op.EyeLike(_full(ctx, [n, m], 0, dtype), dtype=None)
    # onnxruntime has EyeLike kernels for these types only (a boolean identity, Grounding-DINO's, has none)
    return ctx.op.Cast(ctx.op.EyeLike(_full(ctx, [n, m], 0, torch.float32), dtype=None), to=onnx_dtype(dtype))


#: the output types onnxruntime's EyeLike kernel takes
_EYE_LIKE_TYPES = (torch.float32, torch.float64, torch.int32, torch.int64)


@converter(aten.one_hot.default)
def convert_one_hot(ctx, node, x, num_classes=-1):
    if isinstance(num_classes, int) and num_classes >= 0:
        depth = ctx.const(num_classes, torch.int64)
    else:
        depth = ctx.op.Add(ctx.op.ReduceMax(x, keepdims=0), ctx.const(1, torch.int64))
    if input_rank(ctx) == 0:  # OneHot needs indices of rank >= 1: one row, then its vector
        row = ctx.op.OneHot(ctx.op.Unsqueeze(x, ctx.const([0], torch.int64)), depth, ctx.const([0, 1], torch.int64), axis=-1)
        return ctx.op.Squeeze(row, ctx.const([0], torch.int64))
    return ctx.op.OneHot(x, depth, ctx.const([0, 1], torch.int64), axis=-1)


def _evaluate_static(ctx, node, *args, **kwargs):
    """Ops whose arguments are all Python values: torch computes the constant at conversion time."""
    if any(hasattr(a, "producer") for a in list(args) + list(kwargs.values())):
        raise ctx.error(f"{node.target} with tensor or dynamic arguments is not supported: make the sizes static.")
    kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "layout", "pin_memory")}
    return ctx.const(node.target(*args, **kwargs))


converter(
    aten.tril_indices.default,
    aten.triu_indices.default,
    aten.hann_window,
    aten.hamming_window,
    aten.blackman_window,
    aten.bartlett_window,
    aten.kaiser_window,
)(_evaluate_static)


@converter(aten.meshgrid.indexing, aten.meshgrid.default)
def convert_meshgrid(ctx, node, tensors, *, indexing="ij"):
    # every 1-D input becomes a grid of the shape (len_0, len_1, ...), "xy" swaps the first two axes
    n = len(tensors)
    order = list(range(n))
    if indexing == "xy" and n >= 2:
        order[0], order[1] = 1, 0
    sizes = [ctx.op.Shape(t) for t in tensors]
    shape = ctx.op.Concat(*[sizes[i] for i in order], axis=0)
    grids = []
    for i, t in enumerate(tensors):
        position = order.index(i)
        view = [1] * n
        view[position] = -1
        grids.append(ctx.op.Expand(ctx.op.Reshape(t, ctx.const(view, torch.int64)), shape))
    return grids


@converter(aten.block_diag.default)
def convert_block_diag(ctx, node, tensors):
    dtype = ctx.out_dtype()
    fakes = [t.meta["val"] for t in node.args[0]]
    shapes = [
        (1, 1) if f.dim() == 0 else (1, int(f.shape[0])) if f.dim() == 1 else tuple(int(d) for d in f.shape)
        for f in fakes
    ]
    total = sum(c for _, c in shapes)
    rows, before = [], 0
    for t, (r, c) in zip(tensors, shapes):
        block = ctx.op.Reshape(ctx.cast(t, dtype), ctx.const([r, c], torch.int64))
        pads = ctx.const([0, before, 0, total - before - c], torch.int64)
        rows.append(ctx.op.Pad(block, pads, ctx.const(0, dtype)))
        before += c
    return rows[0] if len(rows) == 1 else ctx.op.Concat(*rows, axis=0)
