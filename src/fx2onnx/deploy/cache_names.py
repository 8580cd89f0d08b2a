"""The names of the cache states beside keys and values, as transformers.js names them.

:func:`fx2onnx.to_onnx` names the states of a linear-attention or state-space layer after the flattening of
:mod:`fx2onnx.patches.linear_cache`: ``past_key_values_conv_3``, ``past_key_values_recurrent_3`` (the states of
layer 3; ``conv_3_1`` for a layer's second state). transformers.js reads them as ``past_conv.3`` and, for the
recurrent state, ``past_ssm.3`` in the Mamba families (Granite hybrids, Falcon-H1, Nemotron-H: a configuration with
``mamba_*`` or ``ssm_state_size`` fields) or ``past_recurrent.3`` in the gated delta-rule ones (Qwen3-Next,
Qwen3.5); the outputs are ``present_conv.3``... The generation loop reads the pairs from the model, not the names
(:mod:`fx2onnx.runtime.generate` starts the states named so at zero).

.. code-block:: python

    from fx2onnx.deploy.cache_names import state_names

    print(state_names("past_key_values_recurrent_3", mamba=True))  # ('past_ssm.3', 'present_ssm.3')
"""

from __future__ import annotations

import re
from typing import Any

_STATE = re.compile(r"^(?:past_key_values|cache_params)_(conv|recurrent)_(\d+)(?:_(\d+))?$")


def is_mamba_config(config: Any) -> bool:
    """Tells if a configuration describes Mamba layers (their recurrent state is transformers.js' ``ssm``)."""
    keys = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return any(k.startswith("mamba_") or k == "ssm_state_size" for k in keys)


def state_names(past: str, mamba: bool = False) -> tuple[str, str] | None:
    """``(input name, output name)`` transformers.js gives the cache input ``past`` (a convolution or recurrent
    state as :func:`fx2onnx.to_onnx` names it), None for another input (a key, a value)."""
    match = _STATE.match(past)
    if match is None:
        return None
    kind, layer, state = match.groups()
    if kind == "recurrent":
        kind = "ssm" if mamba else "recurrent"
    suffix = f"{layer}.{state}" if state else layer
    return f"past_{kind}.{suffix}", f"present_{kind}.{suffix}"


def state_present_name(past: str) -> str | None:
    """The output paired with a state input named as transformers.js names it: ``past_conv.3`` ->
    ``present_conv.3``; None for another input."""
    return "present_" + past[len("past_"):] if re.match(r"^past_(conv|ssm|recurrent)\.\d", past) else None
