"""Strided views: as_strided (and its scatter), diagonal, unfold, sym_stride and the ``*_copy`` view variants.

ONNX values have no storage: every value is a dense row-major tensor. A strided
view is rebuilt as a Gather over the flattened input with indices computed from
sizes, strides and the storage offset. This is exact when the input's own strides
(from the fake tensor torch.export attached) describe a dense tensor, possibly
permuted, which is the case of graph inputs, weights and results of any operator
but a strided view; other inputs are refused with an error.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import registry
from ..registry import converter
from ._common import fake_of, input_rank, normalize_axis

aten = torch.ops.aten
_I64 = torch.int64


def _static(v: Any) -> int | None:
    """The int value of a Python int or a SymInt known to be constant, else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, torch.SymInt):
        try:
            return int(v.node.expr) if v.node.expr.is_number else None
        except (AttributeError, TypeError):
            return None
    return None


def _memory_order(fake: torch.Tensor) -> list[int] | None:
    """The permutation putting the dims of a dense tensor in memory order (outermost first).

    None when the strides are not those of a dense (non-overlapping, gap-free) tensor
    or are not all known constants.
    """
    sizes = [_static(s) for s in fake.shape]
    strides = [_static(s) for s in fake.stride()]
    rank = fake.dim()
    if any(s is None for s in strides + sizes):
        try:
            return list(range(rank)) if fake.is_contiguous() else None
        except Exception:  # noqa: BLE001 - a symbolic answer torch cannot decide: not known dense
            return None
    order = sorted(range(rank), key=lambda d: (-strides[d], d))
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return None
        expected *= sizes[d]
    return order


def _storage(ctx, x, fake: torch.Tensor):
    """The input flattened in memory order (1-D) and the storage offset of its first element."""
    order = _memory_order(fake)
    if order is None:
        raise ctx.error(
            f"as_strided on a tensor with strides {tuple(fake.stride())} (not dense) is not supported: "
            f"ONNX values have no storage. Call .contiguous() before as_strided in the model."
        )
    if order != list(range(fake.dim())):
        x = ctx.op.Transpose(x, perm=order)
    return ctx.op.Reshape(x, ctx.const([-1], _I64)), fake.storage_offset()


def _strided_indices(ctx, size, stride, offset):
    """offset + sum_i arange(size[i]) * stride[i], shaped like ``size`` (int64)."""
    rank = len(size)
    idx = ctx.as_value(offset, _I64) if not isinstance(offset, int) else ctx.const(offset, _I64)
    idx = ctx.op.Reshape(idx, ctx.const([1] * rank, _I64))
    for i, (n, s) in enumerate(zip(size, stride)):
        steps = ctx.op.Range(ctx.const(0, _I64), ctx.op.Reshape(ctx.as_value(n, _I64), ctx.const([], _I64)), ctx.const(1, _I64))
        shape = [1] * rank
        shape[i] = -1
        part = ctx.op.Mul(ctx.op.Reshape(steps, ctx.const(shape, _I64)), ctx.as_value(s, _I64))
        idx = ctx.op.Add(idx, part)
    return ctx.op.Expand(idx, ctx.shape_value(list(size))) if rank else idx


@converter(aten.as_strided.default, aten.as_strided_copy.default)
def convert_as_strided(ctx, node, x, size, stride, storage_offset=None):
    fake = fake_of(node.args[0])
    flat, base = _storage(ctx, x, fake)
    if storage_offset is None:
        offset: Any = 0
    elif isinstance(storage_offset, int) and isinstance(base, int):
        offset = storage_offset - base
    else:
        offset = ctx.op.Sub(ctx.as_value(storage_offset, _I64), ctx.as_value(base, _I64))
    return ctx.op.Gather(flat, _strided_indices(ctx, list(size), list(stride), offset), axis=0)


@converter(aten.as_strided_scatter.default)
def convert_as_strided_scatter(ctx, node, x, src, size, stride, storage_offset=None):
    """x with the elements of its strided view replaced by src: a ScatterND into x's storage
    (its dimensions in memory order, flattened), then the dimensions put back."""
    fake = fake_of(node.args[0])
    flat, base = _storage(ctx, x, fake)
    order = _memory_order(fake)
    offset: Any = 0 if storage_offset is None else ctx.op.Sub(ctx.as_value(storage_offset, _I64), ctx.as_value(base, _I64))
    indices = ctx.op.Reshape(_strided_indices(ctx, list(size), list(stride), offset), ctx.const([-1, 1], _I64))
    flat = ctx.op.ScatterND(flat, indices, ctx.op.Reshape(src, ctx.const([-1], _I64)))
    in_memory_order = ctx.op.Shape(ctx.op.Transpose(x, perm=order)) if order != sorted(order) else ctx.op.Shape(x)
    out = ctx.op.Reshape(flat, in_memory_order)
    if order == sorted(order):
        return out
    return ctx.op.Transpose(out, perm=[order.index(d) for d in range(len(order))])


def _nonneg(ctx, v):
    return ctx.op.Max(v, ctx.const(0, _I64))


def _diagonal_layout(ctx, x, offset: int, dim1: int, dim2: int):
    """The diagonal's two dimensions moved last and merged into one: (merged, flat indices of the
    diagonal in the merged dimension, the permutation, the moved shape)."""
    rank = input_rank(ctx)
    d1, d2 = normalize_axis(dim1, rank), normalize_axis(dim2, rank)
    if d1 == d2:
        raise ctx.error("diagonal dimensions cannot be identical")
    perm = [d for d in range(rank) if d not in (d1, d2)] + [d1, d2]
    moved = ctx.op.Transpose(x, perm=perm)
    n1, n2 = ctx.dim_size(x, d1), ctx.dim_size(x, d2)
    row0, col0 = max(-offset, 0), max(offset, 0)
    length = _nonneg(ctx, ctx.op.Min(ctx.op.Sub(n1, ctx.const(row0, _I64)), ctx.op.Sub(n2, ctx.const(col0, _I64))))
    i = ctx.op.Range(ctx.const(0, _I64), length, ctx.const(1, _I64))
    flat_index = ctx.op.Add(ctx.op.Mul(ctx.op.Add(i, ctx.const(row0, _I64)), n2), ctx.op.Add(i, ctx.const(col0, _I64)))
    lead = ctx.op.Shape(moved, start=0, end=rank - 2)
    # n1 * n2 rather than -1: a -1 cannot be inferred for an empty tensor
    merged = ctx.op.Reshape(moved, ctx.op.Concat(lead, ctx.op.Reshape(ctx.op.Mul(n1, n2), ctx.const([1], _I64)), axis=0))
    return merged, flat_index, perm, ctx.op.Shape(moved)


@converter(aten.diagonal.default, aten.diagonal_copy.default)
def convert_diagonal(ctx, node, x, offset=0, dim1=0, dim2=1):
    merged, flat_index, _, _ = _diagonal_layout(ctx, x, offset, dim1, dim2)
    return ctx.op.Gather(merged, flat_index, axis=input_rank(ctx) - 2)


@converter(aten.diagonal_scatter.default)
def convert_diagonal_scatter(ctx, node, x, src, offset=0, dim1=0, dim2=1):
    rank = input_rank(ctx)
    merged, flat_index, perm, moved_shape = _diagonal_layout(ctx, x, offset, dim1, dim2)
    indices = ctx.op.Expand(flat_index, ctx.op.Shape(src))
    written = ctx.op.ScatterElements(merged, indices, ctx.cast(src, ctx.out_dtype()), axis=rank - 2)
    inverse = [perm.index(d) for d in range(rank)]
    return ctx.op.Transpose(ctx.op.Reshape(written, moved_shape), perm=inverse)


@converter(aten.unfold.default, aten.unfold_copy.default)
def convert_unfold(ctx, node, x, dimension, size, step):
    rank = input_rank(ctx)
    if rank == 0:
        return ctx.op.Reshape(x, ctx.const([1], _I64))
    axis = normalize_axis(dimension, rank)
    length = ctx.dim_size(x, axis)
    count = ctx.op.Add(ctx.op.Div(ctx.op.Sub(length, ctx.const(size, _I64)), ctx.const(step, _I64)), ctx.const(1, _I64))
    count = _nonneg(ctx, count)
    starts = ctx.op.Mul(ctx.op.Range(ctx.const(0, _I64), count, ctx.const(1, _I64)), ctx.const(step, _I64))
    window = ctx.const(list(range(size)), _I64)
    idx = ctx.op.Add(ctx.op.Unsqueeze(starts, ctx.const([1], _I64)), ctx.op.Unsqueeze(window, ctx.const([0], _I64)))
    gathered = ctx.op.Gather(x, idx, axis=axis)  # [..., count, size, ...]
    perm = list(range(axis + 1)) + list(range(axis + 2, rank + 1)) + [axis + 1]
    return ctx.op.Transpose(gathered, perm=perm) if perm != list(range(rank + 1)) else gathered


@converter(aten.sym_stride.int)
def convert_sym_stride(ctx, node, x, dim):
    """The stride torch.export recorded; a symbolic one is rebuilt for a contiguous input."""
    fake = fake_of(node.args[0])
    rank = fake.dim()
    axis = normalize_axis(dim, rank) if rank else 0
    stride = fake.stride(axis) if rank else 1
    value = _static(stride)
    if value is not None:
        return ctx.const(value, _I64)
    if not fake.is_contiguous():
        raise ctx.error(
            f"sym_stride of a non-contiguous tensor with a symbolic stride ({stride}) is not supported; "
            f"call .contiguous() first or avoid .stride() in the model."
        )
    if axis == rank - 1:
        return ctx.const(1, _I64)
    return ctx.op.ReduceProd(ctx.op.Shape(x, start=axis + 1), keepdims=0)


# the ``*_copy`` variants return a new tensor with the values of the view: same converter
_COPY_VARIANTS = {
    aten.alias_copy.default: aten.alias.default,
    aten.detach_copy.default: aten.detach.default,
    aten.expand_copy.default: aten.expand.default,
    aten.permute_copy.default: aten.permute.default,
    aten.select_copy.int: aten.select.int,
    aten.slice_copy.Tensor: aten.slice.Tensor,
    aten.split_copy.Tensor: aten.split.Tensor,
    aten.split_with_sizes_copy.default: aten.split_with_sizes.default,
    aten.squeeze_copy.default: aten.squeeze.default,
    aten.squeeze_copy.dim: aten.squeeze.dim,
    aten.squeeze_copy.dims: aten.squeeze.dims,
    aten.t_copy.default: aten.t.default,
    aten.transpose_copy.int: aten.transpose.int,
    aten.unbind_copy.int: aten.unbind.int,
    aten.unsqueeze_copy.default: aten.unsqueeze.default,
    aten.view_copy.default: aten.view.default,
    aten.narrow_copy.default: aten.narrow.default,
    aten._reshape_copy.default: aten.reshape.default,
}


def _copy_variant(base: Any):
    def convert_copy_variant(ctx, node, *args, **kwargs):
        fn = registry.lookup(base)
        return fn(ctx, node, *args, **kwargs)

    convert_copy_variant.__name__ = f"convert_{base._opname}_copy"
    return convert_copy_variant


for _copy_op, _base_op in _COPY_VARIANTS.items():
    converter(_copy_op)(_copy_variant(_base_op))



@converter(aten.sym_is_contiguous.default)
def convert_sym_is_contiguous(ctx, node, x, memory_format=torch.contiguous_format):
    """What torch.export recorded about the input's layout (a constant for the graph)."""
    fake = fake_of(node.args[0])
    try:
        contiguous = bool(fake.is_contiguous(memory_format=memory_format))
    except Exception as e:  # a data-dependent answer
        raise ctx.error(f"sym_is_contiguous cannot be decided at export ({e}); call .contiguous() in the model.") from e
    return ctx.const(contiguous, torch.bool)
