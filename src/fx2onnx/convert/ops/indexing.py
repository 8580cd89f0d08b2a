"""Indexing operators: index, index_put, gather, scatter, masked_fill, *_scatter, nonzero."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch
from torch.fx.experimental.symbolic_shapes import guard_or_false

from ..registry import converter
from ._common import as_rank_1, back_to_rank, fake_of, input_rank, normalize_axis
from ._index_facts import known_non_negative

aten = torch.ops.aten
INT64_MAX = 9223372036854775807


def _normalize_index(ctx, idx, x, axis: int, fx_index=None):
    """Negative indices count from the end: idx + (idx < 0) * size; nothing to add to an index the graph
    proves non-negative (``fx_index``, its FX argument: an arange, a mask's positions)."""
    idx = ctx.cast(idx, torch.int64)
    if fx_index is not None and known_non_negative(fx_index):
        return idx
    size = ctx.dim_size(x, axis)
    neg = ctx.cast(ctx.op.Less(idx, ctx.const(0, torch.int64)), torch.int64)
    return ctx.op.Add(idx, ctx.op.Mul(neg, size))


def _expand_bool_indices(ctx, indices, fakes, fx_indices):
    """Replaces each boolean mask (covering m dims) by m int64 index tensors (NonZero)."""
    out, out_fakes, out_fx = [], [], []
    for idx, f, fx in zip(indices, fakes, fx_indices):
        if idx is not None and isinstance(f, torch.Tensor) and f.dtype == torch.bool:
            nz = ctx.op.NonZero(idx)  # [m, N]
            m = f.dim()
            if m == 1:
                out.append(ctx.op.Squeeze(nz, ctx.const([0], torch.int64)))
                out_fakes.append("int")
            else:
                parts = ctx.op.Split(nz, ctx.const([1] * m, torch.int64), axis=0, _outputs=m)
                for p in parts:
                    out.append(ctx.op.Squeeze(p, ctx.const([0], torch.int64)))
                    out_fakes.append("int")
            out_fx.extend([fx] * m)  # positions of true values: non-negative, as the mask says
        else:
            out.append(idx)
            out_fakes.append(f)
            out_fx.append(fx)
    return out, out_fakes, out_fx


def _index_layout(ctx, x, indices, fakes, rank, fx_indices):
    """Common part of index and index_put.

    Returns (data with indexed dims first, stacked indices [B..., k], positions of the
    indexed dims, broadcast shape B as a value, whether the indexed dims are consecutive).
    """
    indices, fakes, fx_indices = _expand_bool_indices(ctx, indices, fakes, fx_indices)
    # trailing dims not given are not indexed
    positions = [i for i, idx in enumerate(indices) if idx is not None]
    others = [i for i in range(rank) if i not in positions]
    perm = positions + others
    data = x if perm == list(range(rank)) else ctx.op.Transpose(x, perm=perm)
    norm = [_normalize_index(ctx, indices[p], x, p, fx_indices[p]) for p in positions]
    total = norm[0]
    for n in norm[1:]:
        total = ctx.op.Add(total, n)
    bshape = ctx.op.Shape(total)
    unsq = [ctx.op.Unsqueeze(ctx.op.Expand(n, bshape), ctx.const([-1], torch.int64)) for n in norm]
    stacked = unsq[0] if len(unsq) == 1 else ctx.op.Concat(*unsq, axis=-1)
    consecutive = positions == list(range(positions[0], positions[0] + len(positions)))
    return data, stacked, positions, others, bshape, consecutive


@converter(aten.index.Tensor)
def convert_index(ctx, node, x, indices):
    rank = input_rank(ctx)
    fakes = [fake_of(i) for i in node.args[1]]
    indices = list(indices)
    non_none = [i for i, idx in enumerate(indices) if idx is not None]
    if len(non_none) == 1 and not (isinstance(fakes[non_none[0]], torch.Tensor) and fakes[non_none[0]].dtype == torch.bool):
        axis = non_none[0]
        return ctx.op.Gather(x, _normalize_index(ctx, indices[axis], x, axis, node.args[1][axis]), axis=axis)
    if len(non_none) == 1 and fakes[non_none[0]].dim() == 1:
        axis = non_none[0]
        nz = ctx.op.Squeeze(ctx.op.NonZero(indices[axis]), ctx.const([0], torch.int64))
        return ctx.op.Gather(x, nz, axis=axis)
    data, stacked, positions, others, bshape, consecutive = _index_layout(ctx, x, indices, fakes, rank, node.args[1])
    gathered = ctx.op.GatherND(data, stacked, batch_dims=0)
    p = positions[0]
    if not consecutive or p == 0:
        return gathered
    # move the broadcast dims back where the indexed dims were
    b_rank = ctx.out_rank() - len(others)
    perm = list(range(b_rank, b_rank + p)) + list(range(b_rank)) + list(range(b_rank + p, b_rank + len(others)))
    return ctx.op.Transpose(gathered, perm=perm)


@converter(aten.index_put.default, aten._unsafe_index_put.default)
def convert_index_put(ctx, node, x, indices, values, accumulate=False):
    rank = input_rank(ctx)
    fakes = [fake_of(i) for i in node.args[1]]
    indices = list(indices)
    dtype = ctx.out_dtype()
    values = ctx.as_value(values, dtype)
    non_none = [i for i, idx in enumerate(indices) if idx is not None]
    # x[mask] = v with a full mask: Where
    if (
        len(non_none) == 1
        and non_none[0] == 0
        and isinstance(fakes[0], torch.Tensor)
        and fakes[0].dtype == torch.bool
        and fakes[0].dim() == rank
        and guard_or_false(fake_of(node.args[2]).numel() == 1)
        and not accumulate
    ):
        v = ctx.op.Reshape(values, ctx.const([], torch.int64))
        return ctx.op.Where(indices[0], ctx.op.Expand(v, ctx.op.Shape(x)), x)
    data, stacked, positions, others, bshape, consecutive = _index_layout(ctx, x, indices, fakes, rank, node.args[1])
    p = positions[0]
    shape_x = ctx.op.Shape(x)
    # shape of x[indices] in torch's layout, to broadcast values
    rest = [ctx.op.Gather(shape_x, ctx.const(others, torch.int64), axis=0)] if others else []
    if consecutive and p > 0:
        before = [o for o in others if o < p]
        after = [o for o in others if o > p]
        parts = []
        if before:
            parts.append(ctx.op.Gather(shape_x, ctx.const(before, torch.int64), axis=0))
        parts.append(bshape)
        if after:
            parts.append(ctx.op.Gather(shape_x, ctx.const(after, torch.int64), axis=0))
        torch_shape = ctx.op.Concat(*parts, axis=0) if len(parts) > 1 else parts[0]
        upd = ctx.op.Expand(values, torch_shape)
        b_rank = len(fakes_broadcast_rank(fakes, node))
        n_before = len(before)
        perm = list(range(n_before, n_before + b_rank)) + list(range(n_before)) + list(
            range(n_before + b_rank, n_before + b_rank + len(after))
        )
        upd = ctx.op.Transpose(upd, perm=perm)
    else:
        full = ctx.op.Concat(bshape, *rest, axis=0) if rest else bshape
        upd = ctx.op.Expand(values, full)
    scattered = ctx.op.ScatterND(data, stacked, upd, reduction="add" if accumulate else "none")
    perm = positions + others
    if perm == list(range(rank)):
        return scattered
    inverse = [perm.index(i) for i in range(rank)]
    return ctx.op.Transpose(scattered, perm=inverse)


def fakes_broadcast_rank(fakes, node) -> list:
    """Shape (as a list) of the broadcast of the index tensors (bool masks count as 1 dim)."""
    shapes = []
    for f in fakes:
        if isinstance(f, torch.Tensor):
            shapes.append([0] if f.dtype == torch.bool else list(f.shape))
    rank = max(len(s) for s in shapes)
    return [0] * rank


def _index_1d(ctx, index, x, axis: int):
    """A 0-d or 1-d index as a 1-d int64 index, negative values counted from the end of ``axis``."""
    return _normalize_index(ctx, ctx.op.Reshape(index, ctx.const([-1], torch.int64)), x, axis)


@converter(aten.index_select.default)
def convert_index_select(ctx, node, x, dim, index):
    """A 0-d index keeps the dim (size 1); a 0-d input is seen as [1] and stays 0-d."""
    rank = input_rank(ctx)
    axis = normalize_axis(dim, rank) if rank else 0
    data = as_rank_1(ctx, x, rank)
    out = ctx.op.Gather(data, _index_1d(ctx, index, data, axis), axis=axis)
    return ctx.op.Reshape(out, ctx.const([], torch.int64)) if ctx.out_rank() == 0 else out


@converter(aten.gather.default)
def convert_gather(ctx, node, x, dim, index, sparse_grad=False):
    rank = input_rank(ctx)
    axis = normalize_axis(dim, rank) if rank else 0
    return ctx.op.GatherElements(x, _normalize_index(ctx, index, x, axis, node.args[2]), axis=axis)


@converter(aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce)
def convert_scatter(ctx, node, x, dim, index, src, reduce=None):
    rank = input_rank(ctx)
    axis = normalize_axis(dim, rank) if rank else 0
    dtype = ctx.out_dtype()
    if not hasattr(src, "producer"):
        src = ctx.op.Expand(ctx.const(src, dtype), ctx.op.Shape(index))
    reduction = {None: "none", "add": "add", "multiply": "mul", "sum": "add", "prod": "mul", "amax": "max", "amin": "min"}[reduce]
    return ctx.op.ScatterElements(x, _normalize_index(ctx, index, x, axis, node.args[2]), src, axis=axis, reduction=reduction)


@converter(aten.scatter_add.default)
def convert_scatter_add(ctx, node, x, dim, index, src):
    return convert_scatter(ctx, node, x, dim, index, src, reduce="add")


@converter(aten.scatter_reduce.two)
def convert_scatter_reduce(ctx, node, x, dim, index, src, reduce, include_self=True):
    rank = input_rank(ctx)
    axis = normalize_axis(dim, rank) if rank else 0
    data = as_rank_1(ctx, x, rank)
    index = as_rank_1(ctx, index, fake_of(node.args[2]).dim())
    src = as_rank_1(ctx, src, fake_of(node.args[3]).dim())
    idx = _normalize_index(ctx, index, data, axis)
    # torch reads src only where index has values: src[:index.shape[0], :index.shape[1], ...]
    if list(fake_of(node.args[3]).shape) != list(fake_of(node.args[2]).shape):
        width = max(rank, 1)
        src = ctx.op.Slice(src, ctx.const([0] * width, torch.int64), ctx.op.Shape(idx), ctx.const(list(range(width)), torch.int64))
    return back_to_rank(ctx, _scatter_reduce(ctx, data, axis, idx, src, reduce, include_self), rank)


_REDUCTIONS = {"sum": "add", "mean": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _identity(ctx, reduce: str, dtype: torch.dtype):
    """The neutral element of a reduction for ``dtype`` (what an untouched accumulator starts with)."""
    if reduce in ("sum", "mean"):
        value = 0
    elif reduce == "prod":
        value = 1
    elif dtype.is_floating_point:
        value = float("-inf") if reduce == "amax" else float("inf")
    elif dtype == torch.bool:
        value = reduce != "amax"
    else:
        info = torch.iinfo(dtype)
        value = info.min if reduce == "amax" else info.max
    return ctx.const(value, dtype)


def _scatter_reduce(ctx, data, axis, idx, src, reduce, include_self):
    """scatter_reduce with every reduce mode and include_self True or False (mean: floor division for ints)."""
    if reduce not in _REDUCTIONS:
        raise ctx.error(f"scatter reduce {reduce!r} is unknown; expected one of {sorted(_REDUCTIONS)}.")
    dtype = ctx.out_dtype()
    shape_x = ctx.op.Shape(data)
    src = ctx.cast(src, dtype)
    zeros = ctx.op.Expand(ctx.const(0, dtype), shape_x)
    ones = ctx.op.Expand(ctx.const(1, dtype), ctx.op.Shape(idx))
    touched = None
    base = data
    if not include_self or reduce == "mean":
        counts = _scatter_add(ctx, zeros, idx, ones, axis)
        touched = ctx.op.Greater(counts, ctx.const(0, dtype)) if dtype != torch.bool else counts
    if not include_self:
        base = ctx.op.Where(touched, ctx.op.Expand(_identity(ctx, reduce, dtype), shape_x), data)
    if reduce in ("sum", "mean"):
        out = _scatter_add(ctx, base, idx, src, axis)
    else:
        out = ctx.op.ScatterElements(base, idx, src, axis=axis, reduction=_REDUCTIONS[reduce])
    if reduce != "mean":
        return out
    if include_self:
        counts = ctx.op.Add(counts, ctx.const(1, dtype))
    else:
        counts = ctx.op.Max(counts, ctx.const(1, dtype))
    mean = ctx.op.Div(out, counts)
    if not dtype.is_floating_point:
        # torch floors the integer mean, ONNX's Div truncates: one less where a negative sum leaves a remainder
        # (counts > 0); in integers, no float64 (onnxruntime-web has no Cast to double)
        below = ctx.op.Less(ctx.op.Sub(out, ctx.op.Mul(mean, counts)), ctx.const(0, dtype))
        mean = ctx.op.Sub(mean, ctx.cast(below, dtype))
    return mean if include_self else ctx.op.Where(touched, mean, data)


@converter(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def convert_masked_fill(ctx, node, x, mask, value):
    dtype = ctx.out_dtype()
    v = ctx.as_value(value, dtype)
    if v.shape is not None and len(v.shape) > 0:
        v = ctx.op.Reshape(v, ctx.const([], torch.int64))
    return ctx.op.Where(ctx.cast(mask, torch.bool), v, x)


@converter(aten.masked_scatter.default)
def convert_masked_scatter(ctx, node, x, mask, source):
    mask = ctx.op.Expand(ctx.cast(mask, torch.bool), ctx.op.Shape(x))
    idx = ctx.op.Transpose(ctx.op.NonZero(mask), perm=[1, 0])
    n = ctx.op.Shape(idx, start=0, end=1)
    flat = ctx.op.Reshape(source, ctx.const([-1], torch.int64))
    upd = ctx.op.Slice(flat, ctx.const([0], torch.int64), n)
    return ctx.op.ScatterND(x, idx, upd)


@converter(aten.select_scatter.default)
def convert_select_scatter(ctx, node, x, src, dim, index):
    rank = input_rank(ctx)
    axis = normalize_axis(dim, rank)
    src = ctx.op.Unsqueeze(src, ctx.const([axis], torch.int64))
    return _slice_scatter(ctx, x, src, axis, index, None, 1, single=True)


@converter(aten.slice_scatter.default)
def convert_slice_scatter(ctx, node, x, src, dim=0, start=None, end=None, step=1):
    rank = input_rank(ctx)
    return _slice_scatter(ctx, x, src, normalize_axis(dim, rank), start, end, step)


def _slice_scatter(ctx, x, src, axis, start, end, step, single=False):
    """Writes ``src`` into ``x[..., start:end:step, ...]`` along ``axis`` with ScatterElements."""
    size = ctx.dim_size(x, axis)
    if single:
        idx = _normalize_index(ctx, ctx.as_value(start, torch.int64), x, axis)
        positions = ctx.op.Reshape(idx, ctx.const([1], torch.int64))
    else:
        s = ctx.as_value(0 if start is None else start, torch.int64)
        e = ctx.as_value(INT64_MAX if end is None else end, torch.int64)
        # clamp like python slicing
        s = ctx.op.Where(ctx.op.Less(s, ctx.const(0, torch.int64)), ctx.op.Add(s, size), s)
        e = ctx.op.Where(ctx.op.Less(e, ctx.const(0, torch.int64)), ctx.op.Add(e, size), e)
        s = ctx.op.Min(ctx.op.Max(s, ctx.const(0, torch.int64)), size)
        e = ctx.op.Min(ctx.op.Max(e, ctx.const(0, torch.int64)), size)
        positions = ctx.op.Range(s, e, ctx.as_value(step, torch.int64))
    # index tensor shaped like src with positions along axis
    rank = len(src.shape) if src.shape is not None else None
    if rank is None:
        rank = ctx.out_rank()
    shape = [1] * rank
    shape[axis] = -1
    idx = ctx.op.Reshape(positions, ctx.const(shape, torch.int64))
    idx = ctx.op.Expand(idx, ctx.op.Shape(src))
    return ctx.op.ScatterElements(x, idx, ctx.cast(src, ctx.out_dtype()), axis=axis)


def _nonzero(ctx, x):
    """NonZero; a float64 tensor compared with 0 first (onnxruntime has no float64 NonZero)."""
    if fake_of(ctx.node.args[0]).dtype == torch.float64:
        x = ctx.op.Not(ctx.op.Equal(x, ctx.const(0.0, torch.float64)))
    return ctx.op.NonZero(x)


@converter(aten.nonzero.default)
def convert_nonzero(ctx, node, x):
    if input_rank(ctx) == 0:  # (1, 0) for a nonzero scalar, (0, 0) otherwise
        count = ctx.op.Cast(ctx.op.Not(ctx.op.Equal(x, ctx.op.CastLike(ctx.const(0, torch.int64), x))), to=7)
        shape = ctx.op.Concat(ctx.op.Reshape(count, ctx.const([1], torch.int64)), ctx.const([0], torch.int64), axis=0)
        return ctx.op.ConstantOfShape(shape, value=ir.tensor(np.array([0], dtype=np.int64)))
    return ctx.op.Transpose(_nonzero(ctx, x), perm=[1, 0])


@converter(aten.where.default)
def convert_where_indices(ctx, node, condition):
    """``torch.where(condition)``: one index tensor per dimension (``nonzero(as_tuple=True)``), a scalar
    seen as one element. Converted as it is: decomposing it re-traces the whole program (minutes on a
    detection model)."""
    rank = input_rank(ctx)
    if rank == 0:
        condition, rank = ctx.op.Reshape(condition, ctx.const([1], torch.int64)), 1
    indices = _nonzero(ctx, condition)  # [rank, count]
    axis = ctx.const([0], torch.int64)
    if rank == 1:
        return [ctx.op.Squeeze(indices, axis)]
    parts = ctx.op.Split(indices, ctx.const([1] * rank, torch.int64), axis=0, _outputs=rank)
    return [ctx.op.Squeeze(part, axis) for part in parts]


@converter(aten.take.default)
def convert_take(ctx, node, x, index):
    """x.flatten()[index] (Gather takes the negative indices torch takes)."""
    return ctx.op.Gather(ctx.op.Reshape(x, ctx.const([-1], torch.int64)), index, axis=0)


@converter(aten.nonzero_static.default)
def convert_nonzero_static(ctx, node, x, *, size, fill_value=-1):
    """The first ``size`` indices of nonzero, the missing rows filled with ``fill_value``."""
    if input_rank(ctx) == 0:  # no index to give: (size, 0)
        return ctx.const(np.zeros((size, 0), dtype=np.int64), torch.int64)
    found = ctx.op.Transpose(_nonzero(ctx, x), perm=[1, 0])
    kept = ctx.op.Slice(found, ctx.const([0], torch.int64), ctx.const([size], torch.int64), ctx.const([0], torch.int64))
    missing = ctx.op.Sub(ctx.const([size], torch.int64), ctx.op.Shape(kept, start=0, end=1))
    zero = ctx.const([0], torch.int64)
    pads = ctx.op.Concat(zero, zero, missing, zero, axis=0)
    return ctx.op.Pad(kept, pads, ctx.const(int(fill_value), torch.int64), mode="constant")


@converter(aten.nonzero_numpy.default)
def convert_nonzero_numpy(ctx, node, x):
    rank = input_rank(ctx)
    if rank == 0:  # torch treats a 0-d tensor as one element: one index tensor, [0] or []
        x, rank = ctx.op.Reshape(x, ctx.const([1], torch.int64)), 1
    nz = _nonzero(ctx, x)
    if rank == 1:
        return [ctx.op.Squeeze(nz, ctx.const([0], torch.int64))]
    parts = ctx.op.Split(nz, ctx.const([1] * rank, torch.int64), axis=0, _outputs=rank)
    return [ctx.op.Squeeze(p, ctx.const([0], torch.int64)) for p in parts]


def _along_dim_index(ctx, x, dim, index, source):
    """(data, index expanded to the source along ``dim``, source, axis, rank) of index_copy/add/reduce."""
    rank = input_rank(ctx)
    axis = normalize_axis(dim, rank) if rank else 0
    data = as_rank_1(ctx, x, rank)
    source = as_rank_1(ctx, source, fake_of(ctx.node.args[3]).dim())
    shape = [1] * max(rank, 1)
    shape[axis] = -1
    idx = ctx.op.Reshape(_index_1d(ctx, index, data, axis), ctx.const(shape, torch.int64))
    return data, ctx.op.Expand(idx, ctx.op.Shape(source)), source, axis, rank


@converter(aten.index_copy.default)
def convert_index_copy(ctx, node, x, dim, index, source):
    data, idx, source, axis, rank = _along_dim_index(ctx, x, dim, index, source)
    return back_to_rank(ctx, ctx.op.ScatterElements(data, idx, source, axis=axis), rank)


@converter(aten.index_add.default)
def convert_index_add(ctx, node, x, dim, index, source, alpha=1):
    data, idx, source, axis, rank = _along_dim_index(ctx, x, dim, index, source)
    if alpha != 1:
        source = ctx.op.Mul(source, ctx.as_value(alpha, ctx.out_dtype()))
    return back_to_rank(ctx, _scatter_add(ctx, data, idx, source, axis), rank)


def _scatter_add(ctx, data, idx, src, axis):
    """ScatterElements(add); booleans (add = or) go through int32."""
    if ctx.dtype(data) == torch.bool or ctx.out_dtype() == torch.bool:
        summed = ctx.op.ScatterElements(
            ctx.cast(data, torch.int32), idx, ctx.cast(src, torch.int32), axis=axis, reduction="add"
        )
        return ctx.cast(summed, torch.bool)
    return ctx.op.ScatterElements(data, idx, src, axis=axis, reduction="add")


@converter(aten.index_reduce.default)
def convert_index_reduce(ctx, node, x, dim, index, source, reduce, include_self=True):
    data, idx, source, axis, rank = _along_dim_index(ctx, x, dim, index, source)
    return back_to_rank(ctx, _scatter_reduce(ctx, data, axis, idx, source, reduce, include_self), rank)


@converter(aten.copy.default)
def convert_copy(ctx, node, x, src, non_blocking=False):
    """``copy(x, src)``: the values of ``src`` broadcast to the shape and dtype of ``x``
    (functionalization writes ``x[:, 1:3] = y`` as ``copy`` then ``slice_scatter``)."""
    return ctx.op.Expand(ctx.cast(ctx.as_value(src), ctx.out_dtype()), ctx.op.Shape(x))


# unique: ONNX Unique returns (values, first indices, inverse, counts); torch's
# outputs are (values, inverse, counts), inverse and counts in int64, empty
# tensors of shape [0] for the outputs not requested.
_UNIQUE_DTYPES = {torch.float32, torch.float64, torch.int64, torch.int8}


def _unique_input(ctx, x):
    """Casts ``x`` to a dtype onnxruntime's Unique supports; returns (value, original dtype)."""
    dtype = ctx.dtype(x)
    if dtype in _UNIQUE_DTYPES or dtype is None:
        return x, None
    target = torch.float64 if dtype.is_floating_point else torch.int64
    return ctx.cast(x, target), dtype


def _empty_int64(ctx):
    return ctx.const(torch.zeros((0,), dtype=torch.int64), torch.int64)


def _unique_outputs(ctx, x, axis, return_inverse, return_counts, inverse_shape=None):
    x, original = _unique_input(ctx, x)
    kwargs = {"sorted": 1} if axis is None else {"sorted": 1, "axis": axis}
    values, _first, inverse, counts = ctx.op.Unique(x, _outputs=4, **kwargs)
    if original is not None:
        values = ctx.cast(values, original)
    if return_inverse:
        if inverse_shape is not None:
            inverse = ctx.op.Reshape(inverse, inverse_shape)
    else:
        inverse = _empty_int64(ctx)
    return values, inverse, counts if return_counts else _empty_int64(ctx)


@converter(aten._unique2.default)
def convert_unique2(ctx, node, x, sorted=True, return_inverse=False, return_counts=False):
    # torch returns sorted values on every device whatever ``sorted`` says
    flat = ctx.op.Reshape(x, ctx.const([-1], torch.int64)) if input_rank(ctx) != 1 else x
    return _unique_outputs(ctx, flat, None, return_inverse, return_counts, ctx.op.Shape(x))


@converter(aten.unique_dim.default)
def convert_unique_dim(ctx, node, x, dim, sorted=True, return_inverse=False, return_counts=False):
    return _unique_outputs(ctx, x, normalize_axis(dim, input_rank(ctx)), return_inverse, return_counts)


@converter(aten.unique_consecutive.default)
def convert_unique_consecutive(ctx, node, x, return_inverse=False, return_counts=False, dim=None):
    """Keeps every element different from the previous one (flattened input, ``dim=None`` only)."""
    if dim is not None:
        raise ctx.error(
            "unique_consecutive with dim is not supported by this exporter; flatten the input "
            "or use torch.unique(x, dim=...) when the order does not matter."
        )
    i64 = torch.int64
    flat = ctx.op.Reshape(x, ctx.const([-1], i64))
    size = ctx.op.Shape(flat)
    head = ctx.op.Slice(flat, ctx.const([0], i64), ctx.const([-1], i64))
    tail = ctx.op.Slice(flat, ctx.const([1], i64), ctx.const([INT64_MAX], i64))
    changed = ctx.op.Not(ctx.op.Equal(tail, head))
    # the first element always starts a run (an empty input gives no run at all)
    first = ctx.op.Slice(ctx.op.Expand(ctx.const([True], torch.bool), size), ctx.const([0], i64), ctx.const([1], i64))
    starts_mask = ctx.op.Concat(first, changed, axis=0)
    starts = ctx.op.Squeeze(ctx.op.NonZero(starts_mask), ctx.const([0], i64))
    values = ctx.op.Gather(flat, starts, axis=0)
    if return_inverse:
        run_index = ctx.op.CumSum(ctx.op.Cast(starts_mask, to=7), ctx.const(0, i64))
        inverse = ctx.op.Reshape(ctx.op.Sub(run_index, ctx.const([1], i64)), ctx.op.Shape(x))
    else:
        inverse = _empty_int64(ctx)
    if return_counts:
        ends = ctx.op.Concat(ctx.op.Slice(starts, ctx.const([1], i64), ctx.const([INT64_MAX], i64)), size, axis=0)
        counts = ctx.op.Sub(ends, starts)
    else:
        counts = _empty_int64(ctx)
    return values, inverse, counts
