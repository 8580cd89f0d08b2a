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

The sliding window is computed by :func:`banded_scores` and :func:`banded_context`: chunks of
``w`` queries against the ``3w`` keys around them (three shifted slices of the padded keys), the
band read from the product by a skew of static sizes, instead of the original's overlapping
chunks of ``2w`` copied into place (a dozen in-place copies and symbolic sizes per layer; the
capture of Longformer-base took over five minutes, issue 36). The values are the same (a test
compares them with the original's functions). ``_pad_to_window_size`` pads the sequence to
``window * ceil(seq / window)`` without a branch (:func:`_make_pad_to_window_size`).

Both parts of the global attention are quadratic in the sequence length (the original is linear without global tokens);
the exported model is right for any ``attention_mask`` (0: padding, 1: local, 2: global)
and any ``global_attention_mask``. Training mode and ``output_attentions=True`` run the
original code.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def _skew(x: torch.Tensor, window: int) -> torch.Tensor:
    """``[..., w, 3w] -> [..., w, 2w + 1]``: row ``i`` keeps its columns ``i`` to ``i + 2w`` (its window).

    Row ``i`` of the flattened matrix padded by ``w`` starts at ``i * (3w + 1)``, the element ``(i, i)``:
    read with rows of ``3w + 1``, each row starts on its own diagonal. Only the window (static) is
    in the sizes: nothing to reason about for a symbolic number of chunks."""
    flat = torch.nn.functional.pad(x.flatten(-2), (0, window))
    return flat.unflatten(-1, (window, 3 * window + 1))[..., : 2 * window + 1]


def _unskew(x: torch.Tensor, window: int) -> torch.Tensor:
    """``[..., w, 2w + 1] -> [..., w, 3w]``, the inverse of :func:`_skew`: row ``i`` at columns ``i`` to
    ``i + 2w``, zeros elsewhere."""
    flat = torch.nn.functional.pad(x, (0, window)).flatten(-2)[..., : 3 * window * window]
    return flat.unflatten(-1, (window, 3 * window))


def _to_multiple(x: torch.Tensor, window: int, value: float = 0.0) -> torch.Tensor:
    """``x[rows, seq, ...]`` padded by ``value`` to ``window * ceil(seq / window)`` positions."""
    seq = x.shape[1]
    padding = (0, 0) * (x.dim() - 2) + (0, (seq + window - 1) // window * window - seq)
    return torch.nn.functional.pad(x, padding, value=value)


def _check_multiple(seq: Any, window: int) -> None:
    """Tells torch that ``window * ceil(seq / window)`` is no less than ``seq`` (it cannot prove it): the
    band cut back to ``seq`` positions has ``seq`` for size, not ``min(seq, ...)``."""
    torch._check(seq <= (seq + window - 1) // window * window)


def _windows(x: torch.Tensor, window: int, value: float = 0.0) -> torch.Tensor:
    """``[rows, seq, ...] -> [rows, ceil(seq / w), 3w, ...]``: for the chunk ``c`` of ``w`` positions, the
    positions ``c * w - w`` to ``c * w + 2w - 1`` (``value`` outside the sequence), three shifted slices of
    the padded sequence concatenated (contiguous: no view of an ``unfold`` to reason about)."""
    seq = x.shape[1]
    count = (seq + window - 1) // window
    padding = (0, 0) * (x.dim() - 2) + (window, window + count * window - seq)
    chunks = torch.nn.functional.pad(x, padding, value=value).unflatten(1, (count + 2, window))  # [rows, count + 2, w]
    return torch.cat((chunks[:, :-2], chunks[:, 1:-1], chunks[:, 2:]), dim=2)


def banded_scores(query: torch.Tensor, key: torch.Tensor, window: int) -> torch.Tensor:
    """``query . key`` of every position with the ``2w + 1`` keys around it: ``[batch, seq, heads, 2w + 1]``
    from ``[batch, seq, heads, head_dim]`` (any ``seq``), column ``t`` for the key at ``position - w + t``,
    0 outside the sequence.

    What ``_sliding_chunks_query_key_matmul`` computes (without its ``-inf`` outside the sequence, see
    :func:`banded_key_bias`), with chunks of ``w`` queries against ``3w`` keys instead of overlapping
    chunks of ``2w`` copied into place: one matmul, pads and views, no in-place copy, one symbolic
    quantity (the number of chunks) instead of a dozen sizes derived from the padded length. The
    sequence is padded to a multiple of ``w`` here and cut after."""
    batch, seq, heads, head_dim = query.shape
    _check_multiple(seq, window)
    # batch, heads and chunks in one dimension: a 4D matmul or a flatten of a strided view checks whether the
    # number of chunks is 1, and an example shorter than the window fixed it (the sequence narrowed to [0, w])
    rows = _to_multiple(query.transpose(1, 2).reshape(batch * heads, seq, head_dim), window)
    rows = rows.reshape(-1, window, head_dim)  # [bh * chunks, w, d]
    keys = _windows(key.transpose(1, 2).reshape(batch * heads, seq, head_dim), window).flatten(0, 1)  # [.., 3w, d]
    scores = _skew(torch.bmm(rows, keys.transpose(1, 2)), window)  # [bh * chunks, w, 2w + 1]
    return scores.reshape(batch, heads, -1, 2 * window + 1)[:, :, :seq].transpose(1, 2)


def banded_key_bias(bias: torch.Tensor, window: int) -> torch.Tensor:
    """``bias[batch, seq]`` of every key seen from every position: ``[batch, seq, 2w + 1]``, ``-inf``
    outside the sequence (``_mask_invalid_locations``)."""
    _check_multiple(bias.shape[1], window)
    windows = _windows(bias, window, value=-math.inf)  # [batch, chunks, 3w]
    rows = windows[:, :, None, :].expand(-1, -1, window, -1)
    return _skew(rows, window).reshape(bias.shape[0], -1, 2 * window + 1)[:, : bias.shape[1]]


def banded_context(probs: torch.Tensor, value: torch.Tensor, window: int) -> torch.Tensor:
    """``probs[batch, seq, heads, 2w + 1]`` (laid out as :func:`banded_scores`) times the values around
    each position: ``[batch, seq, heads, head_dim]``, what ``_sliding_chunks_matmul_attn_probs_value``
    computes."""
    batch, seq, heads, head_dim = value.shape
    _check_multiple(seq, window)
    rows = _to_multiple(probs.transpose(1, 2).reshape(batch * heads, seq, 2 * window + 1), window)
    rows = _unskew(rows.reshape(-1, window, 2 * window + 1), window)  # [bh * chunks, w, 3w]
    values = _windows(value.transpose(1, 2).reshape(batch * heads, seq, head_dim), window).flatten(0, 1)
    context = torch.bmm(rows, values)  # [bh * chunks, w, d]
    return context.reshape(batch, heads, -1, head_dim)[:, :, :seq].transpose(1, 2)


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

    # sliding-window scores, the padding and global keys removed from the window (-inf outside the sequence)
    key_bias = torch.zeros_like(attention_mask, dtype=query.dtype).masked_fill(attention_mask != 0, lowest)
    local_scores = banded_scores(query, key, window) + banded_key_bias(key_bias, window)[:, :, None, :]
    # every key for every query, kept for the global keys only
    global_key_scores = torch.einsum("blhd,bshd->blhs", query, key)
    global_key_scores = global_key_scores.masked_fill(~is_index_global_attn[:, None, None, :], lowest)
    scores = torch.cat((global_key_scores, local_scores), dim=-1)
    probs = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32)
    probs = probs.masked_fill(is_index_masked[:, :, None, None], 0.0).type_as(scores)

    from_global_keys = torch.matmul(probs[..., :seq_len].transpose(1, 2), value.transpose(1, 2)).transpose(1, 2)
    from_window = banded_context(probs[..., seq_len:], value, window)
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


def _make_pad_to_window_size(original: Any) -> Any:
    """``LongformerModel._pad_to_window_size`` padding to ``window * ceil(seq / window)`` without a branch,
    the lengths of the mask and of the token types checked equal to the sequence's.

    The original pads by ``(window - seq % window) % window`` when that is positive: every size after it is
    ``seq + Mod(window - Mod(seq, window), window)``, an expression torch does not see as a multiple of the
    window (it assumed the sliding chunks' assertion, a condition on the sequence) and simplifies again for
    every operator of every layer. ``window * ((seq + window - 1) // window)`` is one. The mask's length is
    a symbol of its own unless checked equal to the ids' (one name in ``dynamic_shapes`` is no equality for
    torch): both appeared in the sizes of every layer and torch narrowed the sequence (``[1, 767]``).
    Padding by 0 (a length already a multiple) gives the tensors the original leaves unpadded."""

    def _pad_to_window_size(
        self: Any,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        pad_token_id: int,
    ) -> tuple[Any, ...]:
        window = self.config.attention_window
        window = window if isinstance(window, int) else max(window)
        if window % 2 or attention_mask is None or token_type_ids is None:
            return original(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                            pad_token_id)
        batch_size, seq_len = (input_ids if input_ids is not None else inputs_embeds).shape[:2]
        torch._check(attention_mask.shape[-1] == seq_len, lambda: "attention_mask and the sequence differ in length")
        torch._check(token_type_ids.shape[-1] == seq_len, lambda: "token_type_ids and the sequence differ in length")
        padding_len = (seq_len + window - 1) // window * window - seq_len
        if input_ids is not None:
            input_ids = torch.nn.functional.pad(input_ids, (0, padding_len), value=pad_token_id)
        if position_ids is not None:
            position_ids = torch.nn.functional.pad(position_ids, (0, padding_len), value=pad_token_id)
        if inputs_embeds is not None:
            ids = inputs_embeds.new_full((batch_size, padding_len), self.config.pad_token_id, dtype=torch.long)
            inputs_embeds = torch.cat([inputs_embeds, self.embeddings(ids)], dim=-2)
        attention_mask = torch.nn.functional.pad(attention_mask, (0, padding_len), value=0)
        token_type_ids = torch.nn.functional.pad(token_type_ids, (0, padding_len), value=0)
        return padding_len, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds

    _pad_to_window_size.__wrapped__ = original  # type: ignore[attr-defined]
    return _pad_to_window_size


def _make_unpadded_encoder(original: Any) -> Any:
    """``LongformerEncoder.forward`` running its layers on the sequence without the padding
    ``_pad_to_window_size`` added (the padding tokens are keys masked for every query and their outputs are
    cut after the last layer: the other tokens' outputs do not depend on them).

    The self-attention (:func:`dense_global_self_attention`) pads to a multiple of the window inside the
    sliding window only: every other operator of every layer has the sequence's own length for size, a
    symbol, instead of ``window * ceil(seq / window)``, an expression torch simplifies again at each one.
    Training mode and ``output_attentions=True`` run the original code on the padded sequence, as the
    self-attention does."""

    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        padding_len: Any = 0,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        return_dict: bool = True,
    ) -> Any:
        if self.training or output_attentions or attention_mask is None:
            return original(self, hidden_states, attention_mask, padding_len, output_attentions,
                            output_hidden_states, return_dict)
        length = hidden_states.shape[1] - padding_len
        torch._check(length <= hidden_states.shape[1])  # the padded length is a multiple of the sequence's, never less
        return original(self, hidden_states[:, :length], attention_mask[:, :length], 0, output_attentions,
                        output_hidden_states, return_dict)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward
