"""The indexer keys of the indexed cache layers of transformers, as pytree children.

Models with a sparse-attention indexer (DeepSeek V3.2, GLM MoE DSA, AXK2...)
keep, besides the keys and values of a layer, the keys of their indexer:
``DynamicIndexedLayer.indexer_keys`` (``[batch, past_seq, index_head_dim]``,
grown by concatenation) and, for some models, ``indexer_position_ids``
(``[position_dims, batch, past_seq]``). A flattening that keeps only the keys
and values rebuilds the layer with an empty indexer cache: the indexer then
scores the new tokens only while the attention mask covers the past ones too,
and torch.export fails with ``The size of tensor a (seq) must match the size of
tensor b (past_seq + seq)``.

:mod:`fx2onnx.patches.caches` flattens such a layer into these tensors after
its keys and values (``indexer_keys_<i>``, ``indexer_positions_<i>``); which
ones exist goes into the context. The functions follow those of
:mod:`fx2onnx.patches.linear_cache`: ``indexer_context`` (hashable description),
``indexer_tensors`` (children), ``indexer_names`` (their keys),
``indexer_count`` and ``set_indexer_tensors`` (the rebuilt layer).
"""

from __future__ import annotations

from typing import Any

import torch

#: the tensor attributes of an indexed layer, in flattening order, and their key prefixes
INDEXER_ATTRIBUTES = (("indexer_keys", "indexer_keys"), ("indexer_position_ids", "indexer_positions"))


def is_indexed_layer(layer: Any) -> bool:
    """Tells if a cache layer holds an indexer cache (``update_indexer``)."""
    return hasattr(layer, "indexer_keys") and callable(getattr(layer, "update_indexer", None))


def indexer_context(layer: Any) -> tuple[bool, ...] | None:
    """Which indexer tensors a layer holds (one bool per :data:`INDEXER_ATTRIBUTES`), None for other layers."""
    if not is_indexed_layer(layer):
        return None
    return tuple(isinstance(getattr(layer, attr, None), torch.Tensor) for attr, _ in INDEXER_ATTRIBUTES)


def indexer_tensors(layer: Any) -> list[torch.Tensor]:
    """The indexer tensors of a layer in flattening order (none for other layers)."""
    context = indexer_context(layer)
    if context is None:
        return []
    return [getattr(layer, attr) for (attr, _), present in zip(INDEXER_ATTRIBUTES, context) if present]


def indexer_names(layer_index: int, context: tuple[bool, ...] | None) -> list[str]:
    """The key names of the tensors :func:`indexer_tensors` returns (``indexer_keys_0``...)."""
    if context is None:
        return []
    return [f"{prefix}_{layer_index}" for (_, prefix), present in zip(INDEXER_ATTRIBUTES, context) if present]


def indexer_count(context: tuple[bool, ...] | None) -> int:
    """The number of tensors a layer described by ``context`` contributes."""
    return 0 if context is None else sum(int(p) for p in context)


def set_indexer_tensors(layer: Any, tensors: list[torch.Tensor], context: tuple[bool, ...]) -> None:
    """Puts the indexer tensors back into a freshly built layer, marked initialized
    (``update_indexer`` then concatenates the new keys to them)."""
    position = 0
    for (attr, _), present in zip(INDEXER_ATTRIBUTES, context):
        if present:
            setattr(layer, attr, tensors[position])
            position += 1
    keys = getattr(layer, "indexer_keys", None)
    if isinstance(keys, torch.Tensor):
        layer.indexer_dtype, layer.indexer_device = keys.dtype, keys.device
        layer.is_indexer_initialized = True
