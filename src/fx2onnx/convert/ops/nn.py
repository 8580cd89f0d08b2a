"""Neural network operators: linear, matmul, norms, softmax, embedding, attention.

Convolutions, pooling and other vision layers live in :mod:`.vision`.
"""

from __future__ import annotations

import math
import operator

import torch

from ..builder import onnx_dtype
from ..registry import converter
from ._common import (
    as_rank_1,
    back_to_rank,
    fake_of,
    input_rank,
    normalize_axis,
    result_dtype,
)
from .linalg import determinant  # onnxruntime's Det has no float64 kernel

aten = torch.ops.aten


@converter(aten.linear.default)
def convert_linear(ctx, node, x, weight, bias=None):
    w_rank = fake_of(node.args[1]).dim()
    if w_rank == 1:
        y = ctx.op.MatMul(x, weight)
    elif input_rank(ctx) == 2 and bias is not None and ctx.out_dtype().is_floating_point:
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
    dtype = ctx.out_dtype()
    if dtype.is_floating_point:
        return ctx.op.Gemm(a, b, bias, alpha=float(alpha), beta=float(beta))
    # onnxruntime's Gemm has no integer kernel, MatMul has: exact integer products
    product, bias = ctx.op.MatMul(a, b), ctx.cast(bias, dtype)
    if alpha != 1:
        product = ctx.op.Mul(product, ctx.const(alpha, dtype))
    if beta == 0:
        return product
    return ctx.op.Add(product, bias if beta == 1 else ctx.op.Mul(bias, ctx.const(beta, dtype)))


@converter(aten.addmv.default)
def convert_addmv(ctx, node, bias, mat, vec, beta=1, alpha=1):
    """beta * bias + alpha * (mat @ vec); beta == 0 ignores bias (its NaNs included), as torch does."""
    dtype = ctx.out_dtype()
    prod = ctx.op.MatMul(mat, vec)
    if alpha != 1:
        prod = ctx.op.Mul(prod, ctx.as_value(alpha, dtype))
    if beta == 0:
        return ctx.op.Expand(prod, ctx.op.Shape(ctx.op.Add(prod, bias)))
    if beta != 1:
        bias = ctx.op.Mul(bias, ctx.as_value(beta, dtype))
    return ctx.op.Add(bias, prod)


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
    if dtype == torch.float64:  # the statistics are float32 at most in ONNX: computed here in float64
        axes = ctx.const(list(range(axis, rank)), torch.int64)
        mean = ctx.op.ReduceMean(x, axes, keepdims=1)
        centered = ctx.op.Sub(x, mean)
        variance = ctx.op.ReduceMean(ctx.op.Mul(centered, centered), axes, keepdims=1)
        return y, mean, ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(variance, ctx.const(float(eps), dtype))))
    # the statistics are float (stash_type=1) whatever the input type; torch gives them the input's
    for stat in (mean, inv_std):
        stat.dtype = onnx_dtype(torch.float32)
    return y, ctx.cast(mean, ctx.out_dtype(1)), ctx.cast(inv_std, ctx.out_dtype(2))


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
    # like torch, half-precision inputs are normalized in float32 (their squares overflow float16)
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    x = ctx.cast(x, work)
    ms = ctx.op.ReduceMean(ctx.op.Mul(x, x), ctx.const(axes, torch.int64), keepdims=1)
    y = ctx.cast(ctx.op.Mul(x, ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(ms, ctx.const(eps, work))))), dtype)
    return y if weight is None else ctx.op.Mul(y, weight)


@converter(aten._weight_norm.default)
def convert_weight_norm(ctx, node, v, g, dim=0):
    """``v * (g / ||v||)``, the norm over every dimension but ``dim`` (over all of them for -1), as
    ``torch.nn.utils.weight_norm`` computes a weight (wav2vec2's positional convolution); a converter spares the
    capture two re-tracings (``_weight_norm``, then the ``_weight_norm_interface`` it decomposes into)."""
    rank = input_rank(ctx)
    dtype = ctx.out_dtype()
    keep = None if dim == -1 else normalize_axis(dim, rank)
    axes = ctx.const([a for a in range(rank) if a != keep], torch.int64)
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype  # squares overflow float16
    norm = ctx.op.ReduceL2(ctx.cast(v, work), axes, keepdims=1)
    return ctx.op.Mul(v, ctx.cast(ctx.op.Div(ctx.cast(g, work), norm), dtype))


@converter(aten.softmax.int, aten._softmax.default, aten._safe_softmax.default, aten.special_softmax.default)
def convert_softmax(ctx, node, x, dim, half_to_float_or_dtype=None):
    dtype = ctx.out_dtype()
    rank = input_rank(ctx)
    x = as_rank_1(ctx, ctx.cast(x, dtype), rank)
    axis = normalize_axis(dim, rank) if rank else 0
    y = ctx.op.Softmax(x, axis=axis)
    if node.target is aten._safe_softmax.default:
        # _safe_softmax returns zeros on rows where every value is -inf (Softmax gives NaN)
        finite = ctx.cast(ctx.op.Not(ctx.op.IsInf(x, detect_positive=0)), torch.int64)
        any_finite = ctx.op.ReduceMax(finite, ctx.const([axis], torch.int64), keepdims=1)
        y = ctx.op.Where(ctx.op.Equal(any_finite, ctx.const(0, torch.int64)), ctx.const(0.0, dtype), y)
    return back_to_rank(ctx, y, rank)


@converter(aten.log_softmax.int, aten._log_softmax.default)
def convert_log_softmax(ctx, node, x, dim, half_to_float_or_dtype=None):
    dtype = ctx.out_dtype()
    rank = input_rank(ctx)
    x = as_rank_1(ctx, ctx.cast(x, dtype), rank)
    return back_to_rank(ctx, ctx.op.LogSoftmax(x, axis=normalize_axis(dim, rank) if rank else 0), rank)


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
def convert_sdpa(ctx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        raise ctx.error("scaled_dot_product_attention with dropout_p > 0 cannot be exported: use eval mode.")
    dtype = ctx.out_dtype()
    fq, fk = fake_of(node.args[0]), fake_of(node.args[1])
    rank = fq.dim()
    head_dim = fq.shape[-1]
    if scale is None:
        scale_value = (
            ctx.op.Reciprocal(ctx.op.Sqrt(ctx.cast(ctx.dim_size(q, rank - 1), dtype)))
            if not isinstance(head_dim, int)
            else ctx.const(1.0 / math.sqrt(head_dim), dtype)
        )
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
        mask_dtype = (
            fake_of(node.args[3]).dtype
            if attn_mask is not None and len(node.args) > 3
            else (fake_of(node.kwargs["attn_mask"]).dtype if attn_mask is not None else None)
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


@converter(aten.bilinear.default)
def convert_bilinear(ctx, node, x1, x2, weight, bias=None):
    # y[..., o] = sum_ij x1[..., i] * W[o, i, j] * x2[..., j] + b[o]
    out_f, in1, in2 = (int(d) for d in fake_of(node.args[2]).shape)
    w = ctx.op.Reshape(ctx.op.Transpose(weight, perm=[1, 0, 2]), ctx.const([in1, out_f * in2], torch.int64))
    t = ctx.op.MatMul(x1, w)
    lead = ctx.op.Shape(x1, start=0, end=input_rank(ctx) - 1)
    t = ctx.op.Reshape(t, ctx.op.Concat(lead, ctx.const([out_f, in2], torch.int64), axis=0))
    y = ctx.op.ReduceSum(
        ctx.op.Mul(t, ctx.op.Unsqueeze(x2, ctx.const([-2], torch.int64))), ctx.const([-1], torch.int64), keepdims=0
    )
    return y if bias is None else ctx.op.Add(y, bias)


@converter(aten.outer.default, aten.ger.default)
def convert_outer(ctx, node, a, b):
    dtype = ctx.out_dtype()
    a = ctx.op.Unsqueeze(ctx.cast(a, dtype), ctx.const([1], torch.int64))
    return ctx.op.Mul(a, ctx.cast(b, dtype))


@converter(aten.einsum.default)
def convert_einsum(ctx, node, equation, tensors, path=None):
    dtype = ctx.out_dtype()
    return ctx.op.Einsum(*[ctx.cast(t, dtype) for t in tensors], equation=equation.replace(" ", ""))


def _p_norm(ctx, x, p: float, axis: int, keepdim: bool):
    """The p-norm of x over one axis (accumulated in float32 for half-precision tensors, as torch)."""
    dtype = ctx.out_dtype()
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    x = ctx.cast(x, work) if work != dtype else x
    axes = ctx.const([axis], torch.int64)
    if p == 2:
        out = ctx.op.ReduceL2(x, axes, keepdims=int(keepdim))
    elif p == 1:
        out = ctx.op.ReduceL1(x, axes, keepdims=int(keepdim))
    elif p == float("inf"):
        out = ctx.op.ReduceMax(ctx.op.Abs(x), axes, keepdims=int(keepdim))
    elif p == 0:
        nonzero = ctx.cast(ctx.op.Not(ctx.op.Equal(x, ctx.const(0.0, work))), work)
        out = ctx.op.ReduceSum(nonzero, axes, keepdims=int(keepdim))
    else:
        power = ctx.const(float(p), work)
        total = ctx.op.ReduceSum(ctx.op.Pow(ctx.op.Abs(x), power), axes, keepdims=int(keepdim))
        out = ctx.op.Pow(total, ctx.op.Reciprocal(power))
    return ctx.cast(out, dtype) if work != dtype else out


@converter(aten.pairwise_distance.default)
def convert_pairwise_distance(ctx, node, x1, x2, p=2.0, eps=1e-6, keepdim=False):
    dtype = ctx.out_dtype()
    # the difference in the inputs' type, as torch (a uint8 difference wraps), then + eps in the result's
    common = result_dtype(*node.args[:2])
    diff = ctx.op.Sub(ctx.cast(x1, common), ctx.cast(x2, common))
    diff = ctx.op.Add(ctx.cast(diff, dtype), ctx.const(float(eps), dtype))
    # positive axes here: onnxruntime does not reduce an empty tensor along a negative axis
    rank = max(input_rank(ctx, 0), input_rank(ctx, 1))
    return _p_norm(ctx, diff, float(p), rank - 1, bool(keepdim))


@converter(aten.cosine_similarity.default)
def convert_cosine_similarity(ctx, node, x1, x2, dim=1, eps=1e-8):
    # torch divides each input by its norm clamped to eps, then sums the product
    dtype = ctx.out_dtype()
    x1, x2 = ctx.cast(x1, dtype), ctx.cast(x2, dtype)
    axes = ctx.const([dim], torch.int64)
    floor = ctx.const(float(eps), dtype)
    n1 = ctx.op.Max(ctx.op.ReduceL2(x1, axes, keepdims=1), floor)
    n2 = ctx.op.Max(ctx.op.ReduceL2(x2, axes, keepdims=1), floor)
    return ctx.op.ReduceSum(ctx.op.Mul(ctx.op.Div(x1, n1), ctx.op.Div(x2, n2)), axes, keepdims=0)


@converter(aten.cdist.default, aten._cdist_forward.default)
def convert_cdist(ctx, node, x1, x2, p=2.0, compute_mode=None):
    # [..., P, M] and [..., R, M] -> [..., P, R]: norms of all the differences
    diff = ctx.op.Sub(
        ctx.op.Unsqueeze(x1, ctx.const([-2], torch.int64)), ctx.op.Unsqueeze(x2, ctx.const([-3], torch.int64))
    )
    return _p_norm(ctx, diff, float(p), max(input_rank(ctx, 0), input_rank(ctx, 1)), False)


@converter(aten._pdist_forward.default)
def convert_pdist(ctx, node, x, p=2.0):
    """Distances between the rows i < j of x [N, M], in row-major order of the pairs."""
    i64 = torch.int64
    diff = ctx.op.Sub(ctx.op.Unsqueeze(x, ctx.const([1], i64)), ctx.op.Unsqueeze(x, ctx.const([0], i64)))
    full = _p_norm(ctx, diff, float(p), 2, False)  # [N, N]
    n = ctx.op.Shape(x, start=0, end=1)
    ones = ctx.op.Expand(ctx.const(1, i64), ctx.op.Concat(n, n, axis=0))
    upper = ctx.op.Reshape(ctx.op.Trilu(ones, ctx.const(1, i64), upper=1), ctx.const([-1], i64))
    pairs = ctx.op.Squeeze(ctx.op.NonZero(upper), ctx.const([0], i64))
    return ctx.op.Gather(ctx.op.Reshape(full, ctx.const([-1], i64)), pairs, axis=0)


@converter(aten.embedding_bag.padding_idx, aten.embedding_bag.default, aten._embedding_bag.default)
def convert_embedding_bag(
    ctx,
    node,
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=0,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=None,
):
    used = {u.args[1] for u in node.users if u.target is operator.getitem and u.users}
    if any(i != 0 for i in used) or any(u.target is not operator.getitem for u in node.users):
        raise ctx.error("Only the first output of embedding_bag (the bags) can be exported.")
    if fake_of(node.args[1]).dim() != 1:
        raise ctx.error("embedding_bag expects 1-D indices and offsets at this level.")
    dtype = ctx.out_dtype(0)
    rows = ctx.op.Gather(weight, indices, axis=0)  # [N, D]
    if per_sample_weights is not None:
        rows = ctx.op.Mul(rows, ctx.op.Unsqueeze(per_sample_weights, ctx.const([1], torch.int64)))
    if include_last_offset:
        offsets = ctx.op.Slice(offsets, ctx.const([0], torch.int64), ctx.const([-1], torch.int64))
    # bag of each index: number of offsets <= position, minus one
    n = ctx.op.Shape(indices)
    positions = ctx.op.Range(
        ctx.const(0, torch.int64), ctx.op.Squeeze(n, ctx.const([0], torch.int64)), ctx.const(1, torch.int64)
    )
    starts = ctx.op.LessOrEqual(
        ctx.op.Unsqueeze(offsets, ctx.const([0], torch.int64)), ctx.op.Unsqueeze(positions, ctx.const([1], torch.int64))
    )
    bag = ctx.op.Sub(
        ctx.op.ReduceSum(ctx.cast(starts, torch.int64), ctx.const([1], torch.int64), keepdims=0),
        ctx.const(1, torch.int64),
    )
    keep = None
    if padding_idx is not None and padding_idx >= 0:
        keep = ctx.op.Not(ctx.op.Equal(indices, ctx.const(int(padding_idx), torch.int64)))
    shape = ctx.op.Concat(ctx.op.Shape(offsets), ctx.op.Shape(weight, start=1, end=2), axis=0)
    index = ctx.op.Expand(ctx.op.Unsqueeze(bag, ctx.const([1], torch.int64)), ctx.op.Shape(rows))
    if mode == 2:  # max
        low = ctx.const(float("-inf"), dtype)
        if keep is not None:
            rows = ctx.op.Where(ctx.op.Unsqueeze(keep, ctx.const([1], torch.int64)), rows, low)
        init = ctx.op.Expand(low, shape)
        out = ctx.op.ScatterElements(init, index, rows, axis=0, reduction="max")
        return ctx.op.Where(ctx.op.IsInf(out, detect_positive=0), ctx.const(0.0, dtype), out), None, None, None
    if keep is not None:
        rows = ctx.op.Mul(rows, ctx.op.Unsqueeze(ctx.cast(keep, dtype), ctx.const([1], torch.int64)))
    out = ctx.op.ScatterElements(ctx.op.Expand(ctx.const(0.0, dtype), shape), index, rows, axis=0, reduction="add")
    if mode == 1:  # mean
        ones = ctx.cast(keep, dtype) if keep is not None else ctx.op.Expand(ctx.const(1.0, dtype), n)
        counts = ctx.op.ScatterElements(
            ctx.op.Expand(ctx.const(0.0, dtype), ctx.op.Shape(offsets)), bag, ones, axis=0, reduction="add"
        )
        counts = ctx.op.Max(counts, ctx.const(1.0, dtype))
        out = ctx.op.Div(out, ctx.op.Unsqueeze(counts, ctx.const([1], torch.int64)))
    return out, None, None, None


@converter(aten.tensordot.default)
def convert_tensordot(ctx, node, a, b, dims_a, dims_b):
    rank_a, rank_b = fake_of(node.args[0]).dim(), fake_of(node.args[1]).dim()
    letters = "abcdefghijklmnopqrstuvwxyz"
    if rank_a + rank_b > len(letters):
        raise ctx.error("tensordot on tensors with more than 26 dimensions in total is not supported.")
    sub_a = list(letters[:rank_a])
    sub_b = list(letters[rank_a : rank_a + rank_b])
    for da, db in zip(dims_a, dims_b):
        sub_b[db % rank_b] = sub_a[da % rank_a]
    contracted = {sub_a[d % rank_a] for d in dims_a}
    out = [c for c in sub_a if c not in contracted] + [c for c in sub_b if c not in contracted]
    dtype = ctx.out_dtype()
    equation = f"{''.join(sub_a)},{''.join(sub_b)}->{''.join(out)}"
    return ctx.op.Einsum(ctx.cast(a, dtype), ctx.cast(b, dtype), equation=equation)


@converter(aten.kron.default)
def convert_kron(ctx, node, a, b):
    # interleave the axes: a[i0, 1, i1, 1, ...] * b[1, j0, 1, j1, ...] -> reshape (i0 * j0, i1 * j1, ...)
    fa, fb = fake_of(node.args[0]), fake_of(node.args[1])
    rank = max(fa.dim(), fb.dim())
    dtype = ctx.out_dtype()
    a, b = ctx.cast(a, dtype), ctx.cast(b, dtype)
    if fa.dim() < rank:
        a = ctx.op.Reshape(a, ctx.const([1] * (rank - fa.dim()) + [int(d) for d in fa.shape], torch.int64))
    if fb.dim() < rank:
        b = ctx.op.Reshape(b, ctx.const([1] * (rank - fb.dim()) + [int(d) for d in fb.shape], torch.int64))
    a = ctx.op.Unsqueeze(a, ctx.const([2 * i + 1 for i in range(rank)], torch.int64))
    b = ctx.op.Unsqueeze(b, ctx.const([2 * i for i in range(rank)], torch.int64))
    out_shape = ctx.shape_value([int(d) if isinstance(d, int) else -1 for d in ctx.val().shape])
    return ctx.op.Reshape(ctx.op.Mul(a, b), out_shape)


@converter(aten.linalg_det.default, aten.det.default)
def convert_det(ctx, node, x):
    if fake_of(node.args[0]).dtype == torch.float64:
        return determinant(ctx, node, x)
    return ctx.op.Det(x)


@converter(aten.addr.default)
def convert_addr(ctx, node, x, vec1, vec2, beta=1, alpha=1):
    dtype = ctx.out_dtype()
    outer = ctx.op.Mul(ctx.op.Unsqueeze(ctx.cast(vec1, dtype), ctx.const([1], torch.int64)), ctx.cast(vec2, dtype))
    if alpha != 1:
        outer = ctx.op.Mul(outer, ctx.const(alpha, dtype))
    if beta == 0:
        return outer
    x = ctx.cast(x, dtype)
    if beta != 1:
        x = ctx.op.Mul(x, ctx.const(beta, dtype))
    return ctx.op.Add(x, outer)


@converter(aten.linalg_multi_dot.default, aten.chain_matmul.default)
def convert_multi_dot(ctx, node, tensors):
    # MatMul treats a 1-D first (last) operand as a row (column) vector, like multi_dot
    out = tensors[0]
    for t in tensors[1:]:
        out = ctx.op.MatMul(out, t)
    return out
