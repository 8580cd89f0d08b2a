"""Counting and selecting operators real models use: histc (mixture-of-experts routing),
histogram, repeat_interleave (interleaved rotary embeddings), masked_select, put, nanmedian, mode."""

from __future__ import annotations

import torch

from ..registry import converter
from ._common import fake_of, input_rank, normalize_axis
from .indexing import _scatter_add

aten = torch.ops.aten
_I64 = torch.int64
# TopK's dtypes on onnxruntime; the others are sorted as float32 (floats) or int64 (ints, bool)
_TOPK_DTYPES = {torch.float32, torch.float64, torch.int64, torch.int32}


def _flat(ctx, x):
    return ctx.op.Reshape(x, ctx.const([-1], _I64))


@converter(aten.bincount.default)
def convert_bincount(ctx, node, x, weights=None, minlength=0):
    """Occurrences (or summed weights) of each value of a 1-D non-negative integer tensor, over
    max(x.max() + 1, minlength) bins: a ScatterElements adding into zeros."""
    dtype = ctx.out_dtype()
    work = torch.float64 if dtype.is_floating_point else torch.int64
    x = ctx.cast(x, _I64)
    largest = ctx.op.ReduceMax(ctx.op.Concat(x, ctx.const([-1], _I64), axis=0), keepdims=1)
    size = ctx.op.Max(ctx.op.Add(largest, ctx.const([1], _I64)), ctx.const([int(minlength)], _I64))
    counts = ctx.op.Expand(ctx.const(0, work), size)
    added = ctx.op.Expand(ctx.const(1, work), ctx.op.Shape(x)) if weights is None else ctx.cast(weights, work)
    return ctx.cast(ctx.op.ScatterElements(counts, x, added, axis=0, reduction="add"), dtype)


@converter(aten.histc.default)
def convert_histc(ctx, node, x, bins=100, min=0, max=0):
    """Counts of x in ``bins`` equal bins over [min, max], torch's formula
    ``int((x - min) * bins / (max - min))`` with x == max in the last bin and values
    outside ignored. ``min == max`` means the data's range (widened by 1 when constant).
    Integer inputs (accepted by CUDA kernels) are binned in float64."""
    dtype = ctx.out_dtype()
    work = dtype if dtype in (torch.float32, torch.float64) else torch.float64
    data = _flat(ctx, ctx.cast(x, work))
    if min == max:
        lo, hi = ctx.op.ReduceMin(data, keepdims=0), ctx.op.ReduceMax(data, keepdims=0)
        same = ctx.op.Equal(lo, hi)
        one = ctx.const(1.0, work)
        lo = ctx.op.Where(same, ctx.op.Sub(lo, one), lo)
        hi = ctx.op.Where(same, ctx.op.Add(hi, one), hi)
    else:
        lo, hi = ctx.const(float(min), work), ctx.const(float(max), work)
    valid = ctx.op.And(ctx.op.GreaterOrEqual(data, lo), ctx.op.LessOrEqual(data, hi))
    scaled = ctx.op.Div(ctx.op.Mul(ctx.op.Sub(data, lo), ctx.const(float(bins), work)), ctx.op.Sub(hi, lo))
    position = ctx.op.Where(valid, ctx.cast(scaled, _I64), ctx.const(0, _I64))
    position = ctx.op.Min(position, ctx.const(int(bins) - 1, _I64))
    counts = ctx.op.Expand(ctx.const(0.0, work), ctx.const([int(bins)], _I64))
    counts = ctx.op.ScatterElements(counts, position, ctx.cast(valid, work), axis=0, reduction="add")
    return ctx.cast(counts, dtype)


def _torch_linspace(ctx, lo, hi, count: int, dtype: torch.dtype):
    """``count`` points from lo to hi the way torch's CPU kernel computes them: from the start
    for the first half, from the end for the second (both ends exact)."""
    idx = ctx.op.Range(ctx.const(0, _I64), ctx.const(count, _I64), ctx.const(1, _I64))
    step = ctx.op.Div(ctx.op.Sub(hi, lo), ctx.const(float(max(count - 1, 1)), dtype))
    forward = ctx.op.Add(lo, ctx.op.Mul(step, ctx.cast(idx, dtype)))
    backward = ctx.op.Sub(hi, ctx.op.Mul(step, ctx.cast(ctx.op.Sub(ctx.const(count - 1, _I64), idx), dtype)))
    return ctx.op.Where(ctx.op.Less(idx, ctx.const(count // 2, _I64)), forward, backward)


def _histogram_range(ctx, data, dtype, range_):
    """torch.histogram's outer edges of 1-D data: the given range, else the data's (0..1 when
    empty), widened by 0.5 on each side when both are equal."""
    if range_ is not None:
        lo, hi = ctx.const(float(range_[0]), dtype), ctx.const(float(range_[1]), dtype)
    else:
        padded = lambda v: ctx.op.Concat(data, ctx.const([v], dtype), axis=0)  # noqa: E731
        empty = ctx.op.Equal(ctx.op.Size(data), ctx.const(0, _I64))
        lo = ctx.op.Where(empty, ctx.const(0.0, dtype), ctx.op.ReduceMin(padded(float("inf")), keepdims=0))
        hi = ctx.op.Where(empty, ctx.const(1.0, dtype), ctx.op.ReduceMax(padded(float("-inf")), keepdims=0))
    same, half = ctx.op.Equal(lo, hi), ctx.const(0.5, dtype)
    return ctx.op.Where(same, ctx.op.Sub(lo, half), lo), ctx.op.Where(same, ctx.op.Add(hi, half), hi)


_END = 2**62


def _bin_position(ctx, data, edges):
    """(inside, bin) of every value of 1-D data: inside the outer edges, the last bin closed on the
    right; the bin counts the inner edges at or below the value."""
    first = ctx.op.Slice(edges, ctx.const([0], _I64), ctx.const([1], _I64))
    last = ctx.op.Slice(edges, ctx.const([-1], _I64), ctx.const([_END], _I64))
    inner = ctx.op.Slice(edges, ctx.const([1], _I64), ctx.const([-1], _I64))
    inside = ctx.op.And(ctx.op.GreaterOrEqual(data, first), ctx.op.LessOrEqual(data, last))
    below = ctx.op.LessOrEqual(inner, ctx.op.Unsqueeze(data, ctx.const([1], _I64)))
    return inside, ctx.op.ReduceSum(ctx.cast(below, _I64), ctx.const([1], _I64), keepdims=0)


def _widths(ctx, edges):
    upper = ctx.op.Slice(edges, ctx.const([1], _I64), ctx.const([_END], _I64))
    return ctx.op.Sub(upper, ctx.op.Slice(edges, ctx.const([0], _I64), ctx.const([-1], _I64)))


def _histogramdd(ctx, columns, edges, weight, density, dtype):
    """Counts (or summed weights) of the points whose coordinates are ``columns`` (1-D each) in the
    grid of bins the ``edges`` draw (any length), values outside ignored; ``density`` divides by
    the total and the bin volumes."""
    inside, flat_bin = None, ctx.const(0, _I64)
    counts = [ctx.op.Sub(ctx.op.Shape(edge), ctx.const([1], _I64)) for edge in edges]
    for column, edge, count in zip(columns, edges, counts):
        ok, position = _bin_position(ctx, column, edge)
        inside = ok if inside is None else ctx.op.And(inside, ok)
        flat_bin = ctx.op.Add(ctx.op.Mul(flat_bin, count), position)
    flat_bin = ctx.op.Expand(flat_bin, ctx.op.Shape(inside))
    added = ctx.cast(inside, dtype) if weight is None else ctx.op.Where(inside, _flat(ctx, weight), ctx.const(0.0, dtype))
    grid = ctx.op.Concat(*counts, axis=0) if len(counts) > 1 else counts[0]
    total = ctx.op.ReduceProd(grid, ctx.const([0], _I64), keepdims=1)
    hist = ctx.op.ScatterElements(ctx.op.Expand(ctx.const(0.0, dtype), total), flat_bin, added, axis=0, reduction="add")
    hist = ctx.op.Reshape(hist, grid)
    if density:
        hist = ctx.op.Div(hist, ctx.op.ReduceSum(hist, keepdims=1))
        for d, edge in enumerate(edges):
            shape = [1] * len(edges)
            shape[d] = -1
            hist = ctx.op.Div(hist, ctx.op.Reshape(_widths(ctx, edge), ctx.const(shape, _I64)))
    return hist


def _columns(ctx, x, dims: int):
    """The D coordinates of histogramdd's points (the input's last dimension) as 1-D values."""
    points = ctx.op.Reshape(x, ctx.const([-1, dims], _I64))
    return [ctx.op.Reshape(ctx.op.Gather(points, ctx.const(d, _I64), axis=1), ctx.const([-1], _I64)) for d in range(dims)]


def _bin_edges(ctx, columns, bin_ct: list[int], range_, dtype):
    edges = []
    for d, (column, count) in enumerate(zip(columns, bin_ct)):
        lo, hi = _histogram_range(ctx, column, dtype, None if range_ is None else range_[2 * d : 2 * d + 2])
        edges.append(_torch_linspace(ctx, lo, hi, int(count) + 1, dtype))
    return edges


@converter(aten.histogram.bin_ct)
def convert_histogram_bin_ct(ctx, node, x, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    dtype = ctx.out_dtype(0)
    columns = [_flat(ctx, x)]
    edges = _bin_edges(ctx, columns, [int(bins)], range, dtype)
    return _histogramdd(ctx, columns, edges, weight, density, dtype), edges[0]


@converter(aten.histogram.bins_tensor)
def convert_histogram_bins_tensor(ctx, node, x, bins, *, weight=None, density=False):
    return _histogramdd(ctx, [_flat(ctx, x)], [bins], weight, density, ctx.out_dtype(0)), ctx.op.Identity(bins)


@converter(aten._histogramdd_bin_edges.default)
def convert_histogramdd_bin_edges(ctx, node, x, bin_ct, *, range=None, weight=None, density=False):  # noqa: A002
    return tuple(_bin_edges(ctx, _columns(ctx, x, len(bin_ct)), list(bin_ct), range, ctx.out_dtype(0)))


@converter(aten._histogramdd_from_bin_cts.default)
def convert_histogramdd_from_bin_cts(ctx, node, x, bins, *, range=None, weight=None, density=False):  # noqa: A002
    dtype, columns = ctx.out_dtype(), _columns(ctx, x, len(bins))
    return _histogramdd(ctx, columns, _bin_edges(ctx, columns, list(bins), range, dtype), weight, density, dtype)


@converter(aten._histogramdd_from_bin_tensors.default)
def convert_histogramdd_from_bin_tensors(ctx, node, x, bins, *, weight=None, density=False):
    return _histogramdd(ctx, _columns(ctx, x, len(bins)), list(bins), weight, density, ctx.out_dtype())


def _repeat_indices(ctx, repeats):
    """repeat_interleave(repeats): i repeated repeats[i] times, with a scatter of the run ends and a cumsum."""
    repeats = _flat(ctx, ctx.cast(repeats, _I64))
    ends = ctx.op.CumSum(repeats, ctx.const(0, _I64))
    total = ctx.op.ReduceSum(repeats, ctx.const([0], _I64), keepdims=1)
    marks = ctx.op.Expand(ctx.const(0, _I64), ctx.op.Add(total, ctx.const([1], _I64)))
    marks = ctx.op.ScatterElements(marks, ends, ctx.op.Expand(ctx.const(1, _I64), ctx.op.Shape(ends)), axis=0, reduction="add")
    run = ctx.op.CumSum(marks, ctx.const(0, _I64))
    return ctx.op.Slice(run, ctx.const([0], _I64), total, ctx.const([0], _I64))


_SEGMENT_REDUCTIONS = {"sum": ("add", 0.0), "mean": ("add", 0.0), "prod": ("mul", 1.0), "max": ("max", float("-inf")), "min": ("min", float("inf"))}


@converter(aten.segment_reduce.default)
def convert_segment_reduce(ctx, node, data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    """Reductions of consecutive segments of the first axis (1-D lengths or offsets; torch wants the
    axis to be the last of the lengths'): each segment
    starts from ``initial`` (or the reduction's identity) and a ScatterElements reduces its values
    into it; a mean divides by the length, an empty one is ``initial`` or NaN; NaN propagates."""
    if reduce not in _SEGMENT_REDUCTIONS:
        raise ctx.error(f"segment_reduce with reduce={reduce!r} is not supported (sum, mean, prod, max, min).")
    if indices is not None or (lengths is None) == (offsets is None):
        raise ctx.error("segment_reduce is supported with lengths or offsets (1-D), not indices.")
    length_rank = fake_of(node.kwargs.get("lengths", node.kwargs.get("offsets"))).dim()
    if length_rank != 1:
        raise ctx.error("segment_reduce is supported with 1-D lengths or offsets.")
    dtype = ctx.out_dtype()
    if lengths is None:
        lengths = ctx.op.Sub(ctx.op.Slice(offsets, ctx.const([1], _I64), ctx.const([2**62], _I64)), ctx.op.Slice(offsets, ctx.const([0], _I64), ctx.const([-1], _I64)))
    lengths = ctx.cast(lengths, _I64)
    values = data
    reduction, identity = _SEGMENT_REDUCTIONS[reduce]
    start = identity if initial is None else float(initial)
    rest = ctx.op.Shape(values, start=1)
    out_shape = ctx.op.Concat(ctx.op.Shape(lengths), rest, axis=0)
    column = ctx.op.Concat(ctx.const([-1], _I64), ctx.op.Expand(ctx.const([1], _I64), ctx.op.Shape(rest)), axis=0)  # [-1, 1, ...]
    ids = ctx.op.Expand(ctx.op.Reshape(_repeat_indices(ctx, lengths), column), ctx.op.Shape(values))
    out = ctx.op.ScatterElements(ctx.op.Expand(ctx.const(start, dtype), out_shape), ids, values, axis=0, reduction=reduction)
    count = ctx.op.Reshape(lengths, column)
    if reduce == "mean":
        empty = ctx.const(float("nan") if initial is None else float(initial), dtype)
        out = ctx.op.Where(ctx.op.Equal(count, ctx.const(0, _I64)), empty, ctx.op.Div(out, ctx.cast(count, dtype)))
    if reduce in ("max", "min"):  # onnxruntime's max/min skip NaN, torch propagates it
        nans = ctx.op.ScatterElements(ctx.op.Expand(ctx.const(0.0, dtype), out_shape), ids, ctx.cast(ctx.op.IsNaN(values), dtype), axis=0, reduction="add")
        out = ctx.op.Where(ctx.op.Greater(nans, ctx.const(0.0, dtype)), ctx.const(float("nan"), dtype), out)
    return out


@converter(aten.repeat_interleave.Tensor)
def convert_repeat_interleave_tensor(ctx, node, repeats, output_size=None):
    return ctx.cast(_repeat_indices(ctx, repeats), ctx.out_dtype())


def _prepare(ctx, x, dim):
    """(data, axis): the input flattened when dim is None (or 0-d), the axis normalized."""
    rank = input_rank(ctx)
    if dim is None or rank == 0:
        return _flat(ctx, x), 0
    return x, normalize_axis(dim, rank)


@converter(aten.repeat_interleave.self_int)
def convert_repeat_interleave_int(ctx, node, x, repeats, dim=None, output_size=None):
    """Each slice along ``dim`` repeated ``repeats`` times: Unsqueeze, Expand, Reshape (repeats may be dynamic)."""
    data, axis = _prepare(ctx, x, dim)
    rank = 1 if dim is None or input_rank(ctx) == 0 else input_rank(ctx)
    shape = ctx.op.Shape(data)
    count = ctx.scalar_1d(repeats)

    def part(start, end):
        return ctx.op.Slice(shape, ctx.const([start], _I64), ctx.const([end], _I64))

    before, size, after = part(0, axis), part(axis, axis + 1), part(axis + 1, rank)
    # Tile, not Expand: onnxruntime expands a dimension 1 to 1, not 0, when repeats is 0
    tiles = ctx.op.Concat(ctx.const([1] * (axis + 1), _I64), count, ctx.const([1] * (rank - axis - 1), _I64), axis=0)
    expanded = ctx.op.Tile(ctx.op.Unsqueeze(data, ctx.const([axis + 1], _I64)), tiles)
    return ctx.op.Reshape(expanded, ctx.op.Concat(before, ctx.op.Mul(size, count), after, axis=0), allowzero=1)


@converter(aten.repeat_interleave.self_Tensor)
def convert_repeat_interleave_self_tensor(ctx, node, x, repeats, dim=None, output_size=None):
    data, axis = _prepare(ctx, x, dim)
    if fake_of(node.args[1]).numel() == 1:  # one count for every slice
        return convert_repeat_interleave_int(ctx, node, x, ctx.op.Reshape(repeats, ctx.const([], _I64)), dim)
    return ctx.op.Gather(data, _repeat_indices(ctx, repeats), axis=axis)


@converter(aten.masked_select.default)
def convert_masked_select(ctx, node, x, mask):
    """x[mask] after broadcasting both, flattened (a dynamic length)."""
    mask = ctx.cast(mask, torch.bool)
    values = ctx.op.Expand(x, ctx.op.Shape(mask))  # Expand broadcasts both ways: the common shape
    mask = ctx.op.Expand(mask, ctx.op.Shape(values))
    return ctx.op.Compress(_flat(ctx, values), _flat(ctx, mask), axis=0)


@converter(aten.put.default)
def convert_put(ctx, node, x, index, source, accumulate=False):
    """x.flatten()[index] = source (or += with accumulate), negative indices from the end."""
    data = _flat(ctx, x)
    idx = _flat(ctx, ctx.cast(index, _I64))
    negative = ctx.cast(ctx.op.Less(idx, ctx.const(0, _I64)), _I64)
    idx = ctx.op.Add(idx, ctx.op.Mul(negative, ctx.op.Size(x)))
    src = _flat(ctx, ctx.cast(source, ctx.out_dtype()))
    out = _scatter_add(ctx, data, idx, src, 0) if accumulate else ctx.op.ScatterElements(data, idx, src, axis=0)
    return ctx.op.Reshape(out, ctx.op.Shape(x))


def _sortable(ctx, x, dtype: torch.dtype):
    if dtype in _TOPK_DTYPES:
        return x
    return ctx.cast(x, torch.float32 if dtype.is_floating_point else _I64)


def _nan_lower_median(ctx, x, axis: int, keepdim: bool):
    """(values, indices) of the lower median of the non-NaN values along ``axis`` (NaN when all are NaN)."""
    dtype = ctx.out_dtype(0)
    n = ctx.op.Shape(x, start=axis, end=axis + 1)
    nan = ctx.op.IsNaN(x)
    keys = ctx.op.Where(nan, ctx.const(float("inf"), dtype), x)
    values, indices = ctx.op.TopK(_sortable(ctx, keys, dtype), n, axis=axis, largest=0, sorted=1, _outputs=2)
    count = ctx.op.ReduceSum(ctx.cast(ctx.op.Not(nan), _I64), ctx.const([axis], _I64), keepdims=1)
    k = ctx.op.Max(ctx.op.Div(ctx.op.Sub(count, ctx.const(1, _I64)), ctx.const(2, _I64)), ctx.const(0, _I64))
    value = ctx.cast(ctx.op.GatherElements(values, k, axis=axis), dtype)
    value = ctx.op.Where(ctx.op.Equal(count, ctx.const(0, _I64)), ctx.const(float("nan"), dtype), value)
    index = ctx.op.GatherElements(indices, k, axis=axis)
    if not keepdim:
        squeeze = ctx.const([axis], _I64)
        value, index = ctx.op.Squeeze(value, squeeze), ctx.op.Squeeze(index, squeeze)
    return value, index


@converter(aten.nanmedian.default)
def convert_nanmedian(ctx, node, x):
    value, _ = _nan_lower_median(ctx, _flat(ctx, x), 0, False)
    return value


@converter(aten.nanmedian.dim)
def convert_nanmedian_dim(ctx, node, x, dim, keepdim=False):
    rank = input_rank(ctx)
    if rank == 0:
        return ctx.op.Identity(x), ctx.const(0, _I64)
    return _nan_lower_median(ctx, x, normalize_axis(dim, rank), keepdim)


@converter(aten.mode.default)
def convert_mode(ctx, node, x, dim=-1, keepdim=False):
    """The most frequent value (the smallest among ties) and the index of its last occurrence."""
    rank = input_rank(ctx)
    if rank == 0:
        return ctx.op.Identity(x), ctx.const(0, _I64)
    axis = normalize_axis(dim, rank)
    keys = _sortable(ctx, x, ctx.out_dtype(0))
    n = ctx.op.Shape(x, start=axis, end=axis + 1)
    ordered, _ = ctx.op.TopK(keys, n, axis=axis, largest=0, sorted=1, _outputs=2)
    same = ctx.op.Equal(ctx.op.Unsqueeze(ordered, ctx.const([axis + 1], _I64)), ctx.op.Unsqueeze(ordered, ctx.const([axis], _I64)))
    counts = ctx.op.ReduceSum(ctx.cast(same, _I64), ctx.const([axis + 1], _I64), keepdims=0)
    best = ctx.op.ArgMax(counts, axis=axis, keepdims=1, select_last_index=0)
    value = ctx.op.GatherElements(ordered, best, axis=axis)
    shape = [1] * rank
    shape[axis] = -1
    positions = ctx.op.Reshape(ctx.op.Range(ctx.const(0, _I64), ctx.op.Squeeze(n, ctx.const([0], _I64)), ctx.const(1, _I64)), ctx.const(shape, _I64))
    hits = ctx.op.Where(ctx.op.Equal(keys, value), positions, ctx.const(-1, _I64))
    index = ctx.op.ReduceMax(hits, ctx.const([axis], _I64), keepdims=1)
    value = ctx.cast(value, ctx.out_dtype(0))
    if not keepdim:
        squeeze = ctx.const([axis], _I64)
        value, index = ctx.op.Squeeze(value, squeeze), ctx.op.Squeeze(index, squeeze)
    return value, index
