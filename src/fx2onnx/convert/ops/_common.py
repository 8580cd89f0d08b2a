"""Helpers shared by converter families (type promotion, axes, scalars)."""

from __future__ import annotations

from typing import Any, Sequence

import onnx_ir as ir
import torch


def fake_of(arg: Any) -> Any:
    """The fake value torch.export attached to an FX argument (or the Python constant)."""
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    return arg


def result_dtype(*fx_args: Any) -> torch.dtype:
    """torch's type promotion over FX arguments (tensors and Python scalars)."""
    samples = []
    for a in fx_args:
        v = fake_of(a)
        if isinstance(v, torch.Tensor):
            samples.append(torch.empty([1] * v.dim(), dtype=v.dtype))
        elif isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            samples.append({torch.SymInt: 1, torch.SymFloat: 1.0, torch.SymBool: True}[type(v)])
        elif isinstance(v, (int, float, bool, complex)):
            samples.append(v)
    if not samples:
        return torch.float32
    if len(samples) == 1:
        s = samples[0]
        return s.dtype if isinstance(s, torch.Tensor) else torch.tensor(s).dtype
    out = samples[0]
    dtype = None
    for s in samples[1:]:
        dtype = torch.result_type(out, s) if dtype is None else torch.result_type(torch.empty(1, dtype=dtype), s)
        out = torch.empty(1, dtype=dtype)
    return dtype


def cast_all(ctx, args: Sequence[Any], dtype: torch.dtype) -> list[ir.Value]:
    """Converts every argument (Value or Python scalar) to a Value of ``dtype``."""
    return [ctx.as_value(a, dtype) for a in args]


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def axes_value(ctx, dims: Any, rank: int | None = None) -> ir.Value | None:
    """A 1-D int64 constant of axes, or None for 'all axes'."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None
    if isinstance(dims, int):
        dims = [dims]
    if rank is not None:
        dims = [normalize_axis(d, rank) for d in dims]
    return ctx.const(list(dims), torch.int64)


def input_rank(ctx, index: int = 0) -> int:
    """Rank of the index-th FX argument of the current node."""
    v = fake_of(ctx.node.args[index])
    return v.dim() if isinstance(v, torch.Tensor) else 0


def input_fake(ctx, index: int = 0) -> Any:
    return fake_of(ctx.node.args[index]) if index < len(ctx.node.args) else None


def as_rank_1(ctx, x, rank: int):
    """A 0-d value as a 1-d one (operators indexing or normalizing along a dim see a 0-d tensor as [1])."""
    return ctx.op.Reshape(x, ctx.const([-1], torch.int64)) if rank == 0 else x


def back_to_rank(ctx, y, rank: int):
    """The inverse of :func:`as_rank_1`: a result back to 0-d when the input was."""
    return ctx.op.Reshape(y, ctx.const([], torch.int64)) if rank == 0 else y


def integer_floor_div(ctx, x, y):
    """Floor division of integers without leaving their type (onnxruntime-web has no float64 Cast).

    ``x - (x mod y)`` (Python's modulo, the sign of ``y``) is a multiple of ``y``: the integer
    ``Div``, which truncates, divides it exactly, so the quotient is the floor of ``x / y``.
    """
    return ctx.op.Div(ctx.op.Sub(x, ctx.op.Mod(x, y, fmod=0)), y)
