"""Blocks of a lazy weight, quantized when saved: one weight in memory at a time.

A weight read from a checkpoint on demand (:class:`onnx_ir.LazyTensor`) is not quantized by
the rule itself: its codes, scales and zero points become lazy tensors sharing one
:class:`LazyBlocks`, which reads and quantizes the weight at the first read of one of its parts
and drops the result once each part was read once (a later read computes it again). The parts
of a weight are consecutive initializers, written one after the other: the memory in use while
saving is the weight being quantized and its blocks, not the model's blocks (4.5 GB at int4 for
a 7B model).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx_ir as ir

#: how many weights have their blocks in memory now, the most at once, and how many were
#: quantized (for tests: :func:`reset_stats`)
STATS = {"held": 0, "peak": 0, "computed": 0}


def reset_stats() -> None:
    """Sets :data:`STATS` back to zero."""
    STATS.update(held=0, peak=0, computed=0)


class LazyBlocks:
    """The parts (``codes``, ``scales``, ``zero_points``) of one quantized weight, computed by
    ``compute`` at the first read and released once every part was read."""

    def __init__(self, compute: Callable[[], dict[str, np.ndarray]], parts: tuple[str, ...]):
        self._compute = compute
        self._parts = parts
        self._values: dict[str, np.ndarray] | None = None
        self._pending: set[str] = set()

    def read(self, part: str, name: str) -> ir.Tensor:
        """The tensor of ``part`` named ``name``."""
        if self._values is None:
            self._values = self._compute()
            self._pending = set(self._parts)
            STATS["computed"] += 1
            STATS["held"] += 1
            STATS["peak"] = max(STATS["peak"], STATS["held"])
        array = self._values[part]
        self._pending.discard(part)
        if not self._pending:
            self._values = None
            STATS["held"] -= 1
        return ir.tensor(array, name=name)


def lazy_parts(
    compute: Callable[[], dict[str, np.ndarray]], shapes: dict[str, tuple[tuple[int, ...], ir.DataType]],
    names: dict[str, str],
) -> dict[str, ir.LazyTensor]:
    """One lazy tensor per part of ``shapes`` (part -> (shape, type)), all computed by one
    :class:`LazyBlocks` over ``compute``; ``names`` names each part's initializer."""
    blocks = LazyBlocks(compute, tuple(shapes))
    result = {}
    for part, (shape, dtype) in shapes.items():

        def read(part: str = part, name: str = names[part]) -> ir.Tensor:
            return blocks.read(part, name)

        result[part] = ir.LazyTensor(read, dtype=dtype, shape=ir.Shape(shape), name=names[part])
    return result
