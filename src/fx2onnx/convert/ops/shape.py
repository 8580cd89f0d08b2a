"""Shape operators: view, reshape, permute, slice, cat, split, expand..."""

from __future__ import annotations

import torch

from ..registry import converter
from ._common import fake_of, input_fake, input_rank, normalize_axis

aten = torch.ops.aten

INT64_MAX = 9223372036854775807


def _static_shape(fake) -> list[int] | None:
    if isinstance(fake, torch.Tensor) and all(isinstance(d, int) for d in fake.shape):
        return [int(d) for d in fake.shape]
    return None


def reshape_to(ctx, x, shape):
    """Reshape ``x`` to the torch shape ``shape`` (ints, -1 and 0-d values)."""
    static = _static_shape(ctx.val())
    if static is not None:
        target = ctx.const(static, torch.int64)
        allowzero = 1 if 0 in static else 0
    else:
        target = ctx.shape_value(shape)
        allowzero = 0
    return ctx.op.Reshape(x, target, allowzero=allowzero)


@converter(aten.view.default, aten.reshape.default, aten._unsafe_view.default)
def convert_view(ctx, node, x, shape):
    return reshape_to(ctx, x, shape)


@converter(aten.flatten.using_ints)
def convert_flatten(ctx, node, x, start_dim=0, end_dim=-1):
    rank = input_rank(ctx)
    if rank == 0:
        return ctx.op.Reshape(x, ctx.const([1], torch.int64))
    start, end = normalize_axis(start_dim, rank), normalize_axis(end_dim, rank)
    if start == end:
        return ctx.op.Identity(x)
    if end == rank - 1:
        if start == 0:
            return ctx.op.Reshape(x, ctx.const([-1], torch.int64))
        if start == 1:
            return ctx.op.Flatten(x, axis=1)
    shape = ctx.op.Shape(x)
    parts = []
    if start > 0:
        parts.append(ctx.op.Slice(shape, ctx.const([0], torch.int64), ctx.const([start], torch.int64)))
    parts.append(ctx.const([-1], torch.int64))
    if end < rank - 1:
        parts.append(ctx.op.Slice(shape, ctx.const([end + 1], torch.int64), ctx.const([rank], torch.int64)))
    return ctx.op.Reshape(x, ctx.op.Concat(*parts, axis=0) if len(parts) > 1 else parts[0])


@converter(aten.permute.default)
def convert_permute(ctx, node, x, dims):
    rank = input_rank(ctx)
    return ctx.op.Transpose(x, perm=[normalize_axis(d, rank) for d in dims])


@converter(aten.transpose.int)
def convert_transpose(ctx, node, x, dim0, dim1):
    rank = input_rank(ctx)
    if rank < 2:
        return ctx.op.Identity(x)
    perm = list(range(rank))
    a, b = normalize_axis(dim0, rank), normalize_axis(dim1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.op.Transpose(x, perm=perm)


@converter(aten.t.default, aten.numpy_T.default)
def convert_t(ctx, node, x):
    rank = input_rank(ctx)
    if rank < 2:
        return ctx.op.Identity(x)
    return ctx.op.Transpose(x, perm=list(range(rank))[::-1])


@converter(aten.unsqueeze.default)
def convert_unsqueeze(ctx, node, x, dim):
    rank = input_rank(ctx) + 1
    return ctx.op.Unsqueeze(x, ctx.const([normalize_axis(dim, rank)], torch.int64))


@converter(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def convert_squeeze(ctx, node, x, dim=None):
    fake = input_fake(ctx)
    rank = fake.dim()
    if rank == 0:
        return ctx.op.Identity(x)
    dims = list(range(rank)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = [normalize_axis(d, rank) for d in dims]
    # torch squeezes only the dims of size 1 (no error otherwise)
    keep = [d for d in dims if isinstance(fake.shape[d], int) and fake.shape[d] == 1]
    if not keep:
        return ctx.op.Identity(x)
    return ctx.op.Squeeze(x, ctx.const(keep, torch.int64))


@converter(
    aten.clone.default,
    aten.alias.default,
    aten.detach.default,
    aten.lift_fresh_copy.default,
    aten.contiguous.default,
    aten.view_as.default,
    aten.resolve_conj.default,
    aten.resolve_neg.default,
)
def convert_identity(ctx, node, x, *args, **kwargs):
    if node.target is aten.view_as.default:
        return reshape_to(ctx, x, ctx.op.Shape(args[0]))
    return ctx.op.Identity(x)


@converter(aten.expand.default)
def convert_expand(ctx, node, x, size, implicit=False):
    # -1 keeps the input dimension: Expand with 1 does the same (broadcast)
    dims = [1 if isinstance(s, int) and s == -1 else s for s in size]
    static = _static_shape(ctx.val())
    target = ctx.const(static, torch.int64) if static is not None else ctx.shape_value(dims)
    return ctx.op.Expand(x, target)


@converter(aten.expand_as.default)
def convert_expand_as(ctx, node, x, other):
    return ctx.op.Expand(x, ctx.op.Shape(other))


@converter(aten.repeat.default)
def convert_repeat(ctx, node, x, repeats):
    rank = input_rank(ctx)
    repeats = list(repeats)
    if len(repeats) > rank:
        # torch prepends dimensions of size 1
        x = ctx.op.Unsqueeze(x, ctx.const(list(range(len(repeats) - rank)), torch.int64))
    return ctx.op.Tile(x, ctx.shape_value(repeats))


@converter(aten.slice.Tensor)
def convert_slice(ctx, node, x, dim=0, start=None, end=None, step=1):
    rank = input_rank(ctx)
    dim = normalize_axis(dim, rank)
    if start is None:
        start = 0
    if end is None:
        end = INT64_MAX
    if (
        isinstance(start, int)
        and isinstance(end, int)
        and start == 0
        and end >= INT64_MAX
        and step == 1
    ):
        return ctx.op.Identity(x)
    return ctx.op.Slice(
        x,
        ctx.scalar_1d(start),
        ctx.scalar_1d(end),
        ctx.const([dim], torch.int64),
        ctx.scalar_1d(step),
    )


@converter(aten.narrow.default)
def convert_narrow(ctx, node, x, dim, start, length):
    rank = input_rank(ctx)
    s = ctx.scalar_1d(start)
    e = ctx.op.Add(s, ctx.scalar_1d(length))
    return ctx.op.Slice(x, s, e, ctx.const([normalize_axis(dim, rank)], torch.int64))


@converter(aten.select.int)
def convert_select(ctx, node, x, dim, index):
    rank = input_rank(ctx)
    index = ctx.as_value(index, torch.int64)
    return ctx.op.Gather(x, index, axis=normalize_axis(dim, rank))


@converter(aten.cat.default, aten.concat.default, aten.concatenate.default)
def convert_cat(ctx, node, tensors, dim=0):
    fakes = [fake_of(t) for t in node.args[0]]
    rank = ctx.out_rank()
    dtype = ctx.out_dtype()
    keep = [
        ctx.cast(v, dtype)
        for v, f in zip(tensors, fakes)
        if not (isinstance(f, torch.Tensor) and f.dim() == 1 and rank != 1 and f.shape[0] == 0)
    ]
    if len(keep) == 1:
        return ctx.op.Identity(keep[0])
    return ctx.op.Concat(*keep, axis=normalize_axis(dim, rank))


@converter(aten.stack.default)
def convert_stack(ctx, node, tensors, dim=0):
    rank = ctx.out_rank()
    axis = ctx.const([normalize_axis(dim, rank)], torch.int64)
    dtype = ctx.out_dtype()
    parts = [ctx.op.Unsqueeze(ctx.cast(t, dtype), axis) for t in tensors]
    if len(parts) == 1:
        return parts[0]
    return ctx.op.Concat(*parts, axis=normalize_axis(dim, rank))


def _split(ctx, x, dim, sizes):
    n = len(sizes)
    if n == 1:
        return [ctx.op.Identity(x)]
    outs = ctx.op.Split(x, ctx.shape_value(sizes), axis=dim, _outputs=n)
    return list(outs)


def _split_then_rest(ctx, x, dim, split, n: int):
    """``n`` pieces along a dynamic dimension: ``n - 1`` of size ``split`` (a value), then the rest."""
    last = ctx.op.Sub(ctx.dim_size(x, dim), ctx.op.Mul(split, ctx.const(n - 1, torch.int64)))
    return _split(ctx, x, dim, [split] * (n - 1) + [last])


@converter(aten.split_with_sizes.default)
def convert_split_with_sizes(ctx, node, x, split_sizes, dim=0):
    rank = input_rank(ctx)
    return _split(ctx, x, normalize_axis(dim, rank), list(split_sizes))


@converter(aten.split.Tensor)
def convert_split(ctx, node, x, split_size, dim=0):
    rank = input_rank(ctx)
    dim = normalize_axis(dim, rank)
    outs_fake = ctx.val()
    n = len(outs_fake)
    if all(isinstance(f.shape[dim], int) for f in outs_fake):
        return _split(ctx, x, dim, [int(f.shape[dim]) for f in outs_fake])
    # dynamic dimension: n - 1 chunks of split_size and the rest
    return _split_then_rest(ctx, x, dim, ctx.as_value(split_size, torch.int64), n)


@converter(aten.chunk.default)
def convert_chunk(ctx, node, x, chunks, dim=0):
    rank = input_rank(ctx)
    dim = normalize_axis(dim, rank)
    outs_fake = ctx.val()
    if all(isinstance(f.shape[dim], int) for f in outs_fake):
        return _split(ctx, x, dim, [int(f.shape[dim]) for f in outs_fake])
    # dynamic dimension: as torch, chunks of ceil(total / chunks), the last one smaller
    total = ctx.dim_size(x, dim)
    split = ctx.op.Div(ctx.op.Add(total, ctx.const(int(chunks) - 1, torch.int64)), ctx.const(int(chunks), torch.int64))
    return _split_then_rest(ctx, x, dim, split, len(outs_fake))


@converter(aten.unbind.int)
def convert_unbind(ctx, node, x, dim=0):
    rank = input_rank(ctx)
    dim = normalize_axis(dim, rank)
    n = len(ctx.val())
    axis = ctx.const([dim], torch.int64)
    if n == 1:
        return [ctx.op.Squeeze(x, axis)]
    outs = ctx.op.Split(x, ctx.const([1] * n, torch.int64), axis=dim, _outputs=n)
    return [ctx.op.Squeeze(o, axis) for o in outs]


@converter(aten.flip.default)
def convert_flip(ctx, node, x, dims):
    rank = input_rank(ctx)
    dims = [normalize_axis(d, rank) for d in dims]
    n = len(dims)
    return ctx.op.Slice(
        x,
        ctx.const([-1] * n, torch.int64),
        ctx.const([-INT64_MAX] * n, torch.int64),
        ctx.const(dims, torch.int64),
        ctx.const([-1] * n, torch.int64),
    )


@converter(aten.roll.default)
def convert_roll(ctx, node, x, shifts, dims=()):
    rank = input_rank(ctx)
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]  # ints or symbolic sizes
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        flat = ctx.op.Reshape(x, ctx.const([-1], torch.int64))
        rolled = _roll_axis(ctx, flat, shifts[0], 0)
        return ctx.op.Reshape(rolled, ctx.op.Shape(x))
    for s, d in zip(shifts, dims):
        x = _roll_axis(ctx, x, s, normalize_axis(d, rank))
    return x


def _roll_axis(ctx, x, shift, axis):
    size = ctx.dim_size(x, axis)
    back = -shift if isinstance(shift, int) else ctx.op.Neg(ctx.as_value(shift, torch.int64))  # a symbolic shift
    s = ctx.op.Mod(ctx.as_value(back, torch.int64), size, fmod=0)
    s1 = ctx.scalar_1d(s)
    ax = ctx.const([axis], torch.int64)
    tail = ctx.op.Slice(x, s1, ctx.const([INT64_MAX], torch.int64), ax)
    head = ctx.op.Slice(x, ctx.const([0], torch.int64), s1, ax)
    return ctx.op.Concat(tail, head, axis=axis)


@converter(aten.tile.default)
def convert_tile(ctx, node, x, dims):
    return convert_repeat(ctx, node, x, [1] * max(0, input_rank(ctx) - len(dims)) + list(dims))


@converter(aten.movedim.int)
def convert_movedim(ctx, node, x, source, destination):
    rank = input_rank(ctx)
    perm = list(range(rank))
    s, d = normalize_axis(source, rank), normalize_axis(destination, rank)
    perm.pop(s)
    perm.insert(d, s)
    return ctx.op.Transpose(x, perm=perm)


@converter(aten.unflatten.int)
def convert_unflatten(ctx, node, x, dim, sizes):
    return reshape_to(ctx, x, None) if _static_shape(ctx.val()) is not None else _unflatten_dynamic(ctx, x, dim, sizes)


def _unflatten_dynamic(ctx, x, dim, sizes):
    rank = input_rank(ctx)
    dim = normalize_axis(dim, rank)
    shape = ctx.op.Shape(x)
    parts = []
    if dim > 0:
        parts.append(ctx.op.Slice(shape, ctx.const([0], torch.int64), ctx.const([dim], torch.int64)))
    parts.append(ctx.shape_value(list(sizes)))
    if dim < rank - 1:
        parts.append(ctx.op.Slice(shape, ctx.const([dim + 1], torch.int64), ctx.const([rank], torch.int64)))
    return ctx.op.Reshape(x, ctx.op.Concat(*parts, axis=0) if len(parts) > 1 else parts[0])
