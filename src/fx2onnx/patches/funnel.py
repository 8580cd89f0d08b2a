"""Funnel Transformer's relative positions computed from sizes, not from Python lists.

``FunnelAttentionStructure.get_position_embeds`` (relative-shift attention) builds
``pos = list(range(seq_len))``, pools it block after block with list slicing and
reads four numbers of each list (first, last, length): :func:`torch.export.export`
freezes the sequence length on the list. Every list there is an optional ``<cls>``
position followed by an arithmetic progression, so :class:`Positions` keeps the
first element, the step and the count of that progression: the same four numbers,
symbolic when the length is. The embeddings are the ones eager computes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class Positions:
    """``[cls] + [start + i * step for i in range(count)]`` (no ``cls`` if None)."""

    cls: Any
    start: Any
    step: Any
    count: Any

    @property
    def first(self) -> Any:
        return self.start if self.cls is None else self.cls

    @property
    def last(self) -> Any:
        return self.start + (self.count - 1) * self.step

    def __len__(self) -> int:
        raise TypeError("use Positions.size: the count may be symbolic")

    @property
    def size(self) -> Any:
        return self.count + (0 if self.cls is None else 1)

    def without_first(self) -> Positions:
        if self.cls is not None:
            return Positions(None, self.start, self.step, self.count)
        return Positions(None, self.start + self.step, self.step, self.count - 1)

    def every_other(self) -> Positions:
        """``positions[::2]``."""
        if self.cls is None:
            return Positions(None, self.start, 2 * self.step, (self.count + 1) // 2)
        # [cls, t0, t1, t2, ...][::2] = [cls, t1, t3, ...]
        return Positions(self.cls, self.start + self.step, 2 * self.step, self.count // 2)


def stride_pool_positions(config: Any, pos: Positions, block_index: int) -> Positions:
    """``FunnelAttentionStructure.stride_pool_pos`` on :class:`Positions`."""
    if not config.separate_cls:
        return pos.every_other()
    tail = pos.without_first()
    if config.truncate_seq:
        tail = Positions(None, tail.start, tail.step, tail.count - 1)
    pooled = tail.every_other()
    return Positions(-(2**block_index) + 1, pooled.start, pooled.step, pooled.count)


def relative_positions(pos: Positions, stride: int, pooled: Positions | None = None, shift: int = 1,
                       device: Any = None) -> torch.Tensor:
    """``FunnelAttentionStructure.relative_pos`` on :class:`Positions`."""
    pooled = pos if pooled is None else pooled
    ref_point = pooled.first - pos.first
    max_dist = ref_point + shift * pooled.size * stride
    min_dist = pooled.first - pos.last
    return torch.arange(max_dist, min_dist - 1, -stride, dtype=torch.long, device=device)


def _make_get_position_embeds(original: Any) -> Any:
    def get_position_embeds(self: Any, seq_len: Any, dtype: torch.dtype, device: torch.device) -> Any:
        if self.config.attention_type == "factorized":
            return original(self, seq_len, dtype, device)
        d_model = self.config.d_model
        freq_seq = torch.arange(0, d_model // 2, 1.0, dtype=torch.int64, device=device).to(dtype)
        inv_freq = 1 / (10000 ** (freq_seq / (d_model // 2)))
        rel_pos_id = torch.arange(-seq_len * 2, seq_len * 2, 1.0, dtype=torch.int64, device=device).to(dtype)
        zero_offset = seq_len * 2
        sinusoid = rel_pos_id[:, None] * inv_freq[None]
        sin_embed = self.sin_dropout(torch.sin(sinusoid))
        cos_embed = self.cos_dropout(torch.cos(sinusoid))
        pos_embed = torch.cat([sin_embed, cos_embed], dim=-1)

        def gather(rel_pos: torch.Tensor) -> torch.Tensor:
            rel_pos = rel_pos[:, None] + zero_offset
            return torch.gather(pos_embed, 0, rel_pos.expand(rel_pos.size(0), d_model))

        pos = pooled_pos = Positions(None, 0, 1, seq_len)
        position_embeds_list = []
        for block_index in range(self.config.num_blocks):
            position_embeds_pooling = None
            if block_index > 0:
                pooled_pos = stride_pool_positions(self.config, pos, block_index)
                stride = 2 ** (block_index - 1)
                position_embeds_pooling = gather(relative_positions(pos, stride, pooled_pos, 2, device))
            pos = pooled_pos
            position_embeds_no_pooling = gather(relative_positions(pos, 2**block_index, device=device))
            position_embeds_list.append([position_embeds_no_pooling, position_embeds_pooling])
        return position_embeds_list

    get_position_embeds.__wrapped__ = original  # type: ignore[attr-defined]
    return get_position_embeds
