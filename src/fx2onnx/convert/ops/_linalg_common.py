"""Building blocks of the linear-algebra converters: loops, index masks, batched matrices.

Every algorithm works on a batch of matrices ``(..., m, n)`` (any number of leading
dimensions, an empty batch included) with dynamic sizes: an ONNX ``Loop`` runs over
the columns (or rows, or Jacobi rotations), reading the current index from the
iteration number, and writes one column or row per step with ``Where`` on an index
mask (never a product by a one-hot vector: ``0 * inf`` would spread NaN).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import onnx_ir as ir
import torch

from ..builder import onnx_dtype

I64 = torch.int64


def loop(
    ctx,
    node,
    name: str,
    trips: ir.Value,
    carried: Sequence[tuple[ir.Value, torch.dtype]],
    step: Callable[..., Sequence[ir.Value]],
    condition: Callable[..., ir.Value] | None = None,
) -> list[ir.Value]:
    """``Loop`` of ``trips`` iterations over the ``carried`` values, given with their dtypes.

    ``step(body_ctx, k, *values)`` returns the new values (``k`` is the 0-d int64
    iteration number); outer values may be read directly (outer scope). When
    ``condition(body_ctx, *new_values)`` is given, the loop stops early once it is false.
    """
    sub = ctx.builder.subgraph(f"{node.name}_{name}")
    k = sub.add_input(f"{node.name}_{name}_k", I64, [])
    sub.add_input(f"{node.name}_{name}_cond", torch.bool, [])
    dtypes = [dtype for _, dtype in carried]
    inputs = [sub.add_input(f"{node.name}_{name}_v{i}", dtype, None) for i, dtype in enumerate(dtypes)]
    body = type(ctx)(sub, ctx.interpreter, node)
    new = list(step(body, k, *inputs))
    if len(new) != len(carried):
        raise ctx.error(f"internal: the loop body {name!r} returns {len(new)} values for {len(carried)}.")
    cond = body.const(True, torch.bool) if condition is None else condition(body, *new)
    sub.add_output(cond)
    for value, dtype in zip(new, dtypes):
        sub.add_output(typed(value, dtype))
    initial = [typed(value, dtype) for value, dtype in carried]
    outs = ctx.op.Loop(trips, ctx.const(True, torch.bool), *initial, body=sub.to_graph(), _outputs=len(carried))
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    return [typed(o, dtype) for o, dtype in zip(outs, dtypes)]


def typed(value: ir.Value, dtype: torch.dtype) -> ir.Value:
    """Records the dtype of a value the converter knows (ONNX nodes built here are not inferred)."""
    expected = onnx_dtype(dtype)
    if value.dtype is not None and value.dtype != expected:
        raise ValueError(f"internal: {value.name!r} has dtype {value.dtype}, expected {expected}")
    value.dtype = expected
    return value


def mT(ctx, x: ir.Value, rank: int) -> ir.Value:
    """Swaps the last two dimensions."""
    return ctx.op.Transpose(x, perm=[*range(rank - 2), rank - 1, rank - 2])


def arange(ctx, n: ir.Value) -> ir.Value:
    """``0 .. n - 1`` (int64) for a 0-d int64 ``n``."""
    return ctx.op.Range(ctx.const(0, I64), n, ctx.const(1, I64))


def size(ctx, x: ir.Value, axis: int) -> ir.Value:
    """A dimension of ``x`` as a 0-d int64 value (negative axes count from the end)."""
    return ctx.dim_size(x, axis)


def column(ctx, index: ir.Value) -> ir.Value:
    """``index`` (1-D) as a column ``(n, 1)``."""
    return ctx.op.Unsqueeze(index, ctx.const([1], I64))


def band_mask(ctx, rows: ir.Value, cols: ir.Value, lower: bool, diagonal: int = 0) -> ir.Value:
    """Boolean ``(rows, cols)``: ``j - i <= diagonal`` (lower) or ``j - i >= diagonal`` (upper)."""
    offset = ctx.op.Sub(ctx.op.Unsqueeze(arange(ctx, cols), ctx.const([0], I64)), column(ctx, arange(ctx, rows)))
    bound = ctx.const(diagonal, I64)
    return ctx.op.LessOrEqual(offset, bound) if lower else ctx.op.GreaterOrEqual(offset, bound)


def triangle(ctx, x: ir.Value, dtype: torch.dtype, lower: bool, diagonal: int = 0) -> ir.Value:
    """``tril(x, diagonal)`` or ``triu(x, diagonal)`` of a batch of matrices."""
    mask = band_mask(ctx, size(ctx, x, -2), size(ctx, x, -1), lower, diagonal)
    return ctx.op.Where(mask, x, ctx.const(0, dtype))


def eye(ctx, rows: ir.Value, cols: ir.Value, dtype: torch.dtype) -> ir.Value:
    """The ``(rows, cols)`` identity."""
    equal = ctx.op.Equal(column(ctx, arange(ctx, rows)), ctx.op.Unsqueeze(arange(ctx, cols), ctx.const([0], I64)))
    return ctx.cast(equal, dtype)


def zeros(ctx, shape: ir.Value, dtype: torch.dtype) -> ir.Value:
    return typed(ctx.op.Expand(ctx.const(0, dtype), shape), dtype)


def zeros_like(ctx, x: ir.Value, dtype: torch.dtype) -> ir.Value:
    return typed(ctx.op.Expand(ctx.const(0, dtype), ctx.op.Shape(x)), dtype)


def batch_shape(ctx, x: ir.Value, trailing: int = 2) -> ir.Value:
    """The shape of ``x`` without its last ``trailing`` dimensions (1-D int64)."""
    return ctx.op.Shape(x, end=-trailing)


def broadcast_batch(ctx, x: ir.Value, other: ir.Value) -> ir.Value:
    """``x`` (a batch of matrices) broadcast to the batch dimensions of ``other`` as well."""
    ones = ctx.const([1, 1], I64)
    return ctx.op.Expand(x, ctx.op.Concat(batch_shape(ctx, other), ones, axis=0))


def gather(ctx, x: ir.Value, index: ir.Value, axis: int, keep: bool = False) -> ir.Value:
    """``x.select(axis, index)`` for a 0-d ``index`` (``keep``: the axis stays, of size 1)."""
    if keep:
        index = ctx.op.Unsqueeze(index, ctx.const([0], I64))
    return ctx.op.Gather(x, index, axis=axis)


def unsqueeze(ctx, x: ir.Value, axis: int) -> ir.Value:
    return ctx.op.Unsqueeze(x, ctx.const([axis], I64))


def squeeze(ctx, x: ir.Value, axis: int) -> ir.Value:
    return ctx.op.Squeeze(x, ctx.const([axis], I64))


def first_failure(ctx, info: ir.Value, failed: ir.Value, k: ir.Value) -> ir.Value:
    """``info`` where it is already set (non zero) or nothing failed, else ``k + 1``."""
    hit = ctx.op.And(failed, ctx.op.Equal(info, ctx.const(0, I64)))
    return ctx.op.Where(hit, ctx.op.Add(k, ctx.const(1, I64)), info)


def fake_dim(fx_arg: Any) -> int:
    v = fx_arg.meta.get("val") if isinstance(fx_arg, torch.fx.Node) else fx_arg
    return v.dim()


def sum_last(ctx, x: ir.Value, dtype: torch.dtype, keepdims: bool = False) -> ir.Value:
    """The sum over the last axis, as a product with a vector of ones: onnxruntime's reductions
    return their input unchanged when it is empty (an empty batch of matrices)."""
    ones = ctx.op.Expand(ctx.const([[1]], dtype), ctx.op.Concat(ctx.op.Shape(x, start=-1), ctx.const([1], I64), axis=0))
    out = ctx.op.MatMul(unsqueeze(ctx, x, -2), ones)  # (..., 1, 1)
    return squeeze(ctx, out, -1) if keepdims else ctx.op.Squeeze(out, ctx.const([-2, -1], I64))


def diagonal(ctx, x: ir.Value) -> ir.Value:
    """The diagonal ``(..., min(m, n))`` of a batch of matrices."""
    k = ctx.op.Min(size(ctx, x, -2), size(ctx, x, -1))
    square = ctx.op.Slice(x, ctx.const([0, 0], I64), ctx.op.Concat(ctx.scalar_1d(k), ctx.scalar_1d(k), axis=0), ctx.const([-2, -1], I64))
    index = ctx.op.Expand(column(ctx, arange(ctx, k)), ctx.op.Concat(ctx.op.Shape(square, end=-1), ctx.const([1], I64), axis=0))
    return squeeze(ctx, ctx.op.GatherElements(square, index, axis=-1), -1)
