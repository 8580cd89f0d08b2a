"""Reductions: sum, mean, max, min, prod, argmax, any, all, var, std, cumsum."""

from __future__ import annotations

import torch

from ..registry import converter
from ._common import axes_value, input_rank, normalize_axis

aten = torch.ops.aten


def _reduce(ctx, op_type: str, x, dim=None, keepdim=False, dtype=None):
    rank = input_rank(ctx)
    out_dtype = ctx.out_dtype()
    if op_type in ("ReduceSum", "ReduceMean", "ReduceProd") and out_dtype != ctx.dtype(x):
        x = ctx.cast(x, out_dtype)
    if rank == 0:
        return ctx.op.Identity(x)
    axes = axes_value(ctx, dim, rank)
    if axes is None:
        return getattr(ctx.op, op_type)(x, keepdims=int(bool(keepdim)))
    return getattr(ctx.op, op_type)(x, axes, keepdims=int(bool(keepdim)))


@converter(aten.sum.dim_IntList, aten.sum.default)
def convert_sum(ctx, node, x, dim=None, keepdim=False, dtype=None):
    if ctx.dtype(x) == torch.bool:
        x = ctx.cast(x, ctx.out_dtype())
    return _reduce(ctx, "ReduceSum", x, dim, keepdim)


@converter(aten.mean.dim, aten.mean.default)
def convert_mean(ctx, node, x, dim=None, keepdim=False, dtype=None):
    return _reduce(ctx, "ReduceMean", x, dim, keepdim)


@converter(aten.prod.default, aten.prod.dim_int)
def convert_prod(ctx, node, x, dim=None, keepdim=False, dtype=None):
    return _reduce(ctx, "ReduceProd", x, dim, keepdim)


@converter(aten.amax.default)
def convert_amax(ctx, node, x, dim=(), keepdim=False):
    return _reduce(ctx, "ReduceMax", x, dim, keepdim)


@converter(aten.amin.default)
def convert_amin(ctx, node, x, dim=(), keepdim=False):
    return _reduce(ctx, "ReduceMin", x, dim, keepdim)


@converter(aten.max.default)
def convert_max_all(ctx, node, x):
    return _reduce(ctx, "ReduceMax", x)


@converter(aten.min.default)
def convert_min_all(ctx, node, x):
    return _reduce(ctx, "ReduceMin", x)


def _arg(op_type: str):
    def convert_arg(ctx, node, x, dim=None, keepdim=False):
        rank = input_rank(ctx)
        if dim is None:
            x = ctx.op.Reshape(x, ctx.const([-1], torch.int64))
            out = getattr(ctx.op, op_type)(x, axis=0, keepdims=0, select_last_index=0)
            if keepdim:
                out = ctx.op.Reshape(out, ctx.const([1] * rank, torch.int64))
            return out
        return getattr(ctx.op, op_type)(x, axis=normalize_axis(dim, rank), keepdims=int(keepdim), select_last_index=0)

    return convert_arg


converter(aten.argmax.default)(_arg("ArgMax"))
converter(aten.argmin.default)(_arg("ArgMin"))


@converter(aten.max.dim)
def convert_max_dim(ctx, node, x, dim, keepdim=False):
    rank = input_rank(ctx)
    axis = normalize_axis(dim, rank)
    values = ctx.op.ReduceMax(x, ctx.const([axis], torch.int64), keepdims=int(keepdim))
    indices = ctx.op.ArgMax(x, axis=axis, keepdims=int(keepdim))
    return values, indices


@converter(aten.min.dim)
def convert_min_dim(ctx, node, x, dim, keepdim=False):
    rank = input_rank(ctx)
    axis = normalize_axis(dim, rank)
    values = ctx.op.ReduceMin(x, ctx.const([axis], torch.int64), keepdims=int(keepdim))
    indices = ctx.op.ArgMin(x, axis=axis, keepdims=int(keepdim))
    return values, indices


@converter(aten.any.default, aten.any.dim, aten.any.dims)
def convert_any(ctx, node, x, dim=None, keepdim=False):
    xi = ctx.cast(ctx.op.Cast(x, to=9) if ctx.dtype(x) != torch.bool else x, torch.int64)
    out = _reduce(ctx, "ReduceMax", xi, dim, keepdim)
    return ctx.cast(out, torch.bool)


@converter(aten.all.default, aten.all.dim, aten.all.dims)
def convert_all(ctx, node, x, dim=None, keepdim=False):
    xi = ctx.cast(ctx.op.Cast(x, to=9) if ctx.dtype(x) != torch.bool else x, torch.int64)
    out = _reduce(ctx, "ReduceMin", xi, dim, keepdim)
    return ctx.cast(out, torch.bool)


@converter(aten.var.correction, aten.var.dim, aten.var.default, aten.std.correction, aten.std.dim, aten.std.default)
def convert_var(ctx, node, x, dim=None, *args, correction=None, keepdim=False, unbiased=None):
    if node.target in (aten.var.dim, aten.std.dim):
        unbiased = args[0] if args else True
        keepdim = args[1] if len(args) > 1 else keepdim
        correction = 1 if unbiased else 0
    elif node.target in (aten.var.default, aten.std.default):
        correction = 1 if (dim if isinstance(dim, bool) else True) else 0
        dim = None
    if correction is None:
        correction = 1
    rank = input_rank(ctx)
    axes = axes_value(ctx, dim, rank)
    mean = ctx.op.ReduceMean(x, axes, keepdims=1) if axes is not None else ctx.op.ReduceMean(x, keepdims=1)
    diff = ctx.op.Sub(x, mean)
    sq = ctx.op.Mul(diff, diff)
    total = ctx.op.ReduceSum(sq, axes, keepdims=int(keepdim)) if axes is not None else ctx.op.ReduceSum(sq, keepdims=int(keepdim))
    dtype = ctx.out_dtype()
    shape = ctx.op.Shape(x)
    if axes is None:
        n = ctx.op.ReduceProd(shape, keepdims=0)
    else:
        n = ctx.op.ReduceProd(ctx.op.Gather(shape, axes, axis=0), keepdims=0)
    n = ctx.op.Sub(ctx.cast(n, dtype), ctx.const(float(correction), dtype))
    var = ctx.op.Div(total, n)
    if node.target in (aten.std.correction, aten.std.dim, aten.std.default):
        return ctx.op.Sqrt(var)
    return var


@converter(aten.cumsum.default)
def convert_cumsum(ctx, node, x, dim, dtype=None):
    out_dtype = ctx.out_dtype()
    x = ctx.cast(x, out_dtype)
    rank = input_rank(ctx)
    return ctx.op.CumSum(x, ctx.const(normalize_axis(dim, rank) if rank else 0, torch.int64))


@converter(aten.logsumexp.default)
def convert_logsumexp(ctx, node, x, dim, keepdim=False):
    return _reduce(ctx, "ReduceLogSumExp", x, dim, keepdim)


@converter(aten.linalg_vector_norm.default)
def convert_vector_norm(ctx, node, x, ord=2, dim=None, keepdim=False, dtype=None):
    if ord == 2:
        return _reduce(ctx, "ReduceL2", x, dim, keepdim)
    if ord == 1:
        return _reduce(ctx, "ReduceL1", x, dim, keepdim)
    if ord == float("inf"):
        return _reduce(ctx, "ReduceMax", ctx.op.Abs(x), dim, keepdim)
    p = ctx.const(float(ord), ctx.out_dtype())
    s = _reduce(ctx, "ReduceSum", ctx.op.Pow(ctx.op.Abs(x), p), dim, keepdim)
    return ctx.op.Pow(s, ctx.op.Reciprocal(p))
