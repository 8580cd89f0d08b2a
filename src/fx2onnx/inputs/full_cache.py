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

import copy
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ..flatten import cache_flattening


def _is_sliding(layer: Any) -> bool:
    return bool(getattr(layer, "is_sliding", False)) and getattr(layer, "sliding_window", None) is not None


#: what a sliding-window layer has that its whole-past counterpart does not
_SLIDING_ATTRIBUTES = ("sliding_window", "cumulative_length", "_sliding_window_tensor")


def _whole_class(layer: Any) -> type | None:
    """The whole-past counterpart of a sliding layer's class (``DynamicSlidingWindowLayer`` -> ``DynamicLayer``,
    ``LinearAttentionAndSlidingWindowAttentionLayer`` -> ``LinearAttentionAndFullAttentionLayer``), None if none."""
    from transformers import cache_utils

    name = type(layer).__name__
    whole = "DynamicLayer" if name == "DynamicSlidingWindowLayer" else name.replace("SlidingWindowAttention",
                                                                                    "FullAttention")
    cls = getattr(cache_utils, whole, None) if whole != name else None
    return cls if isinstance(cls, type) and not getattr(cls, "is_sliding", False) else None


def _has_keys(layer: Any) -> bool:
    keys = getattr(layer, "keys", None)
    return isinstance(keys, torch.Tensor) and keys.dim() == 4


def sliding_window_of(cache: Any) -> int | None:
    """The smallest window of the sliding layers of ``cache`` (None: none, or a sliding layer of a class without a
    whole-past counterpart in transformers)."""
    layers = getattr(cache, "layers", None)
    if not layers:
        return None
    sliding = [layer for layer in layers if _is_sliding(layer)]
    if not sliding or any(_whole_class(layer) is None or not _has_keys(layer) for layer in sliding):
        return None
    return min(layer.sliding_window for layer in sliding)


def _whole_layer(layer: Any, past: int, generator: torch.Generator) -> Any:
    """``layer`` holding ``past`` positions: a sliding layer becomes its whole-past counterpart (its other states
    kept), keys and values shorter than ``past`` are drawn at random with their batch, heads and width."""
    if _is_sliding(layer):
        cls = _whole_class(layer)
        whole = cls.__new__(cls)
        whole.__dict__.update({k: v for k, v in vars(layer).items() if k not in _SLIDING_ATTRIBUTES})
        layer = whole
    else:
        layer = copy.copy(layer)
    if _has_keys(layer) and layer.keys.shape[-2] != past:
        keys, values = layer.keys, layer.values
        shape = (*keys.shape[:-2], past, keys.shape[-1])
        layer.keys = torch.randn(shape, generator=generator).to(keys.dtype)
        layer.values = torch.randn((*shape[:-1], values.shape[-1]), generator=generator).to(values.dtype)
    return layer


def _whole_cache(cache: Any, past: int, generator: torch.Generator) -> Any:
    """A copy of ``cache`` whose every layer holds ``past`` positions (:func:`_whole_layer`)."""
    whole = copy.copy(cache)
    whole.layers = [_whole_layer(layer, past, generator) for layer in cache.layers]
    return whole


def _past_length(cache: Any) -> int:
    return max(int(layer.cumulative_length) if _is_sliding(layer) else int(layer.keys.shape[-2])
               for layer in cache.layers if _has_keys(layer))


def _lengthen_states(cache: Any, past: int, specs: Any, generator: torch.Generator) -> Any:
    """``cache`` whose other floating point states along the past (a sparse-attention indexer's keys, ``[batch,
    past, width]``: DeepSeek V3.2, dots3) hold ``past`` positions too, drawn at random; they are found by the
    axes ``specs`` (the cache's dynamic shapes, read from two prefills) names ``past_seq``. ``cache`` itself
    when nothing else runs along the past or the specs do not match its flattening."""
    with cache_flattening(cache):
        leaves, treespec = pytree.tree_flatten(cache)
    flat = [spec for spec in specs if not (isinstance(spec, dict) and "tokens_seen" in spec.values())] \
        if isinstance(specs, list) else []
    if len(flat) != len(leaves) or any(spec is not None and not isinstance(spec, dict) for spec in flat):
        return cache
    fresh, changed = [], False
    for leaf, spec in zip(leaves, flat):
        axes = [axis for axis, label in (spec or {}).items() if label == "past_seq"]
        if axes and leaf.is_floating_point() and any(leaf.shape[axis] != past for axis in axes):
            shape = [past if axis in axes else size for axis, size in enumerate(leaf.shape)]
            leaf, changed = torch.randn(shape, generator=generator).to(leaf.dtype), True
        fresh.append(leaf)
    if not changed:
        return cache
    with cache_flattening(cache):
        return pytree.tree_unflatten(fresh, treespec)


def _lengthen(inputs: dict[str, Any], past: int, generator: torch.Generator, specs: Any = None) -> None:
    """Gives the input set ``inputs`` a past of ``past`` positions (its mask and positions follow); ``specs``: the
    cache's dynamic shapes, naming the other states along the past (:func:`_lengthen_states`)."""
    cache = inputs["past_key_values"]
    batch, seq = inputs["input_ids"].shape
    inputs["past_key_values"] = _lengthen_states(_whole_cache(cache, past, generator), past, specs, generator)
    if "attention_mask" in inputs:
        mask = inputs["attention_mask"]
        inputs["attention_mask"] = torch.ones((batch, past + seq), dtype=mask.dtype)
    if "position_ids" in inputs:
        inputs["position_ids"] = torch.arange(past, past + seq, dtype=inputs["position_ids"].dtype).expand(batch, seq)


def whole_past(input_sets: list[dict[str, Any]], dynamic_shapes: dict[str, Any], config: Any, seed: int = 0) -> bool:
    """Rewrites, in place, input sets whose cache has sliding-window layers into caches of whole-past layers
    (:func:`_whole_cache`: their convolution and recurrent states kept), the last set's past made longer than the
    window so that the check against eager runs past it; drops the count of tokens seen from ``dynamic_shapes``
    (a cache without sliding layers does not carry it). Returns False (nothing changed) for a cache without
    sliding layers or with a sliding layer transformers has no whole-past class for."""
    caches = [inputs.get("past_key_values") for inputs in input_sets]
    windows = [sliding_window_of(cache) for cache in caches]
    if any(window is None for window in windows):
        return False
    generator = torch.Generator().manual_seed(seed)
    for i, (inputs, cache) in enumerate(zip(input_sets, caches)):
        past = _past_length(cache)
        if i == len(input_sets) - 1:
            past = max(past, windows[i] + 3)  # past the window: the mask, not the cache, cuts it
        _lengthen(inputs, past, generator, dynamic_shapes.get("past_key_values"))
    specs = dynamic_shapes.get("past_key_values")
    while isinstance(specs, list) and specs and "tokens_seen" in dict(specs[-1]).values():
        specs.pop()  # the count of tokens seen a cache of sliding layers only carried
    return True

