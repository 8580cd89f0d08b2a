"""Example inputs of a checkpoint's model, from its config and task (the command line's export of a folder)."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .decoder import _decoder_inputs, _dynamic_shapes
from .model_cache import NoCacheReturned, PrefillError, model_cache_inputs

#: the tasks an export from a checkpoint supports, and the class name endings implying them
TASK_SUFFIXES = {"text-generation": ("ForCausalLM", "LMHeadModel")}


def infer_task(config: Any) -> str:
    """The task of a config, from the class names in its ``architectures``."""
    architectures = getattr(config, "architectures", None) or []
    for task, suffixes in TASK_SUFFIXES.items():
        if any(a.endswith(suffixes) for a in architectures):
            return task
    raise ValueError(
        f"Cannot infer the task of architectures {architectures}: give --task, one of {sorted(TASK_SUFFIXES)}."
    )


class NoCacheDecoding(ValueError):
    """The causal LM cannot decode new tokens after a transformers cache (no cache argument, no cache returned, a
    forward reading the whole sequence again): its folder's decoder runs without a cache."""


#: the arguments of older models carrying their states in their own structures
_OTHER_STATES = ("mems", "cache", "state", "past_buckets_states")


def refuse_without_cache_argument(config: Any) -> None:
    """Raises ``ValueError`` (one line) when the class ``config.architectures`` names takes no cache argument
    (OpenAI GPT, CPM-Ant's tuple of past states...): :class:`NoCacheDecoding`, such a folder exports without a
    cache."""
    import transformers  # deferred: heavy

    architectures = getattr(config, "architectures", None) or []
    cls = getattr(transformers, architectures[0], None) if architectures else None
    forward = getattr(cls, "forward", None)
    if forward is None:
        return
    parameters = inspect.signature(forward).parameters
    if not {"past_key_values", "cache_params"} & set(parameters):
        own = next((f"its states as {name!r}, not a transformers cache" for name in _OTHER_STATES
                    if name in parameters), "no cache")
        raise NoCacheDecoding(f"{cls.__name__}.forward takes {own} (no past_key_values argument): its folder "
                              "cannot generate with a cache")


def task_inputs(
    config: Any, task: str, with_cache: bool = False, dtype: torch.dtype = torch.float32, seed: int = 0
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Two input sets of other shapes and the dynamic shapes (named dimensions) for ``task``.

    ``text-generation``: ``input_ids``, ``attention_mask``, ``position_ids`` and, with a
    cache, ``past_key_values`` in ``dtype``, batch and lengths dynamic: the cache the model returns after a
    prefill (:mod:`fx2onnx.inputs.model_cache`: latent keys, convolution and recurrent states included), or,
    when the model cannot run one, a cache of keys and values read from the configuration.
    """
    if task not in TASK_SUFFIXES:
        raise ValueError(f"Task {task!r} is not supported from a checkpoint: use one of {sorted(TASK_SUFFIXES)}.")
    if with_cache:
        refuse_without_cache_argument(config)
        try:
            return model_cache_inputs(config, dtype=dtype, seed=seed)
        except NoCacheReturned as e:  # the model ran, its states are not a cache it returns (RWKV, RecurrentGemma)
            raise NoCacheDecoding(str(e)) from None
        except PrefillError:
            pass  # the cache of keys and values the configuration describes
    generator = torch.Generator().manual_seed(seed)
    sets = []
    for batch, seq, past in ((2, 3, 5), (3, 4, 7)):
        inputs = _decoder_inputs(config, batch, seq, past, with_cache=with_cache, position_ids=True, generator=generator)
        cache = inputs.get("past_key_values")
        if cache is not None and dtype != torch.float32:
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys.to(dtype), layer.values.to(dtype)
        sets.append(inputs)
    return sets[0], sets[1], _dynamic_shapes(sets[0], config)
