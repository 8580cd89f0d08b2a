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
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Patch


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
    # the combine function takes no closure: the parameters travel with the sequence
    xs = (keys, keys + time_first, value.transpose(0, 1), decay.expand(keys.shape[0], *decay.shape).contiguous())
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


def recurrence_patches() -> list[Patch]:
    """The patches of the recurrent layers looping over the sequence in Python."""
    return [
        Patch(
            name="rwkv.rwkv_linear_attention_cpu",
            kind="transformers",
            target="transformers.models.rwkv.modeling_rwkv.rwkv_linear_attention_cpu",
            make=_make_rwkv_linear_attention_cpu,
            expected_args=("time_decay", "time_first", "key", "value", "state", "return_state"),
            doc="the WKV recurrence's Python loop over the sequence as one torch scan (ONNX Scan), "
            "so that the sequence length stays dynamic",
        ),
        Patch(
            name="RecurrentGemmaRglru._rnn_scan",
            kind="transformers",
            target="transformers.models.recurrent_gemma.modeling_recurrent_gemma.RecurrentGemmaRglru._rnn_scan",
            make=_make_rnn_scan,
            expected_args=("self", "hidden_states", "recurrent_gate", "reset", "recurrent_states", "acc_dtype"),
            doc="the linear recurrence's Python loop over the sequence (and its one-token shortcut) "
            "as one torch scan (ONNX Scan), so that the sequence length stays dynamic",
        ),
    ]
