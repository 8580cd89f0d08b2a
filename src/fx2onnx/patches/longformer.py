"""Longformer's (and LED's encoder) self-attention without a data-dependent branch.

``LongformerSelfAttention.forward`` takes a different path when some token has global
attention (``is_global_attn``, computed with ``.item()``): it gathers the global tokens
with ``nonzero`` into tensors whose size is the largest number of global tokens in the
batch. :func:`torch.export.export` cannot branch on that value (``Could not guard on
data-dependent expression``), and exporting one path would give a model wrong for the
other kind of mask.

The patch computes both parts of the global attention densely, which is right whatever
the number of global tokens (none included):

* every query also scores every key, and the keys without global attention are masked
  (``finfo.min``, an exact zero after the softmax): the sliding-window scores and these
  are normalized together, as the original concatenates the scores of the global keys;
* the output of the global tokens is attention over the whole sequence with the
  ``*_global`` projections, computed for every token and kept where the token is global.

The overlapping chunks of the sliding window are taken with ``unfold`` (the original's
``onnx_export`` path) instead of ``as_strided`` over a view, which has no storage in ONNX.

Both parts of the global attention are quadratic in the sequence length (the original is linear without global tokens);
the exported model is right for any ``attention_mask`` (0: padding, 1: local, 2: global)
and any ``global_attention_mask``. Training mode and ``output_attentions=True`` run the
original code.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def dense_global_self_attention(
    self: Any,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor,
    is_index_masked: torch.Tensor,
    is_index_global_attn: torch.Tensor,
) -> torch.Tensor:
    """The output of ``LongformerSelfAttention`` (``[batch, seq, embed]``) with the global
    attention computed densely (see the module's docstring)."""
    hidden_states = hidden_states.transpose(0, 1)
    seq_len, batch_size, embed_dim = hidden_states.shape
    heads, head_dim, window = self.num_heads, self.head_dim, self.one_sided_attn_window_size
    lowest = torch.finfo(hidden_states.dtype).min

    def per_head(x: torch.Tensor) -> torch.Tensor:  # [seq, batch, embed] -> [batch, seq, heads, head_dim]
        return x.reshape(seq_len, batch_size, heads, head_dim).transpose(0, 1)

    query = per_head(self.query(hidden_states) / math.sqrt(head_dim))
    key = per_head(self.key(hidden_states))
    value = per_head(self.value(hidden_states))

    # sliding-window scores, the padding and global keys removed from the window
    local_scores = self._sliding_chunks_query_key_matmul(query, key, window)
    removed = (attention_mask != 0)[:, :, None, None]
    float_mask = removed.type_as(query).masked_fill(removed, lowest)
    local_scores = local_scores + self._sliding_chunks_query_key_matmul(
        float_mask.new_ones(size=float_mask.size()), float_mask, window
    )
    # every key for every query, kept for the global keys only
    global_key_scores = torch.einsum("blhd,bshd->blhs", query, key)
    global_key_scores = global_key_scores.masked_fill(~is_index_global_attn[:, None, None, :], lowest)
    scores = torch.cat((global_key_scores, local_scores), dim=-1)
    probs = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32)
    probs = probs.masked_fill(is_index_masked[:, :, None, None], 0.0).type_as(scores)

    from_global_keys = torch.matmul(probs[..., :seq_len].transpose(1, 2), value.transpose(1, 2)).transpose(1, 2)
    from_window = self._sliding_chunks_matmul_attn_probs_value(probs[..., seq_len:].contiguous(), value, window)
    output = (from_global_keys + from_window).transpose(0, 1).reshape(seq_len, batch_size, embed_dim)

    # the global tokens attend to the whole sequence with their own projections
    global_query = per_head(self.query_global(hidden_states) / math.sqrt(head_dim)).transpose(1, 2)
    global_key = per_head(self.key_global(hidden_states)).transpose(1, 2)
    global_value = per_head(self.value_global(hidden_states)).transpose(1, 2)
    global_scores = torch.matmul(global_query, global_key.transpose(-1, -2))
    global_scores = global_scores.masked_fill(is_index_masked[:, None, None, :], lowest)
    global_probs = torch.nn.functional.softmax(global_scores, dim=-1, dtype=torch.float32).type_as(global_scores)
    global_output = torch.matmul(global_probs, global_value)  # [batch, heads, seq, head_dim]
    global_output = global_output.permute(2, 0, 1, 3).reshape(seq_len, batch_size, embed_dim)

    output = torch.where(is_index_global_attn.transpose(0, 1)[:, :, None], global_output, output)
    return output.transpose(0, 1)


def _make_dense_global_forward(original: Any) -> Any:
    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        is_index_masked: torch.Tensor | None = None,
        is_index_global_attn: torch.Tensor | None = None,
        is_global_attn: Any = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        if self.training or output_attentions:
            return original(self, hidden_states, attention_mask, is_index_masked, is_index_global_attn,
                            is_global_attn, output_attentions)
        return (dense_global_self_attention(self, hidden_states, attention_mask, is_index_masked,
                                            is_index_global_attn),)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


def _make_chunk_by_unfold(original: Any) -> Any:
    def _chunk(hidden_states: torch.Tensor, window_overlap: int, onnx_export: bool = False) -> torch.Tensor:
        return original(hidden_states, window_overlap, True)

    _chunk.__wrapped__ = original  # type: ignore[attr-defined]
    return _chunk
