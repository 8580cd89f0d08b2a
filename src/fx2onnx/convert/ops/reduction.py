"""Reductions: sum, mean, max, min, prod, argmax, any, all, var, std, cumsum."""

from __future__ import annotations

import torch

from ..registry import converter
from ._common import axes_value, input_fake, input_rank, normalize_axis

aten = torch.ops.aten


_HALF = (torch.float16, torch.bfloat16)
_ACCUMULATING = {"ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}


def _reduce(ctx, op_type: str, x, dim=None, keepdim=False, dtype=None):
    out_dtype = ctx.out_dtype()
    if out_dtype in _HALF and op_type in _ACCUMULATING:
        # torch accumulates half-precision reductions in float32 and rounds once (no overflow)
        return ctx.cast(_reduce_as(ctx, op_type, ctx.cast(x, torch.float32), torch.float32, dim, keepdim), out_dtype)
    return _reduce_as(ctx, op_type, x, out_dtype, dim, keepdim)


def _reduce_as(ctx, op_type: str, x, out_dtype: torch.dtype, dim, keepdim):
    rank = input_rank(ctx)
    if out_dtype != ctx.dtype(x) and (op_type in ("ReduceSum", "ReduceMean", "ReduceProd") or out_dtype.is_floating_point):
        x = ctx.cast(x, out_dtype)  # an integer tensor's mean, norm or logsumexp is a float
    if rank == 0:  # the reduction of one number
        if op_type in ("ReduceL1", "ReduceL2"):
            return ctx.op.Abs(x)
        if op_type == "ReduceSumSquare":
            return ctx.op.Mul(x, x)
        if op_type == "ReduceLogSum":
            return ctx.op.Log(x)
        return ctx.op.Identity(x)
    axes = axes_value(ctx, dim, rank)
    extra = [] if axes is None else [axes]
    if op_type == "ReduceMean" and not _never_empty(ctx, dim, rank):
        return _mean_of_maybe_empty(ctx, x, axes, keepdim)
    out = getattr(ctx.op, op_type)(x, *extra, keepdims=int(bool(keepdim)))
    if op_type in ("ReduceMax", "ReduceMin") and _is_float(ctx, x):
        # torch propagates NaN, onnxruntime skips it: add a sum that is NaN when one value is
        nans = ctx.op.Where(ctx.op.IsNaN(x), x, ctx.const(0.0, ctx.dtype(x)))
        out = ctx.op.Add(out, ctx.op.ReduceSum(nans, *extra, keepdims=int(bool(keepdim))))
    return out


def _never_empty(ctx, dim, rank: int) -> bool:
    """True if the reduced dimensions are static and not zero (the usual hidden dimension)."""
    fake = input_fake(ctx)
    if not isinstance(fake, torch.Tensor):
        return False
    axes = range(rank) if dim is None or dim == [] else [normalize_axis(d, rank) for d in ([dim] if isinstance(dim, int) else dim)]
    return all(isinstance(fake.shape[a], int) and fake.shape[a] > 0 for a in axes)


def _mean_of_maybe_empty(ctx, x, axes, keepdim: bool):
    """Sum / count: the mean of no value is NaN as in torch (onnxruntime's ReduceMean gives 0)."""
    extra = [] if axes is None else [axes]
    total = ctx.op.ReduceSum(x, *extra, keepdims=int(bool(keepdim)))
    return ctx.op.Div(total, ctx.op.CastLike(_count(ctx, x, axes), total))


def _count(ctx, x, axes):
    """How many values a reduction over ``axes`` (None: all) takes, a 0-d int64."""
    shape = ctx.op.Shape(x)
    counted = shape if axes is None else ctx.op.Gather(shape, axes, axis=0)
    return ctx.op.ReduceProd(counted, keepdims=0)


def _is_float(ctx, x) -> bool:
    dtype = ctx.dtype(x)
    return dtype is not None and dtype.is_floating_point


def _nan_as_extreme(ctx, x, largest: bool):
    """NaN replaced by +inf (largest) or -inf so that ArgMax/ArgMin pick it, as torch does."""
    if not _is_float(ctx, x):
        return x
    extreme = ctx.const(float("inf") if largest else float("-inf"), ctx.dtype(x))
    return ctx.op.Where(ctx.op.IsNaN(x), extreme, x)


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
        if rank == 0:  # a scalar's index is 0
            return ctx.const(0, torch.int64)
        x = _nan_as_extreme(ctx, x, op_type == "ArgMax")
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


def _extreme_dim(reduce_type: str, arg_type: str, largest: bool):
    """max.dim / min.dim: the values and their indices along ``dim``."""

    def convert_extreme_dim(ctx, node, x, dim, keepdim=False):
        if input_rank(ctx) == 0:  # a scalar is its own extreme, at index 0
            return ctx.op.Identity(x), ctx.const(0, torch.int64)
        axis = normalize_axis(dim, input_rank(ctx))
        values = _reduce(ctx, reduce_type, x, [axis], keepdim)
        indices = getattr(ctx.op, arg_type)(_nan_as_extreme(ctx, x, largest), axis=axis, keepdims=int(keepdim))
        return values, indices

    return convert_extreme_dim


converter(aten.max.dim)(_extreme_dim("ReduceMax", "ArgMax", True))
converter(aten.min.dim)(_extreme_dim("ReduceMin", "ArgMin", False))


def _logical_reduce(op_type: str):
    """any / all: the input as 0/1 int64 flags, reduced by max / min, compared with 0.

    Over no value, ONNX's ReduceMax gives the lowest int64 (true once cast to bool, where
    torch's ``any`` is false) and ReduceMin the highest (``all`` is true): ``> 0`` gives both."""

    def convert_logical_reduce(ctx, node, x, dim=None, keepdim=False):
        flags = ctx.cast(ctx.cast(x, torch.bool), torch.int64)
        reduced = _reduce_as(ctx, op_type, flags, torch.int64, dim, keepdim)
        # bool, or uint8 for a uint8 input as torch gives it
        return ctx.cast(ctx.op.Greater(reduced, ctx.const(0, torch.int64)), ctx.out_dtype())

    return convert_logical_reduce


converter(aten.any.default, aten.any.dim, aten.any.dims)(_logical_reduce("ReduceMax"))
converter(aten.all.default, aten.all.dim, aten.all.dims)(_logical_reduce("ReduceMin"))
# torch.export's form of ``torch._check(t.all())`` / ``bool(t.any())`` on a bool tensor: a 0-d bool
converter(aten._is_any_true.default)(_logical_reduce("ReduceMax"))
converter(aten._is_all_true.default)(_logical_reduce("ReduceMin"))


def _variance_args(node, args: tuple, kwargs: dict) -> tuple[object, int, bool]:
    """(dim, correction, keepdim) from the overloads of var, std, var_mean, std_mean."""
    name = node.target._overloadname
    if name == "default":  # (x, unbiased=True)
        unbiased = args[0] if args else kwargs.get("unbiased", True)
        return None, int(bool(unbiased)), False
    if name == "dim":  # (x, dim, unbiased=True, keepdim=False)
        dim = args[0] if args else kwargs.get("dim")
        unbiased = args[1] if len(args) > 1 else kwargs.get("unbiased", True)
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        return dim, int(bool(unbiased)), bool(keepdim)
    # correction: (x, dim=None, *, correction=None, keepdim=False)
    dim = args[0] if args else kwargs.get("dim")
    correction = kwargs.get("correction")
    return dim, 1 if correction is None else correction, bool(kwargs.get("keepdim", False))


def _variance(ctx, x, dim, correction, keepdim: bool):
    """(variance, mean) over ``dim`` with torch's ``correction`` (1: unbiased)."""
    rank = input_rank(ctx)
    axes = axes_value(ctx, dim, rank)
    extra = [] if axes is None else [axes]
    mean = _reduce(ctx, "ReduceMean", x, dim, True)
    diff = ctx.op.Sub(x, mean)
    total = ctx.op.ReduceSum(ctx.op.Mul(diff, diff), *extra, keepdims=int(keepdim))
    dtype = ctx.out_dtype(0)
    n = ctx.cast(_count(ctx, x, axes), dtype)
    if correction:
        n = ctx.op.Sub(n, ctx.const(float(correction), dtype))
        n = ctx.op.Max(n, ctx.const(0.0, dtype))
    var = ctx.op.Div(total, n)
    if not keepdim:  # the same mean, without the reduced dimensions
        mean = ctx.op.Reshape(mean, ctx.op.Shape(var))
    return var, mean


@converter(aten.var.correction, aten.var.dim, aten.var.default)
def convert_var(ctx, node, x, *args, **kwargs):
    return _variance(ctx, x, *_variance_args(node, args, kwargs))[0]


@converter(aten.std.correction, aten.std.dim, aten.std.default)
def convert_std(ctx, node, x, *args, **kwargs):
    return ctx.op.Sqrt(_variance(ctx, x, *_variance_args(node, args, kwargs))[0])


@converter(aten.var_mean.correction, aten.var_mean.dim, aten.var_mean.default)
def convert_var_mean(ctx, node, x, *args, **kwargs):
    return _variance(ctx, x, *_variance_args(node, args, kwargs))


@converter(aten.std_mean.correction, aten.std_mean.dim, aten.std_mean.default)
def convert_std_mean(ctx, node, x, *args, **kwargs):
    var, mean = _variance(ctx, x, *_variance_args(node, args, kwargs))
    return ctx.op.Sqrt(var), mean


@converter(aten.aminmax.default)
def convert_aminmax(ctx, node, x, *, dim=None, keepdim=False):
    return _reduce(ctx, "ReduceMin", x, dim, keepdim), _reduce(ctx, "ReduceMax", x, dim, keepdim)


@converter(aten.count_nonzero.dim_IntList, aten.count_nonzero.default)
def convert_count_nonzero(ctx, node, x, dim=None):
    nonzero = ctx.op.Not(ctx.op.Equal(x, ctx.const(0, ctx.dtype(x))))
    return _reduce(ctx, "ReduceSum", ctx.cast(nonzero, torch.int64), dim, False)


@converter(aten.cumsum.default)
def convert_cumsum(ctx, node, x, dim, dtype=None):
    out_dtype = ctx.out_dtype()
    x = ctx.cast(x, out_dtype)
    rank = input_rank(ctx)
    if rank == 0:  # the sum of one number (onnxruntime's CumSum refuses a scalar)
        return ctx.op.Identity(x)
    return ctx.op.CumSum(x, ctx.const(normalize_axis(dim, rank), torch.int64))


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
    if ord == float("-inf"):
        return _reduce(ctx, "ReduceMin", ctx.op.Abs(x), dim, keepdim)
    if ord == 0:
        nonzero = ctx.op.Not(ctx.op.Equal(x, ctx.const(0.0, ctx.dtype(x))))
        return _reduce(ctx, "ReduceSum", ctx.cast(nonzero, ctx.out_dtype()), dim, keepdim)
    work = torch.float32 if ctx.out_dtype() in _HALF else ctx.out_dtype()
    p = ctx.const(float(ord), work)
    s = _reduce_as(ctx, "ReduceSum", ctx.op.Pow(ctx.op.Abs(ctx.cast(x, work)), p), work, dim, keepdim)
    return ctx.cast(ctx.op.Pow(s, ctx.op.Reciprocal(p)), ctx.out_dtype())


@converter(aten.cumprod.default)
def convert_cumprod(ctx, node, x, dim, dtype=None):
    # ONNX has no CumProd: y[..., i] = prod_j x[..., j] * (j <= i), a triangular mask
    out_dtype = ctx.out_dtype()
    x = ctx.cast(x, out_dtype)
    if input_rank(ctx) == 0:
        return ctx.op.Identity(x)
    masked, perm = _prefix_rows(ctx, x, dim, ctx.const(1, out_dtype))
    y = ctx.op.ReduceProd(masked, _rows_axis(ctx), keepdims=0)
    return _move_back(ctx, y, perm)


def _topk(ctx, x, k, axis: int, largest: bool, sorted_: bool = True):
    values, indices = ctx.op.TopK(
        x, ctx.scalar_1d(k), axis=axis, largest=int(bool(largest)), sorted=int(bool(sorted_)), _outputs=2
    )
    return values, indices


@converter(aten.topk.default)
def convert_topk(ctx, node, x, k, dim=-1, largest=True, sorted=True):
    rank = input_rank(ctx)
    return _topk(ctx, x, k, normalize_axis(dim, rank) if rank else 0, largest, sorted)


def _sort(ctx, x, dim: int, descending: bool):
    """sort with TopK over the whole axis (ties keep their order, like a stable sort)."""
    rank = input_rank(ctx)
    if rank == 0:
        return ctx.op.Identity(x), ctx.const(0, torch.int64)
    axis = normalize_axis(dim, rank)
    return _topk(ctx, x, ctx.op.Shape(x, start=axis, end=axis + 1), axis, descending)


@converter(aten.sort.default)
def convert_sort(ctx, node, x, dim=-1, descending=False):
    return _sort(ctx, x, dim, descending)


@converter(aten.sort.stable)
def convert_sort_stable(ctx, node, x, *, stable=None, dim=-1, descending=False):
    return _sort(ctx, x, dim, descending)


@converter(aten.argsort.default)
def convert_argsort(ctx, node, x, dim=-1, descending=False):
    return _sort(ctx, x, dim, descending)[1]


@converter(aten.argsort.stable)
def convert_argsort_stable(ctx, node, x, *, stable, dim=-1, descending=False):
    return _sort(ctx, x, dim, descending)[1]


@converter(aten.nansum.default)
def convert_nansum(ctx, node, x, dim=None, keepdim=False, dtype=None):
    if ctx.dtype(x) is not None and ctx.dtype(x).is_floating_point:
        x = ctx.op.Where(ctx.op.IsNaN(x), ctx.const(0.0, ctx.dtype(x)), x)
    return _reduce(ctx, "ReduceSum", x, dim, keepdim)


@converter(aten.nanmean.default)
def convert_nanmean(ctx, node, x, dim=None, keepdim=False, dtype=None):
    out_dtype = ctx.out_dtype()
    valid = ctx.op.Not(ctx.op.IsNaN(x))
    total = _reduce(ctx, "ReduceSum", ctx.op.Where(valid, x, ctx.const(0.0, ctx.dtype(x))), dim, keepdim)
    count = _reduce(ctx, "ReduceSum", ctx.cast(valid, out_dtype), dim, keepdim)
    return ctx.op.Div(total, count)


def _kth_smallest(ctx, x, k, dim, keepdim: bool):
    """(values, indices) of the k-th smallest element (1-based) along ``dim``."""
    rank = input_rank(ctx)
    if rank == 0:
        return ctx.op.Identity(x), ctx.const(0, torch.int64)
    axis = normalize_axis(dim, rank)
    values, indices = ctx.op.TopK(x, ctx.scalar_1d(k), axis=axis, largest=0, sorted=1, _outputs=2)
    last = ctx.op.Sub(ctx.scalar_1d(k), ctx.const([1], torch.int64))
    if not keepdim:
        last = ctx.op.Squeeze(last, ctx.const([0], torch.int64))
    return ctx.op.Gather(values, last, axis=axis), ctx.op.Gather(indices, last, axis=axis)


@converter(aten.kthvalue.default)
def convert_kthvalue(ctx, node, x, k, dim=-1, keepdim=False):
    return _kth_smallest(ctx, x, k, dim, keepdim)


def _lower_median_k(ctx, x, axis: int):
    """(n - 1) // 2 + 1 as a 1-D value: torch's median is the lower median."""
    n = ctx.op.Shape(x, start=axis, end=axis + 1)
    one = ctx.const([1], torch.int64)
    return ctx.op.Add(ctx.op.Div(ctx.op.Sub(n, one), ctx.const([2], torch.int64)), one)


@converter(aten.median.dim)
def convert_median_dim(ctx, node, x, dim, keepdim=False):
    rank = input_rank(ctx)
    if rank == 0:
        return ctx.op.Identity(x), ctx.const(0, torch.int64)
    axis = normalize_axis(dim, rank)
    return _kth_smallest(ctx, x, _lower_median_k(ctx, x, axis), axis, keepdim)


@converter(aten.median.default)
def convert_median(ctx, node, x):
    flat = ctx.op.Reshape(x, ctx.const([-1], torch.int64))
    values, _ = ctx.op.TopK(flat, _lower_median_k(ctx, flat, 0), axis=0, largest=0, sorted=1, _outputs=2)
    return ctx.op.Squeeze(
        ctx.op.Slice(values, ctx.const([-1], torch.int64), ctx.const([2**62], torch.int64)), ctx.const([0], torch.int64)
    )


def _prefix_rows(ctx, x, dim: int, fill):
    """Moves ``dim`` last and returns (rows [..., n, n] with x[..., j] where j <= i else fill, perm).

    A reduction over the last axis of ``rows`` is the cumulative reduction.
    """
    rank = input_rank(ctx)
    axis = normalize_axis(dim, rank)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = ctx.op.Transpose(x, perm=perm) if axis != rank - 1 else x
    n = ctx.op.Shape(moved, start=rank - 1)
    square = ctx.op.Expand(ctx.const(1, torch.int64), ctx.op.Concat(n, n, axis=0))
    lower = ctx.cast(ctx.op.Trilu(square, upper=0), torch.bool)
    rows = ctx.op.Unsqueeze(moved, ctx.const([-2], torch.int64))
    return ctx.op.Where(lower, rows, fill), (perm if axis != rank - 1 else None)


def _rows_axis(ctx):
    """The last axis of :func:`_prefix_rows`'s rows, positive: onnxruntime's reductions do not
    reduce an empty tensor along a negative axis (shape (3, 0) summed over -1 stays (3, 0))."""
    return ctx.const([input_rank(ctx)], torch.int64)


def _move_back(ctx, y, perm):
    return ctx.op.Transpose(y, perm=perm) if perm is not None else y


@converter(aten.logcumsumexp.default)
def convert_logcumsumexp(ctx, node, x, dim):
    if input_rank(ctx) == 0:
        return ctx.op.Identity(x)
    rows, perm = _prefix_rows(ctx, x, dim, ctx.const(float("-inf"), ctx.out_dtype()))
    return _move_back(ctx, ctx.op.ReduceLogSumExp(rows, _rows_axis(ctx), keepdims=0), perm)


def _cumulative_extreme(largest: bool):
    def convert_cumulative_extreme(ctx, node, x, dim, _dtype=None):
        if input_rank(ctx) == 0:
            return ctx.op.Identity(x), ctx.const(0, torch.int64)
        dtype = _dtype or ctx.out_dtype(0)
        if dtype == torch.bool:  # computed on 0/1 integers, cast back at the end
            values, indices = convert_cumulative_extreme(ctx, node, ctx.cast(x, torch.int32), dim, _dtype=torch.int32)
            return ctx.cast(values, torch.bool), indices
        if dtype.is_floating_point:
            fill = float("-inf") if largest else float("inf")
        else:
            fill = torch.iinfo(dtype).min if largest else torch.iinfo(dtype).max
        rows, perm = _prefix_rows(ctx, x, dim, ctx.const(fill, dtype))
        values = (ctx.op.ReduceMax if largest else ctx.op.ReduceMin)(rows, _rows_axis(ctx), keepdims=0)
        # torch keeps the last index among equal extremes
        arg = ctx.op.ArgMax if largest else ctx.op.ArgMin
        indices = arg(rows, axis=input_rank(ctx), keepdims=0, select_last_index=1)
        return _move_back(ctx, values, perm), _move_back(ctx, indices, perm)

    return convert_cumulative_extreme


converter(aten.cummax.default)(_cumulative_extreme(True))
converter(aten.cummin.default)(_cumulative_extreme(False))


@converter(aten.diff.default)
def convert_diff(ctx, node, x, n=1, dim=-1, prepend=None, append=None):
    rank = input_rank(ctx)
    axis = normalize_axis(dim, rank)
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = ctx.op.Concat(*parts, axis=axis)
    axes = ctx.const([axis], torch.int64)
    big = ctx.const([2**62], torch.int64)
    for _ in range(int(n)):
        tail = ctx.op.Slice(x, ctx.const([1], torch.int64), big, axes)
        head = ctx.op.Slice(x, ctx.const([0], torch.int64), ctx.const([-1], torch.int64), axes)
        x = ctx.op.Xor(tail, head) if ctx.out_dtype() == torch.bool else ctx.op.Sub(tail, head)
    return x


@converter(aten.dist.default)
def convert_dist(ctx, node, a, b, p=2):
    """The p-norm of a - b: the difference in the result's type, the norm accumulated in
    float32 for half-precision tensors as torch does."""
    dtype = ctx.out_dtype()
    work = torch.float32 if dtype in _HALF else dtype
    diff = ctx.op.Sub(ctx.cast(a, dtype), ctx.cast(b, dtype))
    diff = ctx.cast(ctx.op.Reshape(diff, ctx.const([-1], torch.int64)), work)
    p = float(p)
    axes = ctx.const([0], torch.int64)
    if p == 2:
        out = ctx.op.ReduceL2(diff, axes, keepdims=0)
    elif p == 1:
        out = ctx.op.ReduceL1(diff, axes, keepdims=0)
    elif p == float("inf"):
        out = ctx.op.ReduceMax(ctx.op.Abs(diff), axes, keepdims=0)
    elif p == 0:
        out = ctx.op.ReduceSum(ctx.cast(ctx.op.Not(ctx.op.Equal(diff, ctx.const(0.0, work))), work), axes, keepdims=0)
    else:
        power = ctx.const(p, work)
        out = ctx.op.Pow(ctx.op.ReduceSum(ctx.op.Pow(ctx.op.Abs(diff), power), axes, keepdims=0), ctx.op.Reciprocal(power))
    return ctx.cast(out, dtype)


@converter(aten.trace.default)
def convert_trace(ctx, node, x):
    x = ctx.cast(x, ctx.out_dtype())  # small integers sum as int64, as torch
    return ctx.op.ReduceSum(ctx.op.Mul(x, ctx.op.EyeLike(x)), keepdims=0)


def _count_below(ctx, boundaries, values, right: bool, out_int32: bool, values_rank: int):
    """Index of the bucket of every value: how many boundaries are below it (<= with right=True)."""
    compare = ctx.op.LessOrEqual if right else ctx.op.Less
    below = compare(boundaries, ctx.op.Unsqueeze(values, ctx.const([-1], torch.int64)))
    # a positive axis: onnxruntime does not reduce an empty tensor along a negative one
    count = ctx.op.ReduceSum(ctx.cast(below, torch.int64), ctx.const([values_rank], torch.int64), keepdims=0)
    return ctx.cast(count, torch.int32) if out_int32 else count


@converter(aten.bucketize.Tensor, aten.bucketize.Scalar)
def convert_bucketize(ctx, node, x, boundaries, *, out_int32=False, right=False):
    x = ctx.as_value(x)
    return _count_below(ctx, boundaries, x, right, out_int32, input_rank(ctx))


@converter(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def convert_searchsorted(ctx, node, sorted_sequence, x, *, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:  # the sequence in sorted order first
        sorted_sequence = ctx.op.GatherElements(sorted_sequence, sorter, axis=-1)
    right = right or side == "right"
    x = ctx.as_value(x)
    if input_rank(ctx) > 1:  # one sorted row per leading index: compare [..., M, 1] with [..., 1, K]
        sorted_sequence = ctx.op.Unsqueeze(sorted_sequence, ctx.const([-2], torch.int64))
    return _count_below(ctx, sorted_sequence, x, right, out_int32, input_rank(ctx, 1))


@converter(aten.renorm.default)
def convert_renorm(ctx, node, x, p, dim, maxnorm):
    # every slice along dim with a p-norm above maxnorm is scaled down to maxnorm
    rank = input_rank(ctx)
    dtype = ctx.out_dtype()
    axes = ctx.const([a for a in range(rank) if a != normalize_axis(dim, rank)], torch.int64)
    p = float(p)
    if p == 2:
        norm = ctx.op.ReduceL2(x, axes, keepdims=1)
    elif p == 1:
        norm = ctx.op.ReduceL1(x, axes, keepdims=1)
    elif p == float("inf"):
        norm = ctx.op.ReduceMax(ctx.op.Abs(x), axes, keepdims=1)
    else:
        power = ctx.const(p, dtype)
        norm = ctx.op.Pow(
            ctx.op.ReduceSum(ctx.op.Pow(ctx.op.Abs(x), power), axes, keepdims=1), ctx.op.Reciprocal(power)
        )
    limit = ctx.const(float(maxnorm), dtype)
    factor = ctx.op.Div(limit, ctx.op.Add(norm, ctx.const(1e-7, dtype)))
    return ctx.op.Mul(x, ctx.op.Where(ctx.op.Greater(norm, limit), factor, ctx.const(1.0, dtype)))


def _ends_and_inner(ctx, y, axis: int):
    axes = ctx.const([axis], torch.int64)
    big = ctx.const([2**62], torch.int64)
    head = ctx.op.Slice(y, ctx.const([0], torch.int64), ctx.const([-1], torch.int64), axes)
    tail = ctx.op.Slice(y, ctx.const([1], torch.int64), big, axes)
    return head, tail


@converter(aten.trapezoid.dx, aten.trapz.dx)
def convert_trapezoid(ctx, node, y, *, dx=1, dim=-1):
    # dx * sum((y[i] + y[i + 1]) / 2)
    dtype = ctx.out_dtype()
    y = ctx.cast(y, dtype)
    axis = normalize_axis(dim, input_rank(ctx))
    head, tail = _ends_and_inner(ctx, y, axis)
    pairs = ctx.op.ReduceSum(ctx.op.Add(head, tail), ctx.const([axis], torch.int64), keepdims=0)
    return ctx.op.Mul(pairs, ctx.const(float(dx) / 2.0, dtype))


@converter(aten.cumulative_trapezoid.dx)
def convert_cumulative_trapezoid(ctx, node, y, *, dx=1, dim=-1):
    dtype = ctx.out_dtype()
    y = ctx.cast(y, dtype)
    axis = normalize_axis(dim, input_rank(ctx))
    head, tail = _ends_and_inner(ctx, y, axis)
    pairs = ctx.op.CumSum(ctx.op.Add(head, tail), ctx.const(axis, torch.int64))
    return ctx.op.Mul(pairs, ctx.const(float(dx) / 2.0, dtype))
