"""Operators found in backward graphs (aot_autograd) and in the losses training computes.

Each gradient is written with the formula of its derivative, so that a backward
graph runs on onnxruntime without decomposing these ops first.
"""

from __future__ import annotations

import math

import torch

from ..builder import onnx_dtype
from ..registry import converter
from ._common import fake_of, input_rank, normalize_axis

aten = torch.ops.aten


def _dtype(ctx, index: int = 0) -> torch.dtype:
    return fake_of(ctx.node.args[index]).dtype


@converter(aten.threshold_backward.default)
def convert_threshold_backward(ctx, node, grad, x, threshold):
    dtype = _dtype(ctx)
    keep = ctx.op.Greater(x, ctx.const(threshold, _dtype(ctx, 1)))
    return ctx.op.Where(keep, grad, ctx.const(0, dtype))


@converter(aten.sigmoid_backward.default)
def convert_sigmoid_backward(ctx, node, grad, output):
    one = ctx.const(1, _dtype(ctx))
    return ctx.op.Mul(grad, ctx.op.Mul(output, ctx.op.Sub(one, output)))


@converter(aten.tanh_backward.default)
def convert_tanh_backward(ctx, node, grad, output):
    one = ctx.const(1, _dtype(ctx))
    return ctx.op.Mul(grad, ctx.op.Sub(one, ctx.op.Mul(output, output)))


@converter(aten.silu_backward.default)
def convert_silu_backward(ctx, node, grad, x):
    # d/dx x*s(x) = s(x) * (1 + x * (1 - s(x)))
    one = ctx.const(1, _dtype(ctx))
    s = ctx.op.Sigmoid(x)
    return ctx.op.Mul(grad, ctx.op.Mul(s, ctx.op.Add(one, ctx.op.Mul(x, ctx.op.Sub(one, s)))))


@converter(aten.gelu_backward.default)
def convert_gelu_backward(ctx, node, grad, x, approximate="none"):
    dtype = _dtype(ctx)
    c = lambda v: ctx.const(v, dtype)  # noqa: E731
    if approximate == "tanh":
        # y = 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3), k = sqrt(2 / pi)
        k = math.sqrt(2 / math.pi)
        x2 = ctx.op.Mul(x, x)
        u = ctx.op.Mul(c(k), ctx.op.Add(x, ctx.op.Mul(c(0.044715), ctx.op.Mul(x2, x))))
        t = ctx.op.Tanh(u)
        du = ctx.op.Mul(c(k), ctx.op.Add(c(1), ctx.op.Mul(c(3 * 0.044715), x2)))
        left = ctx.op.Mul(c(0.5), ctx.op.Add(c(1), t))
        right = ctx.op.Mul(ctx.op.Mul(c(0.5), x), ctx.op.Mul(ctx.op.Sub(c(1), ctx.op.Mul(t, t)), du))
        return ctx.op.Mul(grad, ctx.op.Add(left, right))
    cdf = ctx.op.Mul(c(0.5), ctx.op.Add(c(1), ctx.op.Erf(ctx.op.Mul(x, c(1 / math.sqrt(2))))))
    pdf = ctx.op.Mul(c(1 / math.sqrt(2 * math.pi)), ctx.op.Exp(ctx.op.Mul(c(-0.5), ctx.op.Mul(x, x))))
    return ctx.op.Mul(grad, ctx.op.Add(cdf, ctx.op.Mul(x, pdf)))


@converter(aten._softmax_backward_data.default)
def convert_softmax_backward(ctx, node, grad, output, dim, input_dtype):
    axis = ctx.const([normalize_axis(dim, input_rank(ctx))], torch.int64)
    dot = ctx.op.ReduceSum(ctx.op.Mul(grad, output), axis, keepdims=1)
    return ctx.cast(ctx.op.Mul(output, ctx.op.Sub(grad, dot)), input_dtype)


@converter(aten._log_softmax_backward_data.default)
def convert_log_softmax_backward(ctx, node, grad, output, dim, input_dtype):
    axis = ctx.const([normalize_axis(dim, input_rank(ctx))], torch.int64)
    total = ctx.op.ReduceSum(grad, axis, keepdims=1)
    return ctx.cast(ctx.op.Sub(grad, ctx.op.Mul(ctx.op.Exp(output), total)), input_dtype)


@converter(aten.native_dropout_backward.default)
def convert_native_dropout_backward(ctx, node, grad, mask, scale):
    dtype = _dtype(ctx)
    return ctx.op.Mul(ctx.op.Mul(grad, ctx.cast(mask, dtype)), ctx.const(scale, dtype))


@converter(aten.embedding_dense_backward.default)
def convert_embedding_dense_backward(ctx, node, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        raise ctx.error("embedding_dense_backward with scale_grad_by_freq=True is not supported.")
    dtype = ctx.out_dtype()
    dim = ctx.dim_size(grad, -1)
    flat_grad = ctx.op.Reshape(grad, ctx.shape_value([-1, dim]))
    flat_idx = ctx.op.Reshape(ctx.cast(indices, torch.int64), ctx.const([-1, 1], torch.int64))
    if padding_idx is not None and padding_idx >= 0:
        is_pad = ctx.op.Equal(flat_idx, ctx.const(padding_idx, torch.int64))
        flat_grad = ctx.op.Where(is_pad, ctx.const(0, dtype), flat_grad)
    zeros = ctx.op.Expand(ctx.const(0, dtype), ctx.shape_value([num_weights, dim]))
    return ctx.op.ScatterND(zeros, flat_idx, ctx.cast(flat_grad, dtype), reduction="add")


def _size(ctx, sizes, dim):
    """The size ``sizes[dim]`` as a Python int when static, else as a 0-d int64 value."""
    return sizes[dim]


def _pad_into(ctx, grad, sizes, dim, start, count):
    """Pads ``grad`` with zeros along ``dim`` so that it starts at ``start`` in a tensor of shape ``sizes``."""
    rank = len(sizes)
    size = _size(ctx, sizes, dim)
    if isinstance(start, int) and start < 0:
        start = ctx.op.Add(ctx.as_value(size, torch.int64), ctx.const(start, torch.int64)) if not isinstance(size, int) else start + size
    if isinstance(start, int) and isinstance(size, int) and isinstance(count, int):
        after = size - start - count
        pads = [0] * rank + [0] * rank
        pads[dim], pads[rank + dim] = start, after
        pad_value = ctx.const(pads, torch.int64)
    else:
        after = ctx.op.Sub(ctx.op.Sub(ctx.as_value(size, torch.int64), ctx.as_value(start, torch.int64)), ctx.as_value(count, torch.int64))
        begins = [0] * rank
        ends = [0] * rank
        begins[dim], ends[dim] = start, after
        pad_value = ctx.shape_value(begins + ends)
    return ctx.op.Pad(grad, pad_value, ctx.const(0, _dtype(ctx)))


@converter(aten.slice_backward.default)
def convert_slice_backward(ctx, node, grad, input_sizes, dim, start, end, step):
    rank = len(input_sizes)
    dim = normalize_axis(dim, rank)
    out_fake = fake_of(node.args[0])
    count = out_fake.shape[dim]
    count = int(count) if not isinstance(count, torch.SymInt) else ctx.dim_size(grad, dim)
    if step == 1:
        return _pad_into(ctx, grad, list(input_sizes), dim, start, count)
    # strided slice: scatter the rows into zeros
    size = input_sizes[dim]
    if isinstance(start, int) and start < 0:
        start = start + size if isinstance(size, int) else ctx.op.Add(ctx.as_value(size, torch.int64), ctx.const(start, torch.int64))
    positions = ctx.op.Range(
        ctx.as_value(start, torch.int64),
        ctx.op.Add(ctx.as_value(start, torch.int64), ctx.op.Mul(ctx.as_value(count, torch.int64), ctx.const(step, torch.int64))),
        ctx.const(step, torch.int64),
    )
    shape = [1] * rank
    shape[dim] = -1
    indices = ctx.op.Expand(ctx.op.Reshape(positions, ctx.const(shape, torch.int64)), ctx.op.Shape(grad))
    zeros = ctx.op.Expand(ctx.const(0, _dtype(ctx)), ctx.shape_value(list(input_sizes)))
    return ctx.op.ScatterElements(zeros, indices, grad, axis=dim)


@converter(aten.select_backward.default)
def convert_select_backward(ctx, node, grad, input_sizes, dim, index):
    rank = len(input_sizes)
    dim = normalize_axis(dim, rank)
    grad = ctx.op.Unsqueeze(grad, ctx.const([dim], torch.int64))
    return _pad_into(ctx, grad, list(input_sizes), dim, index, 1)


@converter(aten.native_layer_norm_backward.default)
def convert_native_layer_norm_backward(ctx, node, grad, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    rank = input_rank(ctx, 1)
    k = len(normalized_shape)
    inner = ctx.const(list(range(rank - k, rank)), torch.int64)
    outer = list(range(rank - k))
    xhat = ctx.op.Mul(ctx.op.Sub(x, mean), rstd)
    results = []
    if output_mask[0]:
        g = grad if weight is None else ctx.op.Mul(grad, weight)
        mean_g = ctx.op.ReduceMean(g, inner, keepdims=1)
        mean_gx = ctx.op.ReduceMean(ctx.op.Mul(g, xhat), inner, keepdims=1)
        results.append(ctx.op.Mul(rstd, ctx.op.Sub(ctx.op.Sub(g, mean_g), ctx.op.Mul(xhat, mean_gx))))
    else:
        results.append(None)
    for flag, term in ((output_mask[1], ctx.op.Mul(grad, xhat) if output_mask[1] else None), (output_mask[2], grad)):
        if not flag:
            results.append(None)
        elif outer:
            results.append(ctx.op.ReduceSum(term, ctx.const(outer, torch.int64), keepdims=0))
        else:
            results.append(ctx.op.Identity(term))
    return tuple(results)


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _nll_parts(ctx, x, target, weight, ignore_index):
    """Per-sample weights (0 where ignored) and the safe class indices."""
    dtype = _dtype(ctx, 1) if ctx.node.target is aten.nll_loss_backward.default else _dtype(ctx)
    target = ctx.cast(target, torch.int64)
    keep = ctx.op.Not(ctx.op.Equal(target, ctx.const(ignore_index, torch.int64)))
    safe = ctx.op.Where(keep, target, ctx.const(0, torch.int64))
    w = ctx.cast(keep, dtype)
    if weight is not None:
        w = ctx.op.Mul(w, ctx.op.Gather(weight, safe, axis=0))
    return safe, w, dtype


@converter(aten.nll_loss_forward.default)
def convert_nll_loss_forward(ctx, node, x, target, weight, reduction, ignore_index):
    """``x``: log-probabilities ``[N, C]`` or ``[C]``, ``target``: ``[N]`` or ``[]``."""
    safe, w, dtype = _nll_parts(ctx, x, target, weight, ignore_index)
    class_axis = 1 if input_rank(ctx) == 2 else 0
    picked = ctx.op.GatherElements(x, ctx.op.Unsqueeze(safe, ctx.const([class_axis], torch.int64)), axis=class_axis)
    picked = ctx.op.Squeeze(picked, ctx.const([class_axis], torch.int64))
    losses = ctx.op.Neg(ctx.op.Mul(picked, w))
    kind = _REDUCTIONS[reduction]
    if kind == "none":
        return losses, ctx.op.Identity(ctx.const(0, dtype))  # torch leaves total_weight at 0
    total_weight = ctx.op.ReduceSum(w, keepdims=0)
    total = ctx.op.ReduceSum(losses, keepdims=0)
    return (ctx.op.Div(total, total_weight) if kind == "mean" else total), total_weight


@converter(aten.nll_loss_backward.default)
def convert_nll_loss_backward(ctx, node, grad, x, target, weight, reduction, ignore_index, total_weight):
    safe, w, dtype = _nll_parts(ctx, x, target, weight, ignore_index)
    class_axis = 1 if input_rank(ctx, 1) == 2 else 0
    kind = _REDUCTIONS[reduction]
    scale = ctx.op.Neg(w)
    if kind == "mean":
        scale = ctx.op.Div(scale, total_weight)
    scale = ctx.op.Mul(scale, grad)  # grad is 0-d (mean, sum) or [N] (none)
    zeros = ctx.op.Expand(ctx.const(0, dtype), ctx.op.Shape(x))
    axis = ctx.const([class_axis], torch.int64)
    return ctx.op.ScatterElements(zeros, ctx.op.Unsqueeze(safe, axis), ctx.op.Unsqueeze(scale, axis), axis=class_axis)


@converter(aten.mse_loss.default)
def convert_mse_loss(ctx, node, x, target, reduction=1):
    diff = ctx.op.Sub(x, target)
    sq = ctx.op.Mul(diff, diff)
    kind = _REDUCTIONS[reduction]
    if kind == "none":
        return sq
    return ctx.op.ReduceMean(sq, keepdims=0) if kind == "mean" else ctx.op.ReduceSum(sq, keepdims=0)


@converter(aten.mse_loss_backward.default)
def convert_mse_loss_backward(ctx, node, grad, x, target, reduction):
    dtype = _dtype(ctx, 1)
    diff = ctx.op.Sub(x, target)
    g = ctx.op.Mul(ctx.op.Mul(ctx.const(2, dtype), diff), grad)
    if _REDUCTIONS[reduction] == "mean":
        n = ctx.cast(ctx.op.Size(x), dtype)
        g = ctx.op.Div(g, n)
    return g


@converter(torch.ops.prims.convert_element_type.default)
def convert_prims_convert_element_type(ctx, node, x, dtype):
    """Found in aot_autograd graphs with dynamic shapes (a decomposed ``_to_copy``)."""
    return ctx.op.Cast(ctx.as_value(x), to=onnx_dtype(dtype))
