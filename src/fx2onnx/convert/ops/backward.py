"""Operators found in backward graphs (aot_autograd) and in the losses training computes.

Each gradient is written with the formula of its derivative, so that a backward
graph runs on onnxruntime without decomposing these ops first.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..builder import onnx_dtype
from ..registry import converter
from ._common import fake_of, input_rank, normalize_axis
from ._math import erf_value
from .vision import _batch_norm_eval

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
    cdf = ctx.op.Mul(c(0.5), ctx.op.Add(c(1), erf_value(ctx, ctx.op.Mul(x, c(1 / math.sqrt(2))), dtype)))
    pdf = ctx.op.Mul(c(1 / math.sqrt(2 * math.pi)), ctx.op.Exp(ctx.op.Mul(c(-0.5), ctx.op.Mul(x, x))))
    return ctx.op.Mul(grad, ctx.op.Add(cdf, ctx.op.Mul(x, pdf)))


@converter(aten._softmax_backward_data.default)
def convert_softmax_backward(ctx, node, grad, output, dim, input_dtype):
    axis = ctx.const([normalize_axis(dim, input_rank(ctx))], torch.int64)
    dot = ctx.op.ReduceSum(ctx.op.Mul(grad, output), axis, keepdims=1)
    return ctx.cast(ctx.op.Mul(output, ctx.op.Sub(grad, dot)), input_dtype)


@converter(aten._log_softmax_backward_data.default)
def convert_log_softmax_backward(ctx, node, grad, output, dim, input_dtype):
    class_axis = normalize_axis(dim, input_rank(ctx))
    rows = getattr(grad, "meta", {}).get("nll_loss_rows")
    if rows is not None and rows[2] == class_axis:
        # cross entropy: grad is nll_loss_backward's, one value v per row at its target t, so the
        # sum over the row is v and the gradient is exp(output) * -v + v at t: three passes over
        # [N, C] instead of six (zeros, scatter, exp, product, difference, sum)
        index, value, _ = rows
        spread = ctx.op.Mul(ctx.op.Exp(output), ctx.op.Neg(value))
        result = ctx.op.ScatterElements(spread, index, value, axis=class_axis, reduction="add")
        return result if _dtype(ctx, 1) == input_dtype else ctx.op.Cast(result, to=onnx_dtype(input_dtype))
    axis = ctx.const([class_axis], torch.int64)
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
    index, value = ctx.op.Unsqueeze(safe, axis), ctx.op.Unsqueeze(scale, axis)
    result = ctx.op.ScatterElements(zeros, index, value, axis=class_axis)
    # the rows, for a _log_softmax_backward_data consuming this gradient (cross entropy); the
    # nodes above are then unused and removed
    result.meta["nll_loss_rows"] = (index, value, class_axis)
    return result


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


# activations with parameters


@converter(aten.hardtanh_backward.default)
def convert_hardtanh_backward(ctx, node, grad, x, min_val, max_val):
    dtype = _dtype(ctx, 1)
    inside = ctx.op.And(ctx.op.Greater(x, ctx.const(min_val, dtype)), ctx.op.Less(x, ctx.const(max_val, dtype)))
    return ctx.op.Where(inside, grad, ctx.const(0, _dtype(ctx)))


@converter(aten.leaky_relu_backward.default)
def convert_leaky_relu_backward(ctx, node, grad, x, negative_slope, self_is_result):
    dtype = _dtype(ctx)
    positive = ctx.op.Greater(x, ctx.const(0, _dtype(ctx, 1)))
    return ctx.op.Where(positive, grad, ctx.op.Mul(grad, ctx.const(negative_slope, dtype)))


@converter(aten.elu_backward.default)
def convert_elu_backward(ctx, node, grad, alpha, scale, input_scale, is_result, self_or_result):
    dtype = _dtype(ctx)
    c = lambda v: ctx.const(v, dtype)  # noqa: E731
    positive = ctx.op.Greater(self_or_result, c(0))
    if is_result:  # y = scale * alpha * (exp(x * input_scale) - 1) for x <= 0
        negative = ctx.op.Mul(ctx.op.Mul(grad, c(input_scale)), ctx.op.Add(self_or_result, c(alpha * scale)))
    else:
        negative = ctx.op.Mul(
            ctx.op.Mul(grad, c(input_scale * alpha * scale)), ctx.op.Exp(ctx.op.Mul(self_or_result, c(input_scale)))
        )
    return ctx.op.Where(positive, ctx.op.Mul(grad, c(scale)), negative)


@converter(aten.softplus_backward.default)
def convert_softplus_backward(ctx, node, grad, x, beta, threshold):
    dtype = _dtype(ctx)
    bx = ctx.op.Mul(x, ctx.const(beta, dtype))
    return ctx.op.Where(ctx.op.Greater(bx, ctx.const(threshold, dtype)), grad, ctx.op.Mul(grad, ctx.op.Sigmoid(bx)))


# batch normalization (training)


def _channel_axes(rank: int) -> list[int]:
    return [0] + list(range(2, rank))


def _per_channel(ctx, value, rank: int):
    """Reshapes a [C] value into [1, C, 1, ...] to broadcast over an input of rank ``rank``."""
    return ctx.op.Reshape(value, ctx.const([1, -1] + [1] * (rank - 2), torch.int64))


@converter(aten._native_batch_norm_legit_functional.default)
def convert_native_batch_norm_functional(ctx, node, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Batch norm in training: normalizes with the batch statistics and returns the updated running ones.

    In eval mode (``training=False``): the running statistics, returned unchanged.
    """
    if not training:
        empty = ctx.const(np.zeros((0,), dtype=np.float32), ctx.out_dtype(1))
        y = _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps)
        return y, empty, empty, ctx.op.Identity(running_mean), ctx.op.Identity(running_var)
    rank = input_rank(ctx)
    dtype = _dtype(ctx)
    axes = ctx.const(_channel_axes(rank), torch.int64)
    mean = ctx.op.ReduceMean(x, axes, keepdims=1)
    centered = ctx.op.Sub(x, mean)
    var = ctx.op.ReduceMean(ctx.op.Mul(centered, centered), axes, keepdims=1)
    rstd = ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(var, ctx.const(eps, dtype))))
    y = ctx.op.Mul(centered, rstd)
    if weight is not None:
        y = ctx.op.Mul(y, _per_channel(ctx, weight, rank))
    if bias is not None:
        y = ctx.op.Add(y, _per_channel(ctx, bias, rank))
    flat = ctx.const([-1], torch.int64)
    mean_c, var_c, rstd_c = ctx.op.Reshape(mean, flat), ctx.op.Reshape(var, flat), ctx.op.Reshape(rstd, flat)
    count = ctx.cast(ctx.op.Div(ctx.op.Size(x), ctx.dim_size(x, 1)), dtype)
    unbiased = ctx.op.Mul(var_c, ctx.op.Div(count, ctx.op.Sub(count, ctx.const(1, dtype))))
    keep = ctx.const(1 - momentum, dtype)
    new_mean = ctx.op.Add(ctx.op.Mul(running_mean, keep), ctx.op.Mul(mean_c, ctx.const(momentum, dtype)))
    new_var = ctx.op.Add(ctx.op.Mul(running_var, keep), ctx.op.Mul(unbiased, ctx.const(momentum, dtype)))
    return y, mean_c, rstd_c, new_mean, new_var


@converter(aten.native_batch_norm_backward.default)
def convert_native_batch_norm_backward(
    ctx, node, grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask
):
    rank = input_rank(ctx, 1)
    dtype = _dtype(ctx)
    axes = ctx.const(_channel_axes(rank), torch.int64)
    if train:
        mean, invstd = _per_channel(ctx, save_mean, rank), _per_channel(ctx, save_invstd, rank)
    else:
        mean = _per_channel(ctx, running_mean, rank)
        invstd = _per_channel(ctx, ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(running_var, ctx.const(eps, dtype)))), rank)
    xhat = ctx.op.Mul(ctx.op.Sub(x, mean), invstd)
    results: list = []
    if output_mask[0]:
        g = grad if weight is None else ctx.op.Mul(grad, _per_channel(ctx, weight, rank))
        if train:
            mean_g = ctx.op.ReduceMean(g, axes, keepdims=1)
            mean_gx = ctx.op.ReduceMean(ctx.op.Mul(g, xhat), axes, keepdims=1)
            results.append(ctx.op.Mul(invstd, ctx.op.Sub(ctx.op.Sub(g, mean_g), ctx.op.Mul(xhat, mean_gx))))
        else:
            results.append(ctx.op.Mul(g, invstd))
    else:
        results.append(None)
    results.append(ctx.op.ReduceSum(ctx.op.Mul(grad, xhat), axes, keepdims=0) if output_mask[1] else None)
    results.append(ctx.op.ReduceSum(grad, axes, keepdims=0) if output_mask[2] else None)
    return tuple(results)


@converter(aten.native_group_norm.default)
def convert_native_group_norm(ctx, node, x, weight, bias, n, c, hxw, group, eps):
    """Group norm as aot_autograd keeps it when training: (output, mean [N, G], rstd [N, G])."""
    rank = input_rank(ctx)
    dtype = _dtype(ctx)
    grouped = ctx.op.Reshape(x, ctx.shape_value([n, group, -1]))
    axis = ctx.const([2], torch.int64)
    mean = ctx.op.ReduceMean(grouped, axis, keepdims=1)
    centered = ctx.op.Sub(grouped, mean)
    var = ctx.op.ReduceMean(ctx.op.Mul(centered, centered), axis, keepdims=1)
    rstd = ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(var, ctx.const(eps, dtype))))
    y = ctx.op.Reshape(ctx.op.Mul(centered, rstd), ctx.op.Shape(x))
    if weight is not None:
        y = ctx.op.Mul(y, _per_channel(ctx, weight, rank))
    if bias is not None:
        y = ctx.op.Add(y, _per_channel(ctx, bias, rank))
    return y, ctx.op.Squeeze(mean, axis), ctx.op.Squeeze(rstd, axis)


@converter(aten.native_group_norm_backward.default)
def convert_native_group_norm_backward(ctx, node, grad, x, mean, rstd, weight, n, c, hxw, group, output_mask):
    """Gradients of group norm: (input, weight, bias); ``mean``/``rstd`` are [N, G]."""
    rank = input_rank(ctx, 1)
    i64 = torch.int64
    grouped_shape = ctx.shape_value([n, group, -1])
    stats = ctx.const([2], i64)
    xg = ctx.op.Reshape(x, grouped_shape)
    xhat_g = ctx.op.Mul(ctx.op.Sub(xg, ctx.op.Unsqueeze(mean, stats)), ctx.op.Unsqueeze(rstd, stats))
    xhat = ctx.op.Reshape(xhat_g, ctx.op.Shape(x))
    results: list = []
    if output_mask[0]:
        g = grad if weight is None else ctx.op.Mul(grad, _per_channel(ctx, weight, rank))
        gg = ctx.op.Reshape(g, grouped_shape)
        mean_g = ctx.op.ReduceMean(gg, stats, keepdims=1)
        mean_gx = ctx.op.ReduceMean(ctx.op.Mul(gg, xhat_g), stats, keepdims=1)
        dx = ctx.op.Mul(ctx.op.Unsqueeze(rstd, stats), ctx.op.Sub(ctx.op.Sub(gg, mean_g), ctx.op.Mul(xhat_g, mean_gx)))
        results.append(ctx.op.Reshape(dx, ctx.op.Shape(x)))
    else:
        results.append(None)
    axes = ctx.const(_channel_axes(rank), i64)
    results.append(ctx.op.ReduceSum(ctx.op.Mul(grad, xhat), axes, keepdims=0) if output_mask[1] else None)
    results.append(ctx.op.ReduceSum(grad, axes, keepdims=0) if output_mask[2] else None)
    return tuple(results)


def _adaptive_pool_matrix(ctx, out_size, in_size, dtype):
    """[out, in] averaging weights of adaptive pooling: 1/len over each output cell's window."""
    i64 = torch.int64
    o = ctx.op.Range(ctx.const(0, i64), out_size, ctx.const(1, i64))
    start = ctx.op.Div(ctx.op.Mul(o, in_size), out_size)
    stop = ctx.op.Div(ctx.op.Sub(ctx.op.Add(ctx.op.Mul(ctx.op.Add(o, ctx.const(1, i64)), in_size), out_size), ctx.const(1, i64)), out_size)
    h = ctx.op.Unsqueeze(ctx.op.Range(ctx.const(0, i64), in_size, ctx.const(1, i64)), ctx.const([0], i64))
    start, stop = ctx.op.Unsqueeze(start, ctx.const([1], i64)), ctx.op.Unsqueeze(stop, ctx.const([1], i64))
    inside = ctx.op.And(ctx.op.GreaterOrEqual(h, start), ctx.op.Less(h, stop))
    return ctx.op.Div(ctx.cast(inside, dtype), ctx.cast(ctx.op.Sub(stop, start), dtype))


@converter(aten._adaptive_avg_pool2d_backward.default)
def convert_adaptive_avg_pool2d_backward(ctx, node, grad, x):
    """grad_input = A_h^T @ grad @ A_w with A the averaging matrix of each spatial axis."""
    rank = input_rank(ctx, 1)
    dtype = _dtype(ctx)
    a_h = _adaptive_pool_matrix(ctx, ctx.dim_size(grad, rank - 2), ctx.dim_size(x, rank - 2), dtype)
    a_w = _adaptive_pool_matrix(ctx, ctx.dim_size(grad, rank - 1), ctx.dim_size(x, rank - 1), dtype)
    return ctx.op.MatMul(ctx.op.MatMul(ctx.op.Transpose(a_h, perm=[1, 0]), grad), a_w)


# convolution and pooling


def _static_spatial(ctx, index: int) -> list[int]:
    shape = fake_of(ctx.node.args[index]).shape
    if any(isinstance(d, torch.SymInt) for d in shape[2:]):
        raise ctx.error(f"{ctx.node.target} needs static spatial dimensions, got {list(shape)}: compile with dynamic=False.")
    return [int(d) for d in shape[2:]]


def _output_padding(in_sizes, out_sizes, kernel, stride, padding, dilation) -> list[int]:
    """output_padding making a ConvTranspose of ``out_sizes`` give back ``in_sizes``."""
    return [
        i - ((o - 1) * s - 2 * p + d * (k - 1) + 1)
        for i, o, k, s, p, d in zip(in_sizes, out_sizes, kernel, stride, padding, dilation)
    ]


@converter(aten.convolution_backward.default)
def convert_convolution_backward(
    ctx, node, grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    if transposed:
        raise ctx.error("convolution_backward of a transposed convolution is not supported.")
    n = input_rank(ctx, 1) - 2
    stride, padding, dilation = list(stride) * (n // len(stride)), list(padding) * (n // len(padding)), list(dilation) * (n // len(dilation))
    in_sizes, out_sizes = _static_spatial(ctx, 1), _static_spatial(ctx, 0)
    kernel = [int(k) for k in fake_of(node.args[2]).shape[2:]]
    results: list = []
    if output_mask[0]:
        results.append(
            ctx.op.ConvTranspose(
                grad,
                weight,
                strides=stride,
                pads=padding * 2,
                dilations=dilation,
                group=groups,
                output_padding=_output_padding(in_sizes, out_sizes, kernel, stride, padding, dilation),
            )
        )
    else:
        results.append(None)
    if output_mask[1]:
        perm = [1, 0] + list(range(2, n + 2))
        # correlating the input with the output gradient: stride and dilation swap roles; the
        # batch becomes the channels, [C_in / groups, groups * N, ...] against [C_out, N, ...]
        # so that each group of output channels meets the input channels of its group
        per_group = int(fake_of(node.args[1]).shape[1]) // groups
        inputs = ctx.op.Transpose(x, perm=perm)
        if groups != 1:
            split = ctx.op.Concat(ctx.op.Shape(x, end=1), ctx.const([groups, per_group], torch.int64), ctx.op.Shape(x, start=2), axis=0)
            inputs = ctx.op.Transpose(ctx.op.Reshape(x, split), perm=[2, 1, 0] + list(range(3, n + 3)))
            inputs = ctx.op.Reshape(inputs, ctx.op.Concat(ctx.const([per_group, -1], torch.int64), ctx.op.Shape(x, start=2), axis=0))
        full = ctx.op.Conv(
            inputs, ctx.op.Transpose(grad, perm=perm), strides=dilation, dilations=stride, pads=padding * 2, group=groups
        )
        axes = list(range(2, n + 2))
        full = ctx.op.Slice(full, ctx.const([0] * n, torch.int64), ctx.const(kernel, torch.int64), ctx.const(axes, torch.int64))
        results.append(ctx.op.Transpose(full, perm=perm))
    else:
        results.append(None)
    results.append(ctx.op.ReduceSum(grad, ctx.const(_channel_axes(n + 2), torch.int64), keepdims=0) if output_mask[2] else None)
    return tuple(results)


def _pool_window(kernel_size, stride, padding, dilation, n):
    as_list = lambda v: [int(v)] * n if isinstance(v, int) else list(v) * (n // len(v)) if len(v) else []  # noqa: E731
    kernel = as_list(kernel_size)
    strides = as_list(stride) or kernel
    return kernel, strides, as_list(padding), as_list(dilation)


@converter(aten.max_pool2d_with_indices_backward.default, aten.max_pool3d_with_indices_backward.default)
def convert_max_pool_backward(ctx, node, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """Scatters the gradient at the positions (per channel, flattened spatial index) the forward picked."""
    rank = input_rank(ctx, 1)
    lead = rank - (3 if node.target is aten.max_pool3d_with_indices_backward.default else 2)
    flat = ctx.const([0] * lead + [-1], torch.int64)  # 0 copies the leading dimensions
    zeros = ctx.op.Reshape(ctx.op.Expand(ctx.const(0, _dtype(ctx)), ctx.op.Shape(x)), flat)
    out = ctx.op.ScatterElements(zeros, ctx.op.Reshape(indices, flat), ctx.op.Reshape(grad, flat), axis=lead, reduction="add")
    return ctx.op.Reshape(out, ctx.op.Shape(x))


@converter(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def convert_avg_pool_backward(ctx, node, grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """Spreads each gradient over its window: a ConvTranspose with a constant kernel, channel by channel."""
    rank = input_rank(ctx, 1)
    n = 3 if node.target is aten.avg_pool3d_backward.default else 2
    kernel, strides, pads, _ = _pool_window(kernel_size, stride, padding, 1, n)
    if any(pads) and not count_include_pad and divisor_override is None:
        raise ctx.error("avg_pool backward with padding and count_include_pad=False is not supported.")
    dtype = _dtype(ctx)
    in_sizes = [int(d) for d in fake_of(node.args[1]).shape[-n:]]
    out_sizes = [int(d) for d in fake_of(node.args[0]).shape[-n:]]
    extra = _output_padding(in_sizes, out_sizes, kernel, strides, pads, [1] * n)
    if any(e < 0 for e in extra):
        raise ctx.error("avg_pool backward with ceil_mode windows past the input is not supported.")
    divisor = divisor_override if divisor_override is not None else int(np.prod(kernel))
    weight = ctx.const(np.full([1, 1] + kernel, 1.0 / divisor), dtype)
    planes = ctx.op.Reshape(grad, ctx.const([-1, 1] + out_sizes, torch.int64))
    spread = ctx.op.ConvTranspose(planes, weight, strides=strides, pads=pads * 2, output_padding=extra)
    return ctx.op.Reshape(spread, ctx.op.Shape(x))



# attention (the CPU flash kernel aot_autograd keeps when training)


def _attention_probs(ctx, q, k, attn_mask, is_causal, scale, logsumexp=None):
    """Scores ``q k^T * scale`` with the masks applied, and either their logsumexp or the probabilities."""
    dtype = _dtype(ctx, 1 if logsumexp is not None else 0)
    if scale is None:
        scale = 1.0 / math.sqrt(int(fake_of(ctx.node.args[1 if logsumexp is not None else 0]).shape[-1]))
    rank = input_rank(ctx, 1 if logsumexp is not None else 0)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    scores = ctx.op.Mul(ctx.op.MatMul(q, ctx.op.Transpose(k, perm=perm)), ctx.const(scale, dtype))
    minus_inf = ctx.const(-math.inf, dtype)
    if is_causal:
        size = ctx.op.Concat(ctx.op.Shape(q, start=-2, end=-1), ctx.op.Shape(k, start=-2, end=-1), axis=0)
        ones = ctx.op.Expand(ctx.const(1.0, torch.float32), size)
        keep = ctx.op.Cast(ctx.op.Trilu(ones, upper=0), to=onnx_dtype(torch.bool))
        scores = ctx.op.Where(keep, scores, minus_inf)
    if attn_mask is not None:
        if ctx.dtype(attn_mask) == torch.bool:
            scores = ctx.op.Where(attn_mask, scores, minus_inf)
        else:
            scores = ctx.op.Add(scores, ctx.cast(attn_mask, dtype))
    return scores, scale


def _head_groups(node, q_index: int) -> int:
    """How many query heads share one key/value head (grouped-query attention): 1 if as many."""
    q_heads = int(fake_of(node.args[q_index]).shape[-3])
    kv_heads = int(fake_of(node.args[q_index + 1]).shape[-3])
    if q_heads % kv_heads:
        raise ValueError(f"{q_heads} query heads cannot share {kv_heads} key/value heads.")
    return q_heads // kv_heads


def _repeat_heads(ctx, x, groups: int):
    """[B, Hkv, S, D] -> [B, Hkv * groups, S, D], each head repeated ``groups`` times in a row (repeat_interleave)."""
    if groups == 1:
        return x
    wide = ctx.op.Unsqueeze(x, ctx.const([2], torch.int64))
    wide = ctx.op.Expand(wide, ctx.const([1, 1, groups, 1, 1], torch.int64))
    heads = ctx.op.Mul(ctx.op.Shape(x, start=1, end=2), ctx.const([groups], torch.int64))
    return ctx.op.Reshape(wide, ctx.op.Concat(ctx.op.Shape(x, end=1), heads, ctx.op.Shape(x, start=2), axis=0))


def _sum_head_groups(ctx, grad, like, groups: int):
    """The gradient of :func:`_repeat_heads`: [B, Hkv * groups, S, D] summed back into ``like``'s [B, Hkv, S, D]."""
    if groups == 1:
        return grad
    split = ctx.op.Concat(ctx.op.Shape(like, end=2), ctx.const([groups], torch.int64), ctx.op.Shape(like, start=2), axis=0)
    return ctx.op.ReduceSum(ctx.op.Reshape(grad, split), ctx.const([2], torch.int64), keepdims=0)


@converter(aten._scaled_dot_product_flash_attention_for_cpu.default)
def convert_flash_attention_cpu(ctx, node, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    if dropout_p:
        raise ctx.error("scaled_dot_product_attention with dropout_p > 0 cannot be converted (random): set dropout to 0.")
    groups = _head_groups(node, 0)  # the kernel shares a key/value head between query heads (GQA)
    k, v = _repeat_heads(ctx, k, groups), _repeat_heads(ctx, v, groups)
    scores, _ = _attention_probs(ctx, q, k, attn_mask, is_causal, scale)
    # onnxruntime's Softmax is vectorized, its ReduceLogSumExp is not (6x slower on [4, 8, 128, 128]):
    # the log-sum-exp comes from the row's maximum m and its probability exp(m - lse)
    probs = ctx.op.Softmax(scores, axis=-1)
    last = ctx.const([-1], torch.int64)
    lse = ctx.op.Sub(ctx.op.ReduceMax(scores, last, keepdims=0), ctx.op.Log(ctx.op.ReduceMax(probs, last, keepdims=0)))
    out = ctx.op.MatMul(probs, v)
    return out, ctx.cast(lse, ctx.out_dtype(1))


@converter(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def convert_flash_attention_cpu_backward(
    ctx, node, grad, q, k, v, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None
):
    if dropout_p:
        raise ctx.error("scaled_dot_product_attention with dropout_p > 0 cannot be converted (random): set dropout to 0.")
    dtype = _dtype(ctx, 1)
    groups = _head_groups(node, 1)
    k_heads, v_heads = k, v
    k, v = _repeat_heads(ctx, k, groups), _repeat_heads(ctx, v, groups)
    scores, scale = _attention_probs(ctx, q, k, attn_mask, is_causal, scale, logsumexp=logsumexp)
    lse = ctx.op.Unsqueeze(ctx.cast(logsumexp, dtype), ctx.const([-1], torch.int64))
    probs = ctx.op.Exp(ctx.op.Sub(scores, lse))
    rank = input_rank(ctx, 1)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    grad_v = ctx.op.MatMul(ctx.op.Transpose(probs, perm=perm), grad)
    grad_probs = ctx.op.MatMul(grad, ctx.op.Transpose(v, perm=perm))
    delta = ctx.op.ReduceSum(ctx.op.Mul(grad, out), ctx.const([-1], torch.int64), keepdims=1)
    grad_scores = ctx.op.Mul(ctx.op.Mul(probs, ctx.op.Sub(grad_probs, delta)), ctx.const(scale, dtype))
    grad_q = ctx.op.MatMul(grad_scores, k)
    grad_k = ctx.op.MatMul(ctx.op.Transpose(grad_scores, perm=perm), q)
    return grad_q, _sum_head_groups(ctx, grad_k, k_heads, groups), _sum_head_groups(ctx, grad_v, v_heads, groups)
