"""Recurrent layers of transformers whose Python loop over the sequence becomes one scan.

Like Mamba's selective scan (:mod:`fx2onnx.patches.state_space`), some layers
iterate ``for index in range(seq_len)`` in their CPU path. :func:`torch.export.export`
unrolls the loop and specializes the sequence length (``tracing inferred a static
shape of 3 for dimension inputs['input_ids'].shape[1]``). The patches here compute
the same steps with :func:`torch._higher_order_ops.scan.scan`: one ``scan`` node
whatever the length, an ONNX ``Scan`` once converted. Each step does the
operations of one iteration of the loop, in the same order, so the results are the
ones of eager.

* RWKV's ``rwkv_linear_attention_cpu``: the WKV recurrence with its numerator,
  denominator and running maximum (the CUDA kernel is not used on CPU).
* RecurrentGemma's ``RecurrentGemmaRglru._rnn_scan``: the linear recurrence
  ``h = a * h + x``. Eager takes a shortcut for one token (``h = a * h0 + x``, or
  ``x`` without a state), which is the first step of the loop: the scan is right
  for every length, so the branch on the length goes too.
* xLSTM's ``xLSTMBackend.forward`` in inference mode: chunks of 64 (then 32, 16)
  tokens in parallel, then a loop of single steps over the rest. The patch runs
  the single step (``mlstm_recurrent_step_native``) over every token in one scan:
  the same result for a sequence shorter than the chunk size, the same recurrence
  in another order of operations for a longer one (the chunkwise form is an exact
  rewriting of the steps, equal up to rounding).
* MiniMax's ``MiniMaxLightningAttention.forward`` with a filled cache: the
  linear-attention state ``S = ratio * S + k^T v`` updated token by token in a
  Python loop. The patch runs that loop as one scan; without a cache (the
  prefill, by blocks) the original runs.
* The chunked gated delta rules (Gated DeltaNet, Kimi delta attention): one scan of the
  recurrent step, see :mod:`fx2onnx.patches.delta_rule`.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from .delta_rule import delta_rule_patches
from .registry import Patch, patch_if_imported


def _each_step(parameter: torch.Tensor, steps: Any) -> torch.Tensor:
    """``parameter`` repeated along a new first dimension of ``steps``: a scan's combine
    function takes no closure over tensors, so the parameters travel with the sequence."""
    return parameter.expand(steps, *parameter.shape).contiguous()


def _wkv_step(
    carry: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    x: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    num_state, den_state, max_state = carry
    key, key_first, value, decay = x
    # the output at this position
    max_for_output = torch.maximum(max_state, key_first)
    e1 = torch.exp(max_state - max_for_output)
    e2 = torch.exp(key_first - max_for_output)
    output = (e1 * num_state + e2 * value) / (e1 * den_state + e2)
    # the state for the next position
    max_for_state = torch.maximum(max_state + decay, key)
    e1 = torch.exp(max_state + decay - max_for_state)
    e2 = torch.exp(key - max_for_state)
    return (e1 * num_state + e2 * value, e1 * den_state + e2, max_for_state), output


def wkv_scan(
    time_decay: torch.Tensor,
    time_first: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    state: Any = None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """RWKV's WKV recurrence as one scan over the sequence.

    :param time_decay: ``(hidden,)``, the decay is ``-exp(time_decay)``
    :param time_first: ``(hidden,)``
    :param key: ``(batch, seq, hidden)``
    :param value: ``(batch, seq, hidden)``
    :param state: ``(numerator, denominator, maximum)``, each ``(batch, hidden)``, or None
    :return: the outputs ``(batch, seq, hidden)`` in ``key``'s dtype and the last state
    """
    from torch._higher_order_ops.scan import scan

    if state is None:
        num_state = torch.zeros_like(key[:, 0], dtype=torch.float32)
        den_state = torch.zeros_like(key[:, 0], dtype=torch.float32)
        max_state = torch.zeros_like(key[:, 0], dtype=torch.float32) - 1e38
    else:
        # slices of the model's state (batch, hidden, layers): the carry must be contiguous
        num_state, den_state, max_state = (s.contiguous() for s in state)
    decay = -torch.exp(time_decay)
    keys = key.float().transpose(0, 1)
    xs = (keys, keys + time_first, value.transpose(0, 1), _each_step(decay, keys.shape[0]))
    (num_state, den_state, max_state), outputs = scan(_wkv_step, (num_state, den_state, max_state), xs)
    return outputs.transpose(0, 1).to(key.dtype), [num_state, den_state, max_state]


def _make_rwkv_linear_attention_cpu(original: Any) -> Any:
    def rwkv_linear_attention_cpu(
        time_decay: torch.Tensor,
        time_first: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        state: Any = None,
        return_state: bool = False,
    ) -> Any:
        output, last = wkv_scan(time_decay, time_first, key, value, state)
        return output, (last if return_state or state is not None else None)

    rwkv_linear_attention_cpu.__wrapped__ = original  # type: ignore[attr-defined]
    return rwkv_linear_attention_cpu


def _linear_step(state: torch.Tensor, x: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    gate, value = x
    state = gate * state + value
    return state, state.clone()


def linear_recurrence_scan(
    gate: torch.Tensor, values: torch.Tensor, initial: torch.Tensor | None, acc_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``h_t = gate_t * h_{t-1} + values_t`` over dimension 1 as one scan, accumulated in ``acc_dtype``.

    :param gate: ``(batch, seq, width)``
    :param values: ``(batch, seq, width)``
    :param initial: ``(batch, width)`` or None (zeros)
    :return: every state ``(batch, seq, width)`` in ``values``' dtype and the last one in ``acc_dtype``
    """
    from torch._higher_order_ops.scan import scan

    if initial is None:
        initial = torch.zeros(values[:, 0].shape, dtype=acc_dtype, device=values.device)
    xs = (gate.type(acc_dtype).transpose(0, 1), values.type(acc_dtype).transpose(0, 1))
    last, states = scan(_linear_step, initial.to(acc_dtype).contiguous(), xs)
    return states.transpose(0, 1).type(values.dtype), last


def _make_rnn_scan(original: Any) -> Any:
    def _rnn_scan(
        self: Any,
        hidden_states: torch.Tensor,
        recurrent_gate: torch.Tensor,
        reset: torch.Tensor,
        recurrent_states: torch.Tensor | None,
        acc_dtype: torch.dtype = torch.float32,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        recurrent_gate = recurrent_gate * ~reset
        return linear_recurrence_scan(recurrent_gate, hidden_states, recurrent_states, acc_dtype)

    _rnn_scan.__wrapped__ = original  # type: ignore[attr-defined]
    return _rnn_scan


def mlstm_scan(
    step: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    igate: torch.Tensor,
    fgate: torch.Tensor,
    initial: tuple[Any, Any, Any],
    eps: float,
    dtype_state: torch.dtype,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The mLSTM recurrence, ``step`` applied to every token in one scan.

    :param step: xLSTM's ``mlstm_recurrent_step_native``
    :param query: ``(batch, heads, seq, dqk)``, ``key`` too, ``value`` is ``(batch, heads, seq, dhv)``
    :param igate: ``(batch, heads, seq)``, ``fgate`` too
    :param initial: the cell ``(batch, heads, dqk, dhv)``, normalizer ``(batch, heads, dqk)`` and
        max ``(batch, heads, 1)`` states, each None for zeros
    :return: the hidden states ``(batch, heads, seq, dhv)`` and the last states
    """
    from torch._higher_order_ops.scan import scan

    batch, heads, _, dqk = key.shape
    dhv = value.shape[-1]
    shapes = ((batch, heads, dqk, dhv), (batch, heads, dqk), (batch, heads, 1))
    carry = tuple(
        torch.zeros(shape, device=key.device, dtype=torch.float32) if state is None
        else state.to(dtype_state).contiguous()
        for state, shape in zip(initial, shapes)
    )

    def one_token(states: Any, x: Any) -> Any:
        q, k, v, i, f = x
        h, states = step(q, k, v, i, f, *states, eps=eps, dtype_state=dtype_state)
        return tuple(states), h

    xs = (
        query.permute(2, 0, 1, 3), key.permute(2, 0, 1, 3), value.permute(2, 0, 1, 3),
        igate.permute(2, 0, 1).unsqueeze(-1), fgate.permute(2, 0, 1).unsqueeze(-1),
    )
    last, hidden = scan(one_token, carry, xs)
    return hidden.permute(1, 2, 0, 3), last


def _make_xlstm_backend_forward(original: Any) -> Any:
    def forward(
        self: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        igate: torch.Tensor,
        fgate: torch.Tensor,
        c_initial: torch.Tensor | None = None,
        n_initial: torch.Tensor | None = None,
        m_initial: torch.Tensor | None = None,
        return_last_states: bool | None = None,
        mode: Any = None,
    ) -> Any:
        mode = self.config.mode if mode is None else mode
        if "inference" not in mode:
            return original(self, query, key, value, igate, fgate, c_initial, n_initial, m_initial,
                            return_last_states, mode)
        dtype_state = getattr(torch, self.config.inference_state_dtype)
        return mlstm_scan(self.step_kernel_fn, query, key, value, igate, fgate,
                          (c_initial, n_initial, m_initial), self.config.eps, dtype_state)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


def _lightning_step(state: torch.Tensor, x: Any) -> tuple[torch.Tensor, torch.Tensor]:
    query, key, value, ratio = x  # (batch, heads, 1, dim) each, ratio (heads, 1, 1)
    state = ratio * state + torch.matmul(key.transpose(-1, -2), value)
    return state, torch.matmul(query, state)


def lightning_decode_scan(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, ratio: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """MiniMax's token-by-token linear attention as one scan.

    :param query: ``(batch, heads, seq, dim)``, ``key`` and ``value`` too
    :param ratio: ``(heads, 1, 1)``, the decay of the state per token
    :param state: ``(batch, heads, dim, dim)``, the cached ``K^T V``
    :return: the outputs ``(batch, heads, seq, dim)`` and the last state
    """
    from torch._higher_order_ops.scan import scan

    seq = query.shape[2]
    xs = tuple(t.unsqueeze(3).permute(2, 0, 1, 3, 4) for t in (query, key, value))
    xs = (*xs, _each_step(ratio, seq))
    last, outputs = scan(_lightning_step, state.contiguous(), xs)
    return outputs.squeeze(3).permute(1, 2, 0, 3), last


def _make_lightning_forward(original: Any) -> Any:
    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        position_embeddings: Any,
        attention_mask: torch.Tensor | None,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> Any:
        state = past_key_values.get_linear_cache(self.layer_idx) if past_key_values is not None else None
        if not isinstance(state, torch.Tensor):
            return original(self, hidden_states, position_embeddings, attention_mask, past_key_values, **kwargs)
        module = importlib.import_module(type(self).__module__)
        batch_size, seq_len, _ = hidden_states.shape
        qkv_states = self.act_fn(self.qkv_proj(hidden_states))
        qkv_states = module.apply_mask_to_padding_states(qkv_states, attention_mask)
        qkv_states = qkv_states.reshape(batch_size, seq_len, self.num_attention_heads, 3 * self.head_dim)
        query, key, value = (t.transpose(1, 2) for t in torch.split(qkv_states, self.head_dim, dim=3))
        attn_output, state = lightning_decode_scan(query, key, value, torch.exp(-self.slope_rate), state)
        attn_output = attn_output.transpose(1, 2).reshape(batch_size, seq_len, self.num_attention_heads * self.head_dim)
        attn_output = self.norm(attn_output)
        attn_output = torch.sigmoid(self.output_gate(hidden_states)) * attn_output
        attn_output = self.out_proj(attn_output)
        past_key_values.set_linear_cache(self.layer_idx, state)
        return attn_output, state

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


def recurrence_patches() -> list[Patch]:
    """The patches of the recurrent layers looping over the sequence in Python, for the modeling
    files already imported (building the model imports its own)."""
    return [
        *patch_if_imported(
            "transformers.models.rwkv.modeling_rwkv", "rwkv_linear_attention_cpu",
            name="rwkv.rwkv_linear_attention_cpu",
            make=_make_rwkv_linear_attention_cpu,
            expected_args=("time_decay", "time_first", "key", "value", "state", "return_state"),
            doc="the WKV recurrence's Python loop over the sequence as one torch scan (ONNX Scan), "
            "so that the sequence length stays dynamic",
        ),
        *patch_if_imported(
            "transformers.models.recurrent_gemma.modeling_recurrent_gemma", "RecurrentGemmaRglru._rnn_scan",
            name="RecurrentGemmaRglru._rnn_scan",
            make=_make_rnn_scan,
            expected_args=("self", "hidden_states", "recurrent_gate", "reset", "recurrent_states", "acc_dtype"),
            doc="the linear recurrence's Python loop over the sequence (and its one-token shortcut) "
            "as one torch scan (ONNX Scan), so that the sequence length stays dynamic",
        ),
        *patch_if_imported(
            "transformers.models.xlstm.modeling_xlstm", "xLSTMBackend.forward",
            name="xLSTMBackend.forward",
            make=_make_xlstm_backend_forward,
            expected_args=("self", "query", "key", "value", "igate", "fgate", "c_initial", "n_initial",
                           "m_initial", "return_last_states", "mode"),
            doc="in inference mode, the mLSTM's chunks and Python loop over the sequence as one torch "
            "scan of its single step (ONNX Scan), so that the sequence length stays dynamic",
        ),
        *patch_if_imported(
            "transformers.models.minimax.modeling_minimax", "MiniMaxLightningAttention.forward",
            name="MiniMaxLightningAttention.forward",
            make=_make_lightning_forward,
            expected_args=("self", "hidden_states", "position_embeddings", "attention_mask", "past_key_values"),
            doc="with a filled cache, the lightning attention's Python loop over the tokens as one torch "
            "scan (ONNX Scan), so that the sequence length stays dynamic",
        ),
        *delta_rule_patches(),
    ]
