"""Checks that a cache survives its pytree flattening: no state silently dropped.

torch.export sees a transformers cache through its pytree flattening (see
:mod:`fx2onnx.patches.caches`): the exported model gets the flattened tensors
and rebuilds the cache from them. A cache layer holding a tensor the
flattening does not know (the indexer keys of a sparse-attention layer, a new
state of a future transformers) is rebuilt without it: the export then fails
far from the cause (``The size of tensor a (seq) must match the size of tensor
b (past_seq + seq)``) or, worse, computes as if that state were empty.

:func:`dropped_cache_state` flattens and rebuilds a cache and lists the tensors
of its layers which did not come back; :func:`check_cache_round_trip` raises
:class:`CacheStateLostError` naming them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree


class CacheStateLostError(TypeError):
    """A cache loses some of its tensors when flattened for torch.export."""


def _layer_tensors(layer: Any) -> dict[str, torch.Tensor]:
    """The non-empty tensors a layer holds, directly or in a dict or list attribute."""
    found: dict[str, torch.Tensor] = {}
    for name, value in vars(layer).items():
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else None
        if items is None:
            items = [(None, value)]
        for key, item in items:
            if isinstance(item, torch.Tensor) and item.numel():
                found[name if key is None else f"{name}[{key!r}]"] = item
    return found


def dropped_cache_state(value: Any, where: str = "cache") -> list[str]:
    """The non-empty tensors of the cache layers in ``value`` which a pytree flatten +
    unflatten round trip loses or reshapes (``"cache.layers[0].indexer_keys (DynamicIndexedLayer)"``).

    The cache classes must be registered (:func:`fx2onnx.register_cache_serialization`);
    a value which is not a registered node gives an empty list.
    """
    node = pytree.SUPPORTED_NODES.get(type(value))
    if node is None or isinstance(value, (list, tuple, dict)):
        return []
    children, context = node.flatten_fn(value)
    lost: list[str] = []
    layers = getattr(value, "layers", None)
    if isinstance(layers, list):
        try:
            rebuilt = node.unflatten_fn(children, context)
        except Exception as exc:  # a layer class the flattening cannot build again
            classes = sorted({type(layer).__name__ for layer in layers})
            return [f"{where} (layers {', '.join(classes)} cannot be rebuilt: {type(exc).__name__}: {exc})"]
        rebuilt_layers = list(getattr(rebuilt, "layers", []) or [])
        for i, layer in enumerate(layers):
            other = _layer_tensors(rebuilt_layers[i]) if i < len(rebuilt_layers) else {}
            for name, tensor in _layer_tensors(layer).items():
                if name not in other or other[name].shape != tensor.shape:
                    lost.append(f"{where}.layers[{i}].{name} ({type(layer).__name__}, shape {tuple(tensor.shape)})")
        return lost
    for i, child in enumerate(children):  # a cache of caches (EncoderDecoderCache)
        lost.extend(dropped_cache_state(child, f"{where}[{i}]"))
    return lost


def check_cache_round_trip(inputs: dict[str, Any]) -> None:
    """Raises :class:`CacheStateLostError` if a cache among ``inputs`` loses tensors when flattened."""
    lost = [item for name, value in inputs.items() for item in dropped_cache_state(value, name)]
    if lost:
        more = f" and {len(lost) - 2} more" if len(lost) > 2 else ""
        raise CacheStateLostError(
            f"Flattening the cache for torch.export loses {', '.join(lost[:2])}{more} (fix: flatten these "
            f"tensors in fx2onnx.patches.caches, the pytree registration of the cache layers): the exported "
            f"model would rebuild the cache without them (a size mismatch at capture, or a model computing "
            f"as if they were empty)."
        )
