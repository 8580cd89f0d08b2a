"""The states of the linear-attention cache layers of transformers, as pytree children.

State-space and linear-attention models (Mamba, Mamba 2, the Mamba layers of
GraniteMoeHybrid, Jamba, ...) keep no keys and values: their cache layer
(``LinearAttentionLayer`` in ``transformers.cache_utils``, or a hybrid layer
``LinearAttentionAnd...Layer`` holding both) stores, for each of its
``number_of_states`` states, a convolution state (the last ``conv_kernel_size``
inputs of the causal convolution) and a recurrent state (the state of the scan).
Both have fixed shapes once the layer has seen a first pass.

:mod:`fx2onnx.patches.caches` flattens such a layer into these tensors, after its
keys and values if it has any: ``[conv_0, recurrent_0, conv_1, recurrent_1, ...]``
(a state never written contributes nothing). What is not a tensor (which states
exist, the kernel size, whether a previous pass filled the layer) goes into the
context, so that the rebuilt layer takes the same path as the original one: a
layer whose ``has_previous_state`` is True concatenates its convolution state
with the new tokens instead of padding them with zeros.
"""

from __future__ import annotations

from typing import Any

import torch


def is_linear_layer(layer: Any) -> bool:
    """Tells if a cache layer holds convolution or recurrent states."""
    return isinstance(getattr(layer, "conv_states", None), dict) and hasattr(layer, "number_of_states")


def linear_context(layer: Any) -> tuple[Any, ...] | None:
    """Describes the states of a linear-attention layer with hashable values (None for other layers).

    :return: ``(number_of_states, record_past, per_state)`` where ``per_state`` holds,
        for each state, ``(has conv state, has recurrent state, conv_kernel_size,
        has_previous_state)``
    """
    if not is_linear_layer(layer):
        return None
    per_state = tuple(
        (
            bool(layer.is_conv_states_initialized[i]),
            bool(layer.is_recurrent_states_initialized[i]),
            layer.conv_kernel_size[i],
            bool(layer.has_previous_state[i]),
        )
        for i in range(layer.number_of_states)
    )
    return (layer.number_of_states, bool(getattr(layer, "record_past", False)), per_state)


def linear_tensors(layer: Any) -> list[torch.Tensor]:
    """The state tensors of a linear-attention layer in flattening order."""
    tensors: list[torch.Tensor] = []
    if not is_linear_layer(layer):
        return tensors
    for i in range(layer.number_of_states):
        if layer.is_conv_states_initialized[i]:
            tensors.append(layer.conv_states[i])
        if layer.is_recurrent_states_initialized[i]:
            tensors.append(layer.recurrent_states[i])
    return tensors


def linear_names(layer_index: int, context: tuple[Any, ...] | None) -> list[str]:
    """The key names of the tensors :func:`linear_tensors` returns (``conv_0``, ``recurrent_0_1``...)."""
    if context is None:
        return []
    names = []
    for state, (has_conv, has_recurrent, _, _) in enumerate(context[2]):
        suffix = f"{layer_index}" if state == 0 else f"{layer_index}_{state}"
        if has_conv:
            names.append(f"conv_{suffix}")
        if has_recurrent:
            names.append(f"recurrent_{suffix}")
    return names


def linear_count(context: tuple[Any, ...] | None) -> int:
    """The number of tensors a layer described by ``context`` contributes."""
    if context is None:
        return 0
    return sum(int(has_conv) + int(has_recurrent) for has_conv, has_recurrent, _, _ in context[2])


def set_linear_tensors(layer: Any, tensors: list[torch.Tensor], context: tuple[Any, ...]) -> None:
    """Puts the states back into a layer freshly built with ``number_of_states``.

    The tensors are set directly: ``lazy_initialization`` would replace them by
    zeros and mark their addresses static.
    """
    _, record_past, per_state = context
    layer.record_past = record_past
    position = 0
    for state, (has_conv, has_recurrent, kernel_size, has_previous) in enumerate(per_state):
        layer.conv_kernel_size[state] = kernel_size
        layer.has_previous_state[state] = has_previous
        if has_conv:
            layer.conv_states[state] = tensors[position]
            layer.is_conv_states_initialized[state] = True
            position += 1
        if has_recurrent:
            layer.recurrent_states[state] = tensors[position]
            layer.is_recurrent_states_initialized[state] = True
            position += 1
    if tensors and getattr(layer, "device", None) is None:
        layer.dtype, layer.device = tensors[0].dtype, tensors[0].device


def as_hashable(value: Any) -> Any:
    """Lists (a context read back from JSON) as tuples, recursively."""
    if isinstance(value, list):
        return tuple(as_hashable(v) for v in value)
    return value
