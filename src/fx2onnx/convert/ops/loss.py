"""Loss functions (forward): cross entropy, negative log likelihood, binary cross entropy, KL, L1, smooth L1, Huber.

``reduction`` follows torch's enum: 0 none, 1 mean, 2 sum. The backward
converters live in :mod:`.backward`.
"""

from __future__ import annotations

import torch

from ..registry import converter
from ._common import input_rank

aten = torch.ops.aten

_NONE, _MEAN, _SUM = 0, 1, 2


def _reduce_loss(ctx, losses, reduction: int, weight=None):
    """Multiplies the element losses by ``weight`` when given, then applies the reduction."""
    if weight is not None:
        losses = ctx.op.Mul(losses, weight)
    if reduction == _NONE:
        return losses
    if reduction == _MEAN:
        return ctx.op.ReduceMean(losses, keepdims=0)
    if reduction == _SUM:
        return ctx.op.ReduceSum(losses, keepdims=0)
    raise ctx.error(f"Unknown reduction {reduction!r} (0: none, 1: mean, 2: sum).")


def _class_axis(ctx) -> int:
    """Classes are on axis 1 ([N, C, d1, ...]) or axis 0 for an unbatched input ([C])."""
    return 0 if input_rank(ctx) == 1 else 1


def _broadcast_weight(ctx, weight, rank: int, axis: int):
    """Per-class weights [C] reshaped to broadcast on the class axis."""
    return ctx.op.Reshape(weight, ctx.const([-1] + [1] * (rank - 1 - axis), torch.int64))


def _nll_from_log_probs(ctx, logp, target, weight, reduction: int, ignore_index: int, label_smoothing: float = 0.0):
    """torch's nll_loss (and cross_entropy with class indices) from log-probabilities."""
    dtype = ctx.out_dtype()
    rank = input_rank(ctx)
    axis = _class_axis(ctx)
    axis_value = ctx.const([axis], torch.int64)
    target = ctx.cast(target, torch.int64)
    keep = ctx.op.Not(ctx.op.Equal(target, ctx.const(int(ignore_index), torch.int64)))
    safe = ctx.op.Where(keep, target, ctx.const(0, torch.int64))
    w = ctx.cast(keep, dtype)
    if weight is not None:
        w = ctx.op.Mul(w, ctx.op.Gather(weight, safe, axis=0))
    picked = ctx.op.Squeeze(ctx.op.GatherElements(logp, ctx.op.Unsqueeze(safe, axis_value), axis=axis), axis_value)
    losses = ctx.op.Neg(ctx.op.Mul(picked, w))
    smooth = None
    if label_smoothing > 0:
        scaled = logp if weight is None else ctx.op.Mul(logp, _broadcast_weight(ctx, weight, rank, axis))
        smooth = ctx.op.Neg(ctx.op.ReduceSum(scaled, axis_value, keepdims=0))
        smooth = ctx.op.Mul(smooth, ctx.cast(keep, dtype))
    if reduction == _NONE:
        total, smooth_total = losses, smooth
    elif reduction == _SUM:
        total = ctx.op.ReduceSum(losses, keepdims=0)
        smooth_total = None if smooth is None else ctx.op.ReduceSum(smooth, keepdims=0)
    else:  # weighted mean over the kept targets
        weight_sum = ctx.op.ReduceSum(w, keepdims=0)
        total = ctx.op.Div(ctx.op.ReduceSum(losses, keepdims=0), weight_sum)
        smooth_total = None if smooth is None else ctx.op.Div(ctx.op.ReduceSum(smooth, keepdims=0), weight_sum)
    if smooth_total is None:
        return total
    classes = ctx.cast(ctx.op.Shape(logp, start=axis, end=axis + 1), dtype)
    classes = ctx.op.Squeeze(classes, ctx.const([0], torch.int64))
    eps = ctx.const(float(label_smoothing), dtype)
    return ctx.op.Add(
        ctx.op.Mul(ctx.op.Sub(ctx.const(1.0, dtype), eps), total), ctx.op.Mul(smooth_total, ctx.op.Div(eps, classes))
    )


@converter(aten.nll_loss_nd.default, aten.nll_loss.default, aten.nll_loss2d.default)
def convert_nll_loss(ctx, node, x, target, weight=None, reduction=_MEAN, ignore_index=-100):
    return _nll_from_log_probs(ctx, x, target, weight, reduction, ignore_index)


@converter(aten.cross_entropy_loss.default)
def convert_cross_entropy(ctx, node, x, target, weight=None, reduction=_MEAN, ignore_index=-100, label_smoothing=0.0):
    dtype = ctx.out_dtype()
    axis = _class_axis(ctx)
    logp = ctx.op.LogSoftmax(x, axis=axis)
    target_fake = node.args[1].meta.get("val")
    if not target_fake.dtype.is_floating_point:
        return _nll_from_log_probs(ctx, logp, target, weight, reduction, ignore_index, float(label_smoothing))
    # probabilities as targets
    rank = input_rank(ctx)
    axis_value = ctx.const([axis], torch.int64)
    if label_smoothing > 0:
        classes = ctx.cast(ctx.op.Shape(x, start=axis, end=axis + 1), dtype)
        eps = ctx.const(float(label_smoothing), dtype)
        target = ctx.op.Add(ctx.op.Mul(target, ctx.op.Sub(ctx.const(1.0, dtype), eps)), ctx.op.Div(eps, classes))
    terms = ctx.op.Mul(logp, target)
    if weight is not None:
        terms = ctx.op.Mul(terms, _broadcast_weight(ctx, weight, rank, axis))
    losses = ctx.op.Neg(ctx.op.ReduceSum(terms, axis_value, keepdims=0))
    return _reduce_loss(ctx, losses, reduction)


@converter(aten.binary_cross_entropy_with_logits.default)
def convert_bce_with_logits(ctx, node, x, target, weight=None, pos_weight=None, reduction=_MEAN):
    # (1 - t) x + (1 + (pw - 1) t) (log(1 + exp(-|x|)) + max(-x, 0)), stable for large |x|
    dtype = ctx.out_dtype()
    one, zero = ctx.const(1.0, dtype), ctx.const(0.0, dtype)
    softplus_neg = ctx.op.Add(
        ctx.op.Log(ctx.op.Add(one, ctx.op.Exp(ctx.op.Neg(ctx.op.Abs(x))))), ctx.op.Max(ctx.op.Neg(x), zero)
    )
    factor = one if pos_weight is None else ctx.op.Add(one, ctx.op.Mul(ctx.op.Sub(pos_weight, one), target))
    losses = ctx.op.Add(ctx.op.Mul(ctx.op.Sub(one, target), x), ctx.op.Mul(factor, softplus_neg))
    return _reduce_loss(ctx, losses, reduction, weight)


@converter(aten.binary_cross_entropy.default)
def convert_binary_cross_entropy(ctx, node, x, target, weight=None, reduction=_MEAN):
    # torch clamps the logarithms at -100
    dtype = ctx.out_dtype()
    one, floor = ctx.const(1.0, dtype), ctx.const(-100.0, dtype)
    log_x = ctx.op.Max(ctx.op.Log(x), floor)
    log_1mx = ctx.op.Max(ctx.op.Log(ctx.op.Sub(one, x)), floor)
    losses = ctx.op.Neg(ctx.op.Add(ctx.op.Mul(target, log_x), ctx.op.Mul(ctx.op.Sub(one, target), log_1mx)))
    return _reduce_loss(ctx, losses, reduction, weight)


@converter(aten.kl_div.default)
def convert_kl_div(ctx, node, x, target, reduction=_MEAN, log_target=False):
    dtype = ctx.out_dtype()
    if log_target:
        losses = ctx.op.Mul(ctx.op.Exp(target), ctx.op.Sub(target, x))
    else:
        # xlogy(t, t) - t * x, with 0 * log(0) = 0
        zero = ctx.const(0.0, dtype)
        t_log_t = ctx.op.Where(ctx.op.Equal(target, zero), zero, ctx.op.Mul(target, ctx.op.Log(target)))
        losses = ctx.op.Sub(t_log_t, ctx.op.Mul(target, x))
    return _reduce_loss(ctx, losses, reduction)


@converter(aten.l1_loss.default)
def convert_l1_loss(ctx, node, x, target, reduction=_MEAN):
    return _reduce_loss(ctx, ctx.op.Abs(ctx.op.Sub(x, target)), reduction)


@converter(aten.smooth_l1_loss.default)
def convert_smooth_l1_loss(ctx, node, x, target, reduction=_MEAN, beta=1.0):
    dtype = ctx.out_dtype()
    gap = ctx.op.Abs(ctx.op.Sub(x, target))
    if beta == 0:
        return _reduce_loss(ctx, gap, reduction)
    b = ctx.const(float(beta), dtype)
    half = ctx.const(0.5, dtype)
    quadratic = ctx.op.Div(ctx.op.Mul(half, ctx.op.Mul(gap, gap)), b)
    linear = ctx.op.Sub(gap, ctx.op.Mul(half, b))
    return _reduce_loss(ctx, ctx.op.Where(ctx.op.Less(gap, b), quadratic, linear), reduction)


@converter(aten.huber_loss.default)
def convert_huber_loss(ctx, node, x, target, reduction=_MEAN, delta=1.0):
    dtype = ctx.out_dtype()
    gap = ctx.op.Abs(ctx.op.Sub(x, target))
    d = ctx.const(float(delta), dtype)
    half = ctx.const(0.5, dtype)
    quadratic = ctx.op.Mul(half, ctx.op.Mul(gap, gap))
    linear = ctx.op.Mul(d, ctx.op.Sub(gap, ctx.op.Mul(half, d)))
    return _reduce_loss(ctx, ctx.op.Where(ctx.op.Less(gap, d), quadratic, linear), reduction)
