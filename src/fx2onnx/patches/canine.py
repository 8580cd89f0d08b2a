"""CANINE's local attention over blocks of characters as one attention with a block-diagonal mask.

``CanineAttention.forward`` with ``local=True`` (its shallow character encoders) cuts the sequence into chunks with
Python loops over ``range(0, seq_len, stride)``: torch.export unrolls them for the example's length and freezes the
sequence. Where the chunks are blocks (the widths equal to the strides, no first position attending to or from all:
the configuration CANINE's model builds), each character attends to the characters of its block only, which one
attention over the whole sequence computes when the keys of the other blocks get ``-inf``: the mask given to the
attention is ``-1`` there (it adds ``(1 - mask) * finfo.min``, twice ``finfo.min`` overflows to ``-inf``), a masked
key of its own block keeps eager's ``finfo.min`` (a block of padding only stays uniform over that block, as eager's
chunk). The other configurations run the original.
"""

from __future__ import annotations

from typing import Any

import torch


def block_mask(attention_mask: torch.Tensor, block: int) -> torch.Tensor:
    """The 3-D 0/1 ``attention_mask`` (batch, from, to) with ``-1`` for the keys outside each query's block."""
    positions = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    same_block = torch.div(positions[:, None], block, rounding_mode="floor") == \
        torch.div(positions[None, :], block, rounding_mode="floor")
    return torch.where(same_block, attention_mask.to(torch.float32), -1.0)


def _blocks(module: Any) -> bool:
    widths = {module.attend_from_chunk_width, module.attend_from_chunk_stride, module.attend_to_chunk_width,
              module.attend_to_chunk_stride}
    return module.local and len(widths) == 1 and not module.first_position_attends_to_all and \
        not module.always_attend_to_first_position


def _make_block_attention(original: Any) -> Any:
    def forward(self: Any, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                output_attentions: bool | None = False) -> Any:
        if not _blocks(self) or attention_mask is None or attention_mask.ndim != 3 or output_attentions:
            return original(self, hidden_states, attention_mask, output_attentions)
        outputs = self.self(hidden_states, hidden_states, block_mask(attention_mask, self.attend_from_chunk_width),
                            output_attentions)
        return (self.output(outputs[0], hidden_states),)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


def downsample_attention_mask(char_attention_mask: torch.Tensor, downsampling_rate: int) -> torch.Tensor:
    """``CanineModel._downsample_attention_mask`` (a max over each group of ``downsampling_rate`` characters, the
    characters past the last whole group dropped) by a reshape: ``MaxPool1d`` froze the sequence's length."""
    batch, length = char_attention_mask.shape
    groups = length // downsampling_rate
    kept = char_attention_mask[:, : groups * downsampling_rate].float()
    return kept.reshape(batch, groups, downsampling_rate).amax(-1)


def _make_downsample_attention_mask(original: Any) -> Any:
    def _downsample_attention_mask(self: Any, char_attention_mask: torch.Tensor,
                                   downsampling_rate: int) -> torch.Tensor:
        return downsample_attention_mask(char_attention_mask, downsampling_rate)

    _downsample_attention_mask.__wrapped__ = original  # type: ignore[attr-defined]
    return _downsample_attention_mask
