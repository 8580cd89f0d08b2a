"""Flattening of model inputs and outputs into the tensors an exported model takes or returns.

The caches of transformers are flattened even when not registered as pytree nodes.

.. code-block:: python

    import torch
    from fx2onnx.flatten import flatten_inputs

    print(len(flatten_inputs((torch.ones(2),), {"mask": [torch.ones(1), None]})))  # 2
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator, Sequence

import torch
from torch.utils import _pytree as pytree

from .patches.caches import register_cache_serialization, standalone_cache_classes, unregister_cache_serialization


def _unflattened_caches(value: Any) -> list[Any]:
    """The leaves of ``value`` which are transformers caches pytree cannot flatten."""
    cache_utils = sys.modules.get("transformers.cache_utils")
    if cache_utils is None or not hasattr(cache_utils, "Cache"):
        # transformers not imported: no cache object can exist
        return []
    classes = (cache_utils.Cache, *standalone_cache_classes())
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, classes)]


@contextlib.contextmanager
def cache_flattening(value: Any) -> Iterator[None]:
    """Registers the transformers caches found in ``value`` as pytree nodes, if needed.

    Nothing happens when ``value`` holds no cache pytree cannot flatten. Otherwise
    :func:`fx2onnx.register_cache_serialization` registers the cache classes for the
    time of the block and the classes it registered are unregistered on exit
    (classes already registered before stay so). A cache class this project does
    not know how to flatten raises a TypeError naming it.
    """
    if not _unflattened_caches(value):
        yield
        return
    done = register_cache_serialization()
    try:
        remaining = _unflattened_caches(value)
        if remaining:
            raise TypeError(
                f"Cannot flatten the cache {type(remaining[0]).__name__!r}: it is not a pytree "
                f"node and fx2onnx does not know how to register it. Register it with "
                f"torch.utils._pytree.register_pytree_node or give its tensors instead."
            )
        yield
    finally:
        unregister_cache_serialization(done)


def flatten_inputs(args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
    """Flattens ``(args, kwargs)`` into the list of leaves an exported model takes.

    Nested lists, tuples, dicts and registered pytree nodes are flattened;
    ``None`` leaves are dropped, like exporters do. The caches of transformers
    (``DynamicCache``...) are flattened even if not registered as pytree nodes
    (see :func:`cache_flattening`): ``[key_0, value_0, key_1, value_1, ...]``.
    """
    value = (tuple(args), dict(kwargs or {}))
    with cache_flattening(value):
        leaves, _ = pytree.tree_flatten(value)
    return [leaf for leaf in leaves if leaf is not None]


def flatten_outputs(outputs: Any) -> list[torch.Tensor]:
    """Flattens eager outputs (tensors, tuples, dicts, ModelOutput, caches) into tensors.

    Caches are flattened like in :func:`flatten_inputs`, registered or not.
    """
    with cache_flattening(outputs):
        leaves, _ = pytree.tree_flatten(outputs)
    flat: list[torch.Tensor] = []
    for leaf in leaves:
        if leaf is None:
            continue
        if isinstance(leaf, (int, float, bool)):
            leaf = torch.tensor(leaf)
        if isinstance(leaf, torch.Tensor):
            flat.append(leaf)
    return flat
