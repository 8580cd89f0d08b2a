"""A decoder's sliding-window layers exported over the whole past, the window applied by the mask.

transformers' ``DynamicSlidingWindowLayer`` keeps the last ``sliding_window - 1`` positions of a layer and
counts every token it has seen. Captured from such a cache, the exported decoder took the sliding layers'
past and the full layers' past as one dimension (they are equal in any example shorter than the window), and
past the window its declared shapes were wrong: onnxruntime refused to run it (``Shape mismatch attempting to
re-use buffer``) in every client. A folder's decoder is therefore captured with every layer a ``DynamicLayer``
holding the whole past: the sliding layers attend to the last ``sliding_window`` positions through their
mask (transformers' ``sliding_window`` mask functions read the positions, not the cache's length), every
present grows by the new tokens and a client feeds it back as it does for a full layer. The cost is the
memory of a full layer's cache for a sliding layer, as in optimum's and transformers.js' exports.

.. code-block:: python

    import transformers
    from fx2onnx.inputs.folder_inputs import task_inputs
    from fx2onnx.inputs.full_cache import whole_past

    config = transformers.Gemma3TextConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, vocab_size=99, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"])
    inputs, inputs2, shapes = task_inputs(config, "text-generation", with_cache=True)
    print(whole_past([inputs, inputs2], shapes, config))  # True
"""

from __future__ import annotations

from typing import Any

import torch


def _is_sliding(layer: Any) -> bool:
    return bool(getattr(layer, "is_sliding", False)) and getattr(layer, "sliding_window", None) is not None


def _dynamic_layer(keys: torch.Tensor, values: torch.Tensor) -> Any:
    from transformers.cache_utils import DynamicLayer

    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


def sliding_window_of(cache: Any) -> int | None:
    """The smallest window of the sliding layers of ``cache`` (None: none, or a layer of another kind than keys
    and values)."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer and not _is_sliding(layer) for layer in layers):
        return None
    windows = [layer.sliding_window for layer in layers if _is_sliding(layer)]
    return min(windows) if windows else None


def _whole_cache(cache: Any, past: int, generator: torch.Generator) -> Any:
    """A ``DynamicCache`` of ``DynamicLayer`` of ``past`` positions: the tensors of a layer already that long are
    kept, the others (a sliding layer cut to its window) drawn at random with their batch, heads and width."""
    from transformers.cache_utils import DynamicCache

    layers = []
    for layer in cache.layers:
        keys, values = layer.keys, layer.values
        if keys.shape[-2] != past:
            shape = (*keys.shape[:-2], past, keys.shape[-1])
            keys = torch.randn(shape, generator=generator).to(keys.dtype)
            values = torch.randn((*shape[:-1], values.shape[-1]), generator=generator).to(values.dtype)
        layers.append(_dynamic_layer(keys, values))
    whole = DynamicCache()
    whole.layers = layers
    return whole


def _past_length(cache: Any) -> int:
    return max(int(layer.cumulative_length) if _is_sliding(layer) else int(layer.keys.shape[-2])
               for layer in cache.layers)


def _lengthen(inputs: dict[str, Any], past: int, generator: torch.Generator) -> None:
    """Gives the input set ``inputs`` a past of ``past`` positions (its mask and positions follow)."""
    cache = inputs["past_key_values"]
    batch, seq = inputs["input_ids"].shape
    inputs["past_key_values"] = _whole_cache(cache, past, generator)
    if "attention_mask" in inputs:
        mask = inputs["attention_mask"]
        inputs["attention_mask"] = torch.ones((batch, past + seq), dtype=mask.dtype)
    if "position_ids" in inputs:
        inputs["position_ids"] = torch.arange(past, past + seq, dtype=inputs["position_ids"].dtype).expand(batch, seq)


def whole_past(input_sets: list[dict[str, Any]], dynamic_shapes: dict[str, Any], config: Any, seed: int = 0) -> bool:
    """Rewrites, in place, input sets whose cache has sliding-window layers into caches of whole-past layers
    (:func:`_whole_cache`), the last set's past made longer than the window so that the check against eager
    runs past it; drops the count of tokens seen from ``dynamic_shapes`` (a cache without sliding layers does
    not carry it). Returns False (nothing changed) for a cache without sliding layers or with states other than
    keys and values."""
    caches = [inputs.get("past_key_values") for inputs in input_sets]
    windows = [sliding_window_of(cache) for cache in caches]
    if any(window is None for window in windows):
        return False
    generator = torch.Generator().manual_seed(seed)
    for i, (inputs, cache) in enumerate(zip(input_sets, caches)):
        past = _past_length(cache)
        if i == len(input_sets) - 1:
            past = max(past, windows[i] + 3)  # past the window: the mask, not the cache, cuts it
        _lengthen(inputs, past, generator)
    specs = dynamic_shapes.get("past_key_values")
    if isinstance(specs, list):
        count = sum(len(layer_tensors(cache)) for cache in [input_sets[0]["past_key_values"]])
        dynamic_shapes["past_key_values"] = specs[:count]
    return True


def layer_tensors(cache: Any) -> list[torch.Tensor]:
    """The keys and values of every layer of a cache of ``DynamicLayer``, as the cache flattens."""
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]
