"""Reformer's axial position embeddings gathered for the whole batch at once.

In evaluation mode ``AxialPositionEmbeddings.forward`` gathers the rows of each
sequence with a Python loop over the batch (``for i in range(batch_size)``):
:func:`torch.export.export` unrolls it and freezes the batch size. The embedding of
position ``p`` is the concatenation of the first axial weight's row ``p // W`` and the
second's column ``p % W`` (axial shape ``(H, W)``): the patch builds that ``(H * W, D)``
table once and indexes it with every position id, which is what the loop computes.
Training mode (dropout on the axial weights) runs the original code.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import torch


def axial_position_table(weights: Any, axial_shape: tuple[int, ...]) -> torch.Tensor:
    """``(prod(axial_shape), sum of the embedding dims)``: the embedding of every position."""
    size = functools.reduce(operator.mul, axial_shape)
    return torch.cat([w.expand(tuple(axial_shape) + w.shape[-1:]).reshape(size, -1) for w in weights], dim=-1)


def _make_axial_position_forward(original: Any) -> Any:
    def forward(self: Any, position_ids: torch.Tensor) -> torch.Tensor:
        if self.training:
            return original(self, position_ids)
        capacity = functools.reduce(operator.mul, self.axial_pos_shape)
        torch._check(
            position_ids.shape[1] <= capacity,
            lambda: f"The sequence is longer than axial_pos_shape allows ({capacity} positions).",
        )
        return axial_position_table(self.weights, self.axial_pos_shape)[position_ids]

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward
