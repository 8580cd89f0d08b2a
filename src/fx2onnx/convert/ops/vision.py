"""Vision layers: convolutions, batch/group/instance norms, pooling, padding, unfold/fold.

Each aten op maps to the closest ONNX op (Conv, ConvTranspose, MaxPool,
AveragePool, BatchNormalization, InstanceNormalization, GroupNormalization, Pad).
Inputs without a batch dimension (``(C, H, W)`` for a 2D layer) get one added
then removed. Upsampling and other resampling layers live in :mod:`.resample`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from ..registry import converter
from ._common import fake_of, input_rank
from ._products import CONV_BY_PRODUCTS, conv_by_products, conv_transpose_by_products, pool_by_sums

aten = torch.ops.aten


# helpers
def _ntuple(value: Any, n: int) -> list[int]:
    """``3`` or ``[3]`` -> ``[3] * n``; a list of n values stays as it is."""
    if isinstance(value, (list, tuple)):
        if len(value) == 1:
            return [int(value[0])] * n
        if len(value) != n:
            raise ValueError(f"Expected {n} values, got {value!r}.")
        return [int(v) for v in value]
    return [int(value)] * n


def _static_dims(ctx, index: int = 0) -> list[Any]:
    """The shape of the index-th FX argument: ints for static dims, SymInts otherwise."""
    return list(fake_of(ctx.node.args[index]).shape)


def _add_batch(ctx, x, n_spatial: int, index: int = 0):
    """Adds a batch dimension to an unbatched input; returns (x, unbatched)."""
    if input_rank(ctx, index) == n_spatial + 1:
        return ctx.op.Unsqueeze(x, ctx.const([0], torch.int64)), True
    return x, False


def _remove_batch(ctx, y, unbatched: bool):
    return ctx.op.Squeeze(y, ctx.const([0], torch.int64)) if unbatched else y


def _channel_constant(ctx, value: float, x, dtype: torch.dtype):
    """A 1-D tensor of size C (the channel dimension of x, axis 1) filled with ``value``."""
    channels = _static_dims(ctx)[1]
    if isinstance(channels, int):
        return ctx.const(np.full((channels,), value, dtype=np.float64), dtype)
    return ctx.op.Expand(ctx.const(value, dtype), ctx.op.Shape(x, start=1, end=2))


def _reshape_channels(ctx, v, rank: int):
    """Reshapes a per-channel vector [C] into [C, 1, ..., 1] to broadcast on [N, C, ...]."""
    return ctx.op.Reshape(v, ctx.const([-1] + [1] * (rank - 2), torch.int64))


# convolutions
def _conv(ctx, x, weight, bias, stride, padding, dilation, groups, n: int):
    x, unbatched = _add_batch(ctx, x, n)
    kernel = _static_dims(ctx, 1)[2:]
    strides, dilations = _ntuple(stride, n), _ntuple(dilation, n)
    if isinstance(padding, str):
        if padding == "valid":
            pads = [0] * (2 * n)
        elif padding == "same":
            if not all(isinstance(k, int) for k in kernel):
                raise ctx.error("padding='same' needs a static kernel size.")
            total = [d * (k - 1) for d, k in zip(dilations, kernel)]
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            raise ctx.error(f"Unknown padding {padding!r}: use 'same', 'valid' or integers.")
    else:
        pads = _ntuple(padding, n) * 2
    if ctx.out_dtype() in CONV_BY_PRODUCTS:
        y = conv_by_products(ctx, x, weight, bias, kernel, strides, pads, dilations, int(groups), n)
        return _remove_batch(ctx, y, unbatched)
    y = ctx.op.Conv(
        x,
        weight,
        bias,
        strides=strides,
        pads=pads,
        dilations=dilations,
        group=int(groups),
        kernel_shape=[int(k) for k in kernel] if all(isinstance(k, int) for k in kernel) else None,
    )
    return _remove_batch(ctx, y, unbatched)


def _make_conv(n: int):
    def convert_conv(ctx, node, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        return _conv(ctx, x, weight, bias, stride, padding, dilation, groups, n)

    convert_conv.__name__ = f"convert_conv{n}d"
    return convert_conv


converter(aten.conv1d.default, aten.conv1d.padding)(_make_conv(1))
converter(aten.conv2d.default, aten.conv2d.padding)(_make_conv(2))
converter(aten.conv3d.default, aten.conv3d.padding)(_make_conv(3))


def _conv_transpose(ctx, x, weight, bias, stride, padding, output_padding, groups, dilation, n: int):
    x, unbatched = _add_batch(ctx, x, n)
    kernel = _static_dims(ctx, 1)[2:]
    strides, pads, extra = _ntuple(stride, n), _ntuple(padding, n), _ntuple(output_padding, n)
    if ctx.out_dtype() in CONV_BY_PRODUCTS:
        y = conv_transpose_by_products(ctx, x, weight, bias, kernel, strides, pads, extra, int(groups), _ntuple(dilation, n), n)
        return _remove_batch(ctx, y, unbatched)
    options = dict(
        strides=strides,
        dilations=_ntuple(dilation, n),
        group=int(groups),
        kernel_shape=[int(k) for k in kernel] if all(isinstance(k, int) for k in kernel) else None,
    )
    if all(e < s for e, s in zip(extra, strides)):
        y = ctx.op.ConvTranspose(x, weight, bias, pads=pads * 2, output_padding=extra, **options)
        return _remove_batch(ctx, y, unbatched)
    # torch allows output_padding < max(stride, dilation), onnxruntime only < stride: the extra
    # rows are taken from the end padding, then added as zeros, the bias after
    ends = [p - e for p, e in zip(pads, extra)]
    y = ctx.op.ConvTranspose(x, weight, pads=pads + [max(e, 0) for e in ends], **options)
    zeros = [0] * (n + 2) + [0, 0] + [max(-e, 0) for e in ends]
    y = ctx.op.Pad(y, ctx.const(zeros, torch.int64))
    if bias is not None:
        y = ctx.op.Add(y, ctx.op.Reshape(bias, ctx.const([-1] + [1] * n, torch.int64)))
    return _remove_batch(ctx, y, unbatched)


def _make_conv_transpose(n: int):
    def convert_conv_transpose(
        ctx, node, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
    ):
        return _conv_transpose(ctx, x, weight, bias, stride, padding, output_padding, groups, dilation, n)

    convert_conv_transpose.__name__ = f"convert_conv_transpose{n}d"
    return convert_conv_transpose


converter(aten.conv_transpose1d.default)(_make_conv_transpose(1))
converter(aten.conv_transpose2d.input)(_make_conv_transpose(2))
converter(aten.conv_transpose3d.input)(_make_conv_transpose(3))


@converter(aten.convolution.default)
def convert_convolution(ctx, node, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    n = len(_static_dims(ctx, 1)) - 2
    if transposed:
        return _conv_transpose(ctx, x, weight, bias, stride, padding, output_padding, groups, dilation, n)
    return _conv(ctx, x, weight, bias, stride, padding, dilation, groups, n)


# normalizations
def _batch_norm_eval(ctx, x, weight, bias, mean, var, eps):
    dtype = ctx.out_dtype(0)
    if weight is None:
        weight = _channel_constant(ctx, 1.0, x, dtype)
    if bias is None:
        bias = _channel_constant(ctx, 0.0, x, dtype)
    return ctx.op.BatchNormalization(x, weight, bias, mean, var, epsilon=float(eps))


def _batch_norm_input_stats(ctx, x, weight, bias, eps, per_sample: bool = False):
    """Normalization with the statistics of the batch (training mode or no running stats), or of
    each sample and channel (``per_sample``: instance norm)."""
    rank = input_rank(ctx)
    axes = ctx.const(([] if per_sample else [0]) + list(range(2, rank)), torch.int64)
    mean = ctx.op.ReduceMean(x, axes, keepdims=1)
    centered = ctx.op.Sub(x, mean)
    var = ctx.op.ReduceMean(ctx.op.Mul(centered, centered), axes, keepdims=1)
    dtype = ctx.out_dtype(0)
    y = ctx.op.Div(centered, ctx.op.Sqrt(ctx.op.Add(var, ctx.const(float(eps), dtype))))
    if weight is not None:
        y = ctx.op.Mul(y, _reshape_channels(ctx, weight, rank))
    if bias is not None:
        y = ctx.op.Add(y, _reshape_channels(ctx, bias, rank))
    return y


def _empty(ctx, index: int):
    """The empty saved mean / rstd outputs batch norm returns in eval mode."""
    return ctx.const(np.zeros((0,), dtype=np.float32), ctx.out_dtype(index))


@converter(aten._native_batch_norm_legit_no_training.default)
def convert_native_batch_norm_no_training(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps):
    y = _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps)
    return y, _empty(ctx, 1), _empty(ctx, 2)


@converter(aten._native_batch_norm_legit.no_stats)
def convert_native_batch_norm_no_stats(ctx, node, x, weight, bias, training, momentum, eps):
    y = _batch_norm_input_stats(ctx, x, weight, bias, eps)
    return y, _empty(ctx, 1), _empty(ctx, 2)


@converter(aten.batch_norm.default)
def convert_batch_norm(
    ctx, node, x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True
):
    if training or running_mean is None:
        return _batch_norm_input_stats(ctx, x, weight, bias, eps)
    return _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps)


@converter(aten.instance_norm.default)
def convert_instance_norm(
    ctx, node, x, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled=True
):
    if not use_input_stats:
        return _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps)
    dtype = ctx.out_dtype()
    if weight is None:
        weight = _channel_constant(ctx, 1.0, x, dtype)
    if bias is None:
        bias = _channel_constant(ctx, 0.0, x, dtype)
    if dtype == torch.float64:  # onnxruntime's InstanceNormalization is float32 only
        return _batch_norm_input_stats(ctx, x, weight, bias, eps, per_sample=True)
    return ctx.op.InstanceNormalization(x, weight, bias, epsilon=float(eps))


@converter(aten.group_norm.default)
def convert_group_norm(ctx, node, x, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    rank = input_rank(ctx)
    dtype = ctx.out_dtype()
    if ctx.opset >= 21:  # GroupNormalization takes one scale and bias per channel since opset 21
        weight = _channel_constant(ctx, 1.0, x, dtype) if weight is None else weight
        bias = _channel_constant(ctx, 0.0, x, dtype) if bias is None else bias
        return ctx.op.GroupNormalization(x, weight, bias, num_groups=int(num_groups), epsilon=float(eps))
    # [N, C, *] -> [N, G, -1], normalized over the last axis, back to [N, C, *]
    shape = ctx.op.Shape(x)
    grouped = ctx.op.Reshape(x, ctx.const([0, int(num_groups), -1], torch.int64))
    axes = ctx.const([2], torch.int64)
    mean = ctx.op.ReduceMean(grouped, axes, keepdims=1)
    centered = ctx.op.Sub(grouped, mean)
    var = ctx.op.ReduceMean(ctx.op.Mul(centered, centered), axes, keepdims=1)
    y = ctx.op.Div(centered, ctx.op.Sqrt(ctx.op.Add(var, ctx.const(float(eps), dtype))))
    y = ctx.op.Reshape(y, shape)
    if weight is not None:
        y = ctx.op.Mul(y, _reshape_channels(ctx, weight, rank))
    if bias is not None:
        y = ctx.op.Add(y, _reshape_channels(ctx, bias, rank))
    return y


# pooling
def _pool_args(kernel_size, stride, padding, dilation, n: int):
    kernel = _ntuple(kernel_size, n)
    strides = (
        kernel if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) else _ntuple(stride, n)
    )
    return kernel, strides, _ntuple(padding, n) * 2, _ntuple(dilation, n)


def _max_pool(ctx, x, kernel_size, stride, padding, dilation, ceil_mode, n: int, with_indices: bool):
    x, unbatched = _add_batch(ctx, x, n)
    kernel, strides, pads, dilations = _pool_args(kernel_size, stride, padding, dilation, n)
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads, dilations=dilations, ceil_mode=int(bool(ceil_mode)))
    if not with_indices:
        return _remove_batch(ctx, ctx.op.MaxPool(x, **attrs), unbatched)
    y, flat = ctx.op.MaxPool(x, _outputs=2, **attrs)
    # ONNX indexes the whole tensor, torch the spatial dimensions of each channel
    spatial = ctx.op.ReduceProd(ctx.op.Shape(x, start=2), keepdims=0)
    indices = ctx.op.Mod(flat, spatial)
    return _remove_batch(ctx, y, unbatched), _remove_batch(ctx, indices, unbatched)


def _make_max_pool(n: int, with_indices: bool):
    def convert_max_pool(ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return _max_pool(ctx, x, kernel_size, stride, padding, dilation, ceil_mode, n, with_indices)

    convert_max_pool.__name__ = f"convert_max_pool{n}d{'_with_indices' if with_indices else ''}"
    return convert_max_pool


converter(aten.max_pool1d.default)(_make_max_pool(1, False))
converter(aten.max_pool2d.default)(_make_max_pool(2, False))
converter(aten.max_pool3d.default)(_make_max_pool(3, False))
converter(aten.max_pool1d_with_indices.default)(_make_max_pool(1, True))
converter(aten.max_pool2d_with_indices.default)(_make_max_pool(2, True))
converter(aten.max_pool3d_with_indices.default)(_make_max_pool(3, True))


def _make_avg_pool(n: int):
    def convert_avg_pool(
        ctx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
    ):
        x, unbatched = _add_batch(ctx, x, n)
        kernel, strides, pads, _ = _pool_args(kernel_size, stride, padding, 1, n)
        if (divisor_override is not None and ceil_mode) or ctx.out_dtype() in CONV_BY_PRODUCTS:
            y = pool_by_sums(ctx, x, kernel, strides, pads, n, bool(ceil_mode), bool(count_include_pad), divisor_override)
            return _remove_batch(ctx, y, unbatched)
        include = count_include_pad or divisor_override is not None
        y = ctx.op.AveragePool(
            x,
            kernel_shape=kernel,
            strides=strides,
            pads=pads,
            ceil_mode=int(bool(ceil_mode)),
            count_include_pad=int(bool(include)),
        )
        if divisor_override is not None:
            y = ctx.op.Mul(y, ctx.const(float(np.prod(kernel)) / float(divisor_override), ctx.out_dtype()))
        return _remove_batch(ctx, y, unbatched)

    convert_avg_pool.__name__ = f"convert_avg_pool{n}d"
    return convert_avg_pool


converter(aten.avg_pool1d.default)(_make_avg_pool(1))
converter(aten.avg_pool2d.default)(_make_avg_pool(2))
converter(aten.avg_pool3d.default)(_make_avg_pool(3))


def _adaptive_matrix(size_in: int, size_out: int) -> np.ndarray:
    """[size_in, size_out] matrix averaging the windows torch's adaptive pooling uses."""
    m = np.zeros((size_in, size_out), dtype=np.float64)
    for i in range(size_out):
        start = (i * size_in) // size_out
        end = -((-(i + 1) * size_in) // size_out)
        m[start:end, i] = 1.0 / (end - start)
    return m


def _window_bounds(ctx, x, axis: int, size_out: int):
    """(start, end) of adaptive pooling's windows along ``axis``, from the (dynamic) input size n:
    window i covers [i * n // out, ceil((i + 1) * n / out))."""
    i64 = torch.int64
    n = ctx.dim_size(x, axis)
    i = np.arange(size_out, dtype=np.int64)
    start = ctx.op.Div(ctx.op.Mul(ctx.const(i, i64), n), ctx.const(size_out, i64))
    end = ctx.op.Div(ctx.op.Add(ctx.op.Mul(ctx.const(i + 1, i64), n), ctx.const(size_out - 1, i64)), ctx.const(size_out, i64))
    return start, end


def _adaptive_weights(ctx, x, axis: int, size_in, size_out: int, dtype):
    """:func:`_adaptive_matrix` as a constant, or computed from a dynamic input size:
    window i covers [i * n // out, ceil((i + 1) * n / out))."""
    if isinstance(size_in, int):
        return ctx.const(_adaptive_matrix(size_in, size_out), dtype)
    i64 = torch.int64
    rows = ctx.op.Unsqueeze(ctx.op.Range(ctx.const(0, i64), ctx.dim_size(x, axis), ctx.const(1, i64)), ctx.const([1], i64))
    start, end = _window_bounds(ctx, x, axis, size_out)
    inside = ctx.op.And(ctx.op.GreaterOrEqual(rows, start), ctx.op.Less(rows, end))
    return ctx.op.Div(ctx.cast(inside, dtype), ctx.cast(ctx.op.Sub(end, start), dtype))


def _make_adaptive_avg_pool(n: int):
    def convert_adaptive_avg_pool(ctx, node, x, output_size):
        spatial = _static_dims(ctx)[-n:]
        requested = list(fake_of(node).shape[-n:])
        # an output size given as the input's own (dynamic) size leaves that axis as it is
        out = [o if isinstance(o, int) else (None if str(o) == str(s) else o) for o, s in zip(requested, spatial)]
        if any(o is not None and not isinstance(o, int) for o in out):
            raise ctx.error(f"adaptive_avg_pool{n}d to a dynamic output size {requested} is not supported: make it static.")
        if all(o is None for o in out):
            return ctx.op.Identity(x)
        x, unbatched = _add_batch(ctx, x, n)
        # onnxruntime's pooling kernels are float32 only: float64 averages with ReduceMean / MatMul
        pooling_kernels = ctx.out_dtype() not in CONV_BY_PRODUCTS
        if all(o == 1 for o in out):
            if not pooling_kernels:
                return _remove_batch(ctx, ctx.op.ReduceMean(x, ctx.const(list(range(2, n + 2)), torch.int64), keepdims=1), unbatched)
            return _remove_batch(ctx, ctx.op.GlobalAveragePool(x), unbatched)
        static = all(isinstance(s, int) for s in spatial)
        if pooling_kernels and static and all(o is None or s % o == 0 for s, o in zip(spatial, out)):
            kernel = [1 if o is None else s // o for s, o in zip(spatial, out)]
            y = ctx.op.AveragePool(x, kernel_shape=kernel, strides=kernel)
            return _remove_batch(ctx, y, unbatched)
        # windows of different sizes: the average is separable, one MatMul per spatial axis
        rank = n + 2
        dtype = ctx.out_dtype()
        y = x
        for axis in range(rank - 1, 1, -1):
            size_in, size_out = spatial[axis - 2], out[axis - 2]
            if size_out is None:
                continue
            if axis != rank - 1:
                perm = list(range(rank))
                perm[axis], perm[-1] = perm[-1], perm[axis]
                y = ctx.op.Transpose(y, perm=perm)
            y = ctx.op.MatMul(y, _adaptive_weights(ctx, x, axis, size_in, size_out, dtype))
            if axis != rank - 1:
                y = ctx.op.Transpose(y, perm=perm)
        return _remove_batch(ctx, y, unbatched)

    convert_adaptive_avg_pool.__name__ = f"convert_adaptive_avg_pool{n}d"
    return convert_adaptive_avg_pool


converter(aten.adaptive_avg_pool1d.default)(_make_adaptive_avg_pool(1))
converter(aten.adaptive_avg_pool2d.default, aten._adaptive_avg_pool2d.default)(_make_adaptive_avg_pool(2))
converter(aten.adaptive_avg_pool3d.default, aten._adaptive_avg_pool3d.default)(_make_adaptive_avg_pool(3))


def _window_indices(ctx, x, axis: int, size_out: int):
    """[out, K] input positions of adaptive pooling's windows along ``axis`` (:func:`_window_bounds`),
    K the longest; shorter windows repeat their last position (a max over a repeated value is
    unchanged, its first occurrence too)."""
    i64 = torch.int64
    start, end = _window_bounds(ctx, x, axis, size_out)
    last = ctx.op.Unsqueeze(ctx.op.Sub(ctx.op.Sub(end, start), ctx.const(1, i64)), ctx.const([1], i64))
    longest = ctx.op.ReduceMax(ctx.op.Sub(end, start), keepdims=0)
    steps = ctx.op.Unsqueeze(ctx.op.Range(ctx.const(0, i64), longest, ctx.const(1, i64)), ctx.const([0], i64))
    return ctx.op.Add(ctx.op.Unsqueeze(start, ctx.const([1], i64)), ctx.op.Min(steps, last))


def _make_adaptive_max_pool(n: int):
    def convert_adaptive_max_pool(ctx, node, x, output_size):
        out = _ntuple(output_size, n)
        spatial = _static_dims(ctx)[-n:]
        if all(isinstance(s, int) and s % o == 0 for s, o in zip(spatial, out)):
            kernel = [s // o for s, o in zip(spatial, out)]
            return _max_pool(ctx, x, kernel, kernel, 0, 1, False, n, with_indices=True)
        # windows of different sizes: one axis at a time (last first), gather every window, keep its
        # max and the flat spatial index of the first one in row-major order, as torch
        i64 = torch.int64
        x, unbatched = _add_batch(ctx, x, n)
        flat = ctx.op.Range(ctx.const(0, i64), ctx.op.ReduceProd(ctx.op.Shape(x, start=2), keepdims=0), ctx.const(1, i64))
        index = ctx.op.Expand(ctx.op.Reshape(flat, ctx.op.Shape(x, start=2)), ctx.op.Shape(x))
        values = x
        for axis in range(n + 1, 1, -1):
            windows = _window_indices(ctx, x, axis, out[axis - 2])
            gathered = ctx.op.Gather(values, windows, axis=axis)  # [..., out, K, ...]
            first = ctx.op.ArgMax(gathered, axis=axis + 1, keepdims=1)
            values = ctx.op.Squeeze(ctx.op.GatherElements(gathered, first, axis=axis + 1), ctx.const([axis + 1], i64))
            candidates = ctx.op.Gather(index, windows, axis=axis)
            index = ctx.op.Squeeze(ctx.op.GatherElements(candidates, first, axis=axis + 1), ctx.const([axis + 1], i64))
        return _remove_batch(ctx, values, unbatched), _remove_batch(ctx, index, unbatched)

    convert_adaptive_max_pool.__name__ = f"convert_adaptive_max_pool{n}d"
    return convert_adaptive_max_pool


converter(aten.adaptive_max_pool1d.default)(_make_adaptive_max_pool(1))
converter(aten.adaptive_max_pool2d.default)(_make_adaptive_max_pool(2))
converter(aten.adaptive_max_pool3d.default)(_make_adaptive_max_pool(3))


@converter(aten.max_unpool2d.default, aten.max_unpool3d.default)
def convert_max_unpool(ctx, node, x, indices, output_size, *args):
    # scatter the values back at their positions (indices are per channel, over the spatial dims)
    n = len(output_size)
    x, unbatched = _add_batch(ctx, x, n)
    indices, _ = _add_batch(ctx, indices, n, index=1)
    flat_shape = ctx.const([0, 0, -1], torch.int64)
    values, positions = ctx.op.Reshape(x, flat_shape), ctx.op.Reshape(indices, flat_shape)
    total = ctx.const([int(np.prod([int(o) for o in output_size]))], torch.int64)
    zeros = ctx.op.Expand(ctx.const(0, ctx.out_dtype()), ctx.op.Concat(ctx.op.Shape(x, start=0, end=2), total, axis=0))
    flat = ctx.op.ScatterElements(zeros, positions, values, axis=2)
    out_shape = ctx.op.Concat(ctx.op.Shape(x, start=0, end=2), ctx.shape_value(list(output_size)), axis=0)
    return _remove_batch(ctx, ctx.op.Reshape(flat, out_shape), unbatched)


# padding
def _pad_pairs(pad: Sequence[Any], rank: int) -> list[tuple[int, Any, Any]]:
    """torch's pad list (last dimension first) -> [(axis, begin, end)]."""
    pairs = []
    for i in range(len(pad) // 2):
        pairs.append((rank - 1 - i, pad[2 * i], pad[2 * i + 1]))
    return pairs[::-1]


def _pad(ctx, x, pad: Sequence[Any], mode: str, value: Any = None):
    rank = input_rank(ctx)
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise ctx.error(f"pad={list(pad)} must have an even length of at most 2 * rank ({2 * rank}).")
    pairs = _pad_pairs(pad, rank)
    if mode == "circular":
        return _pad_circular(ctx, x, pairs)
    onnx_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}.get(mode)
    if onnx_mode is None:
        raise ctx.error(f"Unknown padding mode {mode!r}: use constant, reflect, replicate or circular.")
    if onnx_mode != "constant" and any(isinstance(p, int) and p < 0 for _, b, e in pairs for p in (b, e)):
        x, pairs = _crop_negative_pads(ctx, x, pairs)
    axes = ctx.const([a for a, _, _ in pairs], torch.int64)
    pads = ctx.shape_value([b for _, b, _ in pairs] + [e for _, _, e in pairs])
    fill = None
    if onnx_mode == "constant":
        fill = ctx.as_value(0 if value is None else value, ctx.out_dtype())
    return ctx.op.Pad(x, pads, fill, axes, mode=onnx_mode)


def _crop_negative_pads(ctx, x, pairs):
    """A negative pad removes elements: a Slice, then the positive pads (onnxruntime's edge and
    reflect modes refuse negative pads)."""
    kept = [(axis, b, e) for axis, b, e in pairs if (isinstance(b, int) and b < 0) or (isinstance(e, int) and e < 0)]
    starts = [-b if isinstance(b, int) and b < 0 else 0 for _, b, _ in kept]
    ends = [e if isinstance(e, int) and e < 0 else 2**62 for _, _, e in kept]
    x = ctx.op.Slice(x, ctx.const(starts, torch.int64), ctx.const(ends, torch.int64), ctx.const([a for a, _, _ in kept], torch.int64))
    clipped = [(a, max(b, 0) if isinstance(b, int) else b, max(e, 0) if isinstance(e, int) else e) for a, b, e in pairs]
    return x, clipped


def _pad_circular(ctx, x, pairs):
    for axis, begin, end in pairs:
        if not isinstance(begin, int) or not isinstance(end, int) or begin < 0 or end < 0:
            raise ctx.error("circular padding needs non-negative static pads.")
        parts = []
        if begin:
            parts.append(
                ctx.op.Slice(
                    x, ctx.const([-begin], torch.int64), ctx.const([2**62], torch.int64), ctx.const([axis], torch.int64)
                )
            )
        parts.append(x)
        if end:
            parts.append(
                ctx.op.Slice(
                    x, ctx.const([0], torch.int64), ctx.const([end], torch.int64), ctx.const([axis], torch.int64)
                )
            )
        if len(parts) > 1:
            x = ctx.op.Concat(*parts, axis=axis)
    return x if any(b or e for _, b, e in pairs) else ctx.op.Identity(x)


@converter(aten.pad.default)
def convert_pad(ctx, node, x, pad, mode="constant", value=None):
    return _pad(ctx, x, pad, mode, value)


@converter(aten.constant_pad_nd.default)
def convert_constant_pad_nd(ctx, node, x, pad, value=0):
    return _pad(ctx, x, pad, "constant", value)


def _make_mode_pad(mode: str):
    def convert_mode_pad(ctx, node, x, padding):
        return _pad(ctx, x, padding, mode)

    convert_mode_pad.__name__ = f"convert_{mode}_pad"
    return convert_mode_pad


converter(aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default)(
    _make_mode_pad("reflect")
)
converter(aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default)(
    _make_mode_pad("replicate")
)
converter(aten._pad_circular.default)(_make_mode_pad("circular"))


# unfold / fold: a grouped convolution with one-hot kernels picks (or scatters back) every patch
def _one_hot_kernels(channels: int, kernel: list[int]) -> np.ndarray:
    """[C * kh * kw, 1, kh, kw]: output channel c * K + k copies position k of channel c."""
    k = int(np.prod(kernel))
    eye = np.eye(k, dtype=np.float64).reshape(k, 1, *kernel)
    return np.tile(eye, (channels, 1, 1, 1))


@converter(aten.im2col.default)
def convert_im2col(ctx, node, x, kernel_size, dilation, padding, stride):
    x, unbatched = _add_batch(ctx, x, 2)
    channels = _static_dims(ctx)[-3]
    image = None
    if not isinstance(channels, int):
        # a dynamic number of channels: every channel as an image of its own ([B * C, 1, H, W]), one group
        image = ctx.op.Shape(x)
        images = ctx.op.ReduceProd(ctx.op.Shape(x, end=2), ctx.const([0], torch.int64), keepdims=1)  # no -1: B or C may be 0
        x = ctx.op.Reshape(x, ctx.op.Concat(images, ctx.const([1], torch.int64), ctx.op.Shape(x, start=2), axis=0))
        channels = 1
    kernel = _ntuple(kernel_size, 2)
    weight = ctx.const(_one_hot_kernels(channels, kernel), ctx.out_dtype())
    if ctx.out_dtype() in CONV_BY_PRODUCTS:
        patches = conv_by_products(ctx, x, weight, None, kernel, _ntuple(stride, 2), _ntuple(padding, 2) * 2, _ntuple(dilation, 2), channels, 2)
    else:
        patches = ctx.op.Conv(
            x,
            weight,
            kernel_shape=kernel,
            strides=_ntuple(stride, 2),
            pads=_ntuple(padding, 2) * 2,
            dilations=_ntuple(dilation, 2),
            group=channels,
        )
    # (batch, C*k, blocks): the number of blocks computed, a -1 cannot be inferred for an empty batch
    blocks = ctx.op.ReduceProd(ctx.op.Shape(patches, start=2), ctx.const([0], torch.int64), keepdims=1)
    if image is None:
        rows = ctx.op.Shape(patches, end=2)
    else:  # [B * C, k, ...] -> [B, C * k, ...]: channel c's positions follow each other, as torch orders them
        size = ctx.op.Shape(patches, start=1, end=2)
        rows = ctx.op.Concat(ctx.op.Slice(image, *(ctx.const([v], torch.int64) for v in (0, 1))), ctx.op.Mul(ctx.op.Slice(image, *(ctx.const([v], torch.int64) for v in (1, 2))), size), axis=0)
    y = ctx.op.Reshape(patches, ctx.op.Concat(rows, blocks, axis=0))
    return _remove_batch(ctx, y, unbatched)


@converter(aten.col2im.default)
def convert_col2im(ctx, node, x, output_size, kernel_size, dilation, padding, stride):
    x, unbatched = _add_batch(ctx, x, 1)
    kernel = _ntuple(kernel_size, 2)
    k = int(np.prod(kernel))
    rows = _static_dims(ctx)[-2]
    if not isinstance(rows, int):
        raise ctx.error("fold (col2im) needs a static number of channels times kernel positions (dimension 1).")
    channels = rows // k
    strides, pads, dilations = _ntuple(stride, 2), _ntuple(padding, 2), _ntuple(dilation, 2)
    weight = ctx.const(_one_hot_kernels(channels, kernel), ctx.out_dtype())
    reach = [d * (kk - 1) + 1 for d, kk in zip(dilations, kernel)]  # extent of one kernel
    if all(isinstance(o, int) for o in output_size):
        blocks = [(o + 2 * p - r) // s + 1 for o, p, r, s in zip(output_size, pads, reach, strides)]
        produced = [(b - 1) * s + r - 2 * p for b, s, r, p in zip(blocks, strides, reach, pads)]
        grid = ctx.op.Reshape(x, ctx.const([0, rows] + blocks, torch.int64))
        return _remove_batch(ctx, ctx.op.ConvTranspose(
            grid, weight, kernel_shape=kernel, strides=strides, pads=pads * 2, dilations=dilations,
            group=channels, output_padding=[int(o) - p for o, p in zip(output_size, produced)],
        ), unbatched)
    # dynamic output size: the blocks per dimension computed from it, the transposed convolution
    # cropped at the start only, then padded (or cropped) at the end to the output size
    out = ctx.shape_value(list(output_size))
    offset = ctx.const([2 * p - r for p, r in zip(pads, reach)], torch.int64)
    step = ctx.const(list(strides), torch.int64)
    one = ctx.const([1, 1], torch.int64)
    blocks = ctx.op.Add(ctx.op.Div(ctx.op.Add(out, offset), step), one)
    grid = ctx.op.Reshape(x, ctx.op.Concat(ctx.const([0, rows], torch.int64), blocks, axis=0))
    y = ctx.op.ConvTranspose(grid, weight, kernel_shape=kernel, strides=strides, pads=list(pads) + [0, 0],
                             dilations=dilations, group=channels)
    produced = ctx.op.Add(ctx.op.Mul(ctx.op.Sub(blocks, one), step), ctx.const([r - p for r, p in zip(reach, pads)], torch.int64))
    end = ctx.op.Sub(out, produced)
    y = ctx.op.Pad(y, ctx.op.Concat(ctx.const([0] * 6, torch.int64), end, axis=0))
    return _remove_batch(ctx, y, unbatched)
