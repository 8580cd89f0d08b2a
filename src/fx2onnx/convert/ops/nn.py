"""Neural network operators: linear, matmul, norms, softmax, embedding, attention.

Convolutions, pooling and other vision layers live in :mod:`.vision`.
"""

from __future__ import annotations

import math

import torch

from ..registry import converter
from ._common import fake_of, input_rank, normalize_axis

aten = torch.ops.aten


@converter(aten.linear.default)
def convert_linear(ctx, node, x, weight, bias=None):
    w_rank = fake_of(node.args[1]).dim()
    if w_rank == 1:
        y = ctx.op.MatMul(x, weight)
    elif input_rank(ctx) == 2 and bias is not None:
        return ctx.op.Gemm(x, weight, bias, transB=1)
    else:
        y = ctx.op.MatMul(x, ctx.op.Transpose(weight, perm=[1, 0]))
    return y if bias is None else ctx.op.Add(y, bias)


@converter(aten.matmul.default, aten.mm.default, aten.bmm.default)
def convert_matmul(ctx, node, a, b):
    return ctx.op.MatMul(a, b)


@converter(aten.dot.default, aten.vdot.default)
def convert_dot(ctx, node, a, b):
    return ctx.op.ReduceSum(ctx.op.Mul(a, b), keepdims=0)


@converter(aten.mv.default)
def convert_mv(ctx, node, a, b):
    return ctx.op.MatMul(a, b)


@converter(aten.addmm.default)
def convert_addmm(ctx, node, bias, a, b, beta=1, alpha=1):
    return ctx.op.Gemm(a, b, bias, alpha=float(alpha), beta=float(beta))


@converter(aten.baddbmm.default, aten.addbmm.default)
def convert_baddbmm(ctx, node, bias, a, b, beta=1, alpha=1):
    dtype = ctx.out_dtype()
    prod = ctx.op.MatMul(a, b)
    if node.target is aten.addbmm.default:
        prod = ctx.op.ReduceSum(prod, ctx.const([0], torch.int64), keepdims=0)
    if alpha != 1:
        prod = ctx.op.Mul(prod, ctx.const(alpha, dtype))
    if beta == 0:
        return prod
    if beta != 1:
        bias = ctx.op.Mul(bias, ctx.const(beta, dtype))
    return ctx.op.Add(bias, prod)


@converter(aten.layer_norm.default)
def convert_layer_norm(ctx, node, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    rank = input_rank(ctx)
    axis = rank - len(normalized_shape)
    dtype = ctx.out_dtype()
    if weight is None:
        weight = ctx.op.Expand(ctx.const(1.0, dtype), ctx.shape_value(list(normalized_shape)))
    return ctx.op.LayerNormalization(x, weight, bias, axis=axis, epsilon=float(eps))


@converter(aten.native_layer_norm.default)
def convert_native_layer_norm(ctx, node, x, normalized_shape, weight=None, bias=None, eps=1e-5):
    rank = input_rank(ctx)
    axis = rank - len(normalized_shape)
    dtype = ctx.out_dtype(0)
    if weight is None:
        weight = ctx.op.Expand(ctx.const(1.0, dtype), ctx.shape_value(list(normalized_shape)))
    y, mean, inv_std = ctx.op.LayerNormalization(x, weight, bias, axis=axis, epsilon=float(eps), _outputs=3)
    return y, mean, inv_std


@converter(aten.rms_norm.default)
def convert_rms_norm(ctx, node, x, normalized_shape, weight=None, eps=None):
    rank = input_rank(ctx)
    dtype = ctx.out_dtype()
    if eps is None:
        eps = torch.finfo(fake_of(node.args[0]).dtype).eps
    axes = list(range(rank - len(normalized_shape), rank))
    if ctx.opset >= 23:
        if weight is None:
            weight = ctx.op.Expand(ctx.const(1.0, dtype), ctx.shape_value(list(normalized_shape)))
        return ctx.op.RMSNormalization(x, weight, axis=axes[0], epsilon=float(eps))
    ms = ctx.op.ReduceMean(ctx.op.Mul(x, x), ctx.const(axes, torch.int64), keepdims=1)
    y = ctx.op.Mul(x, ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(ms, ctx.const(eps, dtype)))))
    return y if weight is None else ctx.op.Mul(y, weight)


@converter(aten.softmax.int, aten._softmax.default, aten._safe_softmax.default)
def convert_softmax(ctx, node, x, dim, half_to_float_or_dtype=None):
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)
    rank = input_rank(ctx)
    return ctx.op.Softmax(x, axis=normalize_axis(dim, rank) if rank else 0)


@converter(aten.log_softmax.int, aten._log_softmax.default)
def convert_log_softmax(ctx, node, x, dim, half_to_float_or_dtype=None):
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)
    rank = input_rank(ctx)
    return ctx.op.LogSoftmax(x, axis=normalize_axis(dim, rank) if rank else 0)


@converter(aten.dropout.default, aten.feature_dropout.default, aten.alpha_dropout.default)
def convert_dropout(ctx, node, x, p=0.5, train=False):
    if train and p > 0:
        raise ctx.error("dropout in training mode cannot be exported: call model.eval() before exporting.")
    return ctx.op.Identity(x)


@converter(aten.native_dropout.default)
def convert_native_dropout(ctx, node, x, p, train=None):
    if train and p > 0:
        raise ctx.error("dropout in training mode cannot be exported: call model.eval() before exporting.")
    mask = ctx.op.Expand(ctx.const(True, torch.bool), ctx.op.Shape(x))
    return ctx.op.Identity(x), mask


@converter(aten.embedding.default)
def convert_embedding(ctx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return ctx.op.Gather(weight, indices, axis=0)


@converter(aten.scaled_dot_product_attention.default)
def convert_sdpa(
    ctx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    if dropout_p:
        raise ctx.error("scaled_dot_product_attention with dropout_p > 0 cannot be exported: use eval mode.")
    dtype = ctx.out_dtype()
    fq, fk = fake_of(node.args[0]), fake_of(node.args[1])
    rank = fq.dim()
    head_dim = fq.shape[-1]
    if scale is None:
        scale_value = ctx.op.Reciprocal(ctx.op.Sqrt(ctx.cast(ctx.dim_size(q, rank - 1), dtype))) if not isinstance(head_dim, int) else ctx.const(1.0 / math.sqrt(head_dim), dtype)
    else:
        scale_value = ctx.const(float(scale), dtype)
    if enable_gqa and rank == 4:
        hq, hk = fq.shape[1], fk.shape[1]
        if isinstance(hq, int) and isinstance(hk, int) and hq != hk:
            k = _repeat_heads(ctx, k, hq // hk)
            v = _repeat_heads(ctx, v, hq // hk)
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    scores = ctx.op.Mul(ctx.op.MatMul(q, ctx.op.Transpose(k, perm=perm)), scale_value)
    if is_causal:
        lq = ctx.op.Shape(q, start=rank - 2, end=rank - 1)
        lk = ctx.op.Shape(k, start=rank - 2, end=rank - 1)
        ones = ctx.op.Expand(ctx.const(True, torch.bool), ctx.op.Concat(lq, lk, axis=0))
        causal = ctx.op.Trilu(ctx.cast(ones, torch.int64), ctx.const(0, torch.int64), upper=0)
        attn_mask = ctx.cast(causal, torch.bool)
        mask_dtype = torch.bool
    else:
        mask_dtype = fake_of(node.args[3]).dtype if attn_mask is not None and len(node.args) > 3 else (
            fake_of(node.kwargs["attn_mask"]).dtype if attn_mask is not None else None
        )
    if attn_mask is not None:
        if mask_dtype == torch.bool:
            neg = ctx.const(float("-inf"), dtype)
            zero = ctx.const(0.0, dtype)
            scores = ctx.op.Add(scores, ctx.op.Where(attn_mask, zero, neg))
        else:
            scores = ctx.op.Add(scores, ctx.cast(attn_mask, dtype))
    probs = ctx.op.Softmax(scores, axis=-1)
    if attn_mask is not None and mask_dtype == torch.bool:
        # rows fully masked give NaN in Softmax; torch returns zeros there
        probs = ctx.op.Where(ctx.op.IsNaN(probs), ctx.const(0.0, dtype), probs)
    return ctx.op.MatMul(probs, v)


def _repeat_heads(ctx, x, n: int):
    """[B, H, S, D] -> [B, H * n, S, D], each head repeated n times consecutively."""
    shape = ctx.op.Shape(x)
    b_h = ctx.op.Slice(shape, ctx.const([0], torch.int64), ctx.const([2], torch.int64))
    s_d = ctx.op.Slice(shape, ctx.const([2], torch.int64), ctx.const([4], torch.int64))
    x5 = ctx.op.Unsqueeze(x, ctx.const([2], torch.int64))
    target = ctx.op.Concat(b_h, ctx.const([n], torch.int64), s_d, axis=0)
    expanded = ctx.op.Expand(x5, target)
    new_shape = ctx.op.Concat(
        ctx.op.Slice(shape, ctx.const([0], torch.int64), ctx.const([1], torch.int64)),
        ctx.const([-1], torch.int64),
        s_d,
        axis=0,
    )
    return ctx.op.Reshape(expanded, new_shape)
