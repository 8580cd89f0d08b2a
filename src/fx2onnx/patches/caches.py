"""Registers the cache classes of transformers as pytree nodes.

:func:`torch.export.export` only accepts inputs it can flatten into tensors.
With transformers 5, ``DynamicCache`` is not a pytree node; once registered,
``dynamic_shapes`` can be given for its tensors. The flattening order is the
one of :mod:`fx2onnx.zoo`:

* ``DynamicCache``: ``[key_0, value_0, key_1, value_1, ...]`` (layers without
  tensors, such as KV-sharing ``DummyLayer``, contribute nothing; the
  linear-attention layers of state-space models add their convolution and
  recurrent states, see :mod:`fx2onnx.patches.linear_cache`),
* ``StaticCache``: ``[key_0, value_0, length_0, key_1, ...]`` where ``length_i``
  is the tensor ``cumulative_length`` of the layer (positions already written),
* ``EncoderDecoderCache``: ``[self_attention_cache, cross_attention_cache]``,
* a subclass of ``DynamicCache`` defined in a modeling file imported so far
  (``MiniMaxCache``): its layers like ``DynamicCache``, then the tensors of its
  list attributes (``linear_cache``: a tensor or ``[]`` per layer), the places of
  the empty entries kept in the context.

A sliding-window layer (``DynamicSlidingWindowLayer``) keeps only its last
``sliding_window - 1`` positions but counts every token it has seen
(``cumulative_length``): the masks and the positions depend on that count. The
count is read from the length of the first full-attention layer of the cache
(hybrid caches: Gemma 2, Gemma 3, every ``layer_types`` mixing sliding and full
attention). A cache made only of sliding layers (Mistral) has no such layer: its
flattening ends with ``tokens_seen``, an empty tensor of shape ``(0, count)``
whose second dimension is the count (:func:`carries_token_count`), dynamic like
the cache length, so the exported model is right on both sides of the window.

The unflatten functions rebuild the layers with their tensors set directly,
without ``lazy_initialization``: transformers' own helper
(``transformers.integrations.executorch.register_dynamic_cache_export_support``)
rebuilds the cache through ``DynamicLayer.update``, whose lazy initialization
creates ``torch.tensor([])`` constants which make torch.onnx.export fail at its
decomposition step (``Constant tensor lifted_tensor_... is not in the constants
dictionary``). A class already registered (by transformers or by the user) is
kept as it is and not unregistered later.

.. code-block:: python

    import torch
    from transformers.cache_utils import DynamicCache
    from fx2onnx import register_cache_serialization, unregister_cache_serialization

    done = register_cache_serialization()
    cache = DynamicCache([(torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4))])
    leaves, spec = torch.utils._pytree.tree_flatten(cache)
    assert len(leaves) == 2
    unregister_cache_serialization(done)
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from .indexed_cache import indexer_context, indexer_count, indexer_names, indexer_tensors, set_indexer_tensors
from .linear_cache import (
    as_hashable,
    linear_context,
    linear_count,
    linear_names,
    linear_tensors,
    set_linear_tensors,
)

_CACHE_MODULE = "transformers.cache_utils"


def _layer_context(layer: Any) -> tuple[Any, ...]:
    """Describes a layer with hashable values: class name, constructor arguments, which
    tensors it holds (keys and values, a length, the states of a linear-attention layer)."""
    cls = type(layer)
    # a layer class of a model's file (a subclass of a transformers layer) is named with its module
    name = cls.__name__ if cls.__module__ == _CACHE_MODULE else f"{cls.__module__}:{cls.__qualname__}"
    return (
        name,
        getattr(layer, "sliding_window", None),
        getattr(layer, "max_cache_len", None),
        getattr(layer, "keys", None) is not None,
        isinstance(getattr(layer, "cumulative_length", None), torch.Tensor),
        linear_context(layer),
        indexer_context(layer),
    )


def _make_layer(module: Any, context: tuple[Any, ...]) -> Any:
    class_name, sliding_window, max_cache_len = context[:3]
    if ":" in class_name:
        module_name, class_name = class_name.split(":")
        module = importlib.import_module(module_name)
    cls = getattr(module, class_name)
    kwargs = {}
    if sliding_window is not None:
        kwargs["sliding_window"] = sliding_window
    if max_cache_len is not None:
        kwargs["max_cache_len"] = max_cache_len
    linear = context[5] if len(context) > 5 else None
    if linear is not None:
        kwargs["number_of_states"] = linear[0]
    return cls(**kwargs)


def _set_tensors(layer: Any, keys: torch.Tensor, values: torch.Tensor, length: Any = None) -> None:
    layer.keys, layer.values = keys, values
    layer.dtype, layer.device = keys.dtype, keys.device
    layer.is_initialized = True
    if length is not None:
        # static layers: a tensor, the number of positions already written
        layer.cumulative_length = length
    elif isinstance(getattr(layer, "cumulative_length", None), int):
        # dynamic sliding layers: the number of tokens seen so far, set again by
        # _set_tokens_seen once every layer is rebuilt
        layer.cumulative_length = keys.shape[-2]


def _is_dynamic_sliding(layer: Any) -> bool:
    # an int in eager, a SymInt while exporting; static layers hold a tensor
    length = getattr(layer, "cumulative_length", None)
    return getattr(layer, "sliding_window", None) is not None and isinstance(length, (int, torch.SymInt))


def _tokens_seen(layers: list[Any]) -> Any:
    """The number of tokens a cache has seen, read from the first full-attention layer
    holding tensors (None without one). Full layers keep every position."""
    for layer in layers:
        if getattr(layer, "sliding_window", None) is None and getattr(layer, "keys", None) is not None:
            if not isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
                return layer.keys.shape[-2]
    return None


def _set_tokens_seen(layers: list[Any], carried: Any = None) -> None:
    """Sliding layers count the tokens seen like the full layers of the same cache, or
    ``carried``, the count a cache of sliding layers only flattens apart."""
    seen = _tokens_seen(layers) if carried is None else carried
    if seen is None:
        return
    for layer in layers:
        if _is_dynamic_sliding(layer) and getattr(layer, "keys", None) is not None:
            layer.cumulative_length = seen


def _carried_count(layers: list[Any]) -> Any:
    """The number of tokens seen by a cache whose tensors cannot tell it (sliding
    layers only, one of them holding tensors), None for any other cache: the
    flattening carries it as the length of an empty tensor."""
    if _tokens_seen(layers) is not None:
        return None
    for layer in layers:
        if _is_dynamic_sliding(layer) and getattr(layer, "keys", None) is not None:
            return layer.cumulative_length
    return None


def _count_tensor(cache: Any, count: Any) -> torch.Tensor:
    """The empty tensor of shape ``(0, count)``, kept on the cache: torch.export flattens
    an input several times and finds its dynamic dimensions by the tensor's identity."""
    held = getattr(cache, "_fx2onnx_tokens_seen", None)
    if held is not None and held[0] is count:
        return held[1]
    first = next(layer for layer in cache.layers if getattr(layer, "keys", None) is not None)
    tensor = first.keys.new_zeros((0, count), dtype=torch.int64)
    cache._fx2onnx_tokens_seen = (count, tensor)
    return tensor


def carries_token_count(cache: Any) -> bool:
    """Tells if the flattening of ``cache`` ends with its ``tokens_seen`` tensor.

    A cache made only of sliding-window layers keeps the last ``sliding_window - 1``
    positions: its tensors do not tell how many tokens it has seen, which its
    positions and masks depend on. That count travels as the second dimension of
    an empty tensor of shape ``(0, tokens_seen)``, an input and an output of the
    exported model, dynamic like the cache length.
    """
    return _carried_count(list(getattr(cache, "layers", []) or [])) is not None


# DynamicCache, StaticCache: a list of layers


def _flatten_layers(cache: Any) -> tuple[list[torch.Tensor], Any]:
    children: list[torch.Tensor] = []
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None:
            children.extend([layer.keys, layer.values])
            if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
                children.append(layer.cumulative_length)
        # state-space / linear-attention layers: convolution and recurrent states
        children.extend(linear_tensors(layer))
        # sparse-attention indexer layers: the indexer keys
        children.extend(indexer_tensors(layer))
    count = _carried_count(cache.layers)
    if count is not None:
        children.append(_count_tensor(cache, count))
    # a cache created empty adds its layers lazily: the class to replicate is kept
    replicate = getattr(cache, "layer_class_to_replicate", None)
    context = (
        tuple(_layer_context(layer) for layer in cache.layers),
        replicate.__name__ if replicate else None,
        count is not None,
    )
    return children, context


def _flatten_layers_with_keys(cache: Any) -> tuple[list[tuple[Any, torch.Tensor]], Any]:
    children, context = _flatten_layers(cache)
    names = []
    for i, layer_context in enumerate(context[0]):
        if layer_context[3]:
            names.extend([f"key_{i}", f"value_{i}"])
            if layer_context[4]:
                names.append(f"length_{i}")
        names.extend(linear_names(i, layer_context[5]))
        names.extend(indexer_names(i, layer_context[6] if len(layer_context) > 6 else None))
    if context[2]:
        names.append("tokens_seen")
    return [(pytree.MappingKey(n), c) for n, c in zip(names, children)], context


def _unflatten_layers(cls: type) -> Callable[[list[torch.Tensor], Any], Any]:
    def unflatten(children: list[torch.Tensor], context: Any) -> Any:
        module = importlib.import_module(_CACHE_MODULE)
        layers = []
        position = 0
        layer_contexts, replicate, counted = context
        for layer_context in layer_contexts:
            layer = _make_layer(module, layer_context)
            if layer_context[3]:
                size = 3 if layer_context[4] else 2
                _set_tensors(layer, *children[position : position + size])
                position += size
            count = linear_count(layer_context[5])
            if count:
                set_linear_tensors(layer, list(children[position : position + count]), layer_context[5])
                position += count
            indexer = layer_context[6] if len(layer_context) > 6 else None
            count = indexer_count(indexer)
            if count:
                set_indexer_tensors(layer, list(children[position : position + count]), indexer)
                position += count
            layers.append(layer)
        # one object for every layer and the cache: _count_tensor recognizes it by identity
        carried = children[position].shape[-1] if counted else None
        _set_tokens_seen(layers, carried)
        cache = cls.__new__(cls)
        if replicate is not None:
            module.Cache.__init__(cache, layer_class_to_replicate=getattr(module, replicate))
            cache.layers.extend(layers)
        else:
            module.Cache.__init__(cache, layers=layers)
        if counted:
            cache._fx2onnx_tokens_seen = (carried, children[position])
        return cache

    return unflatten


# subclasses of DynamicCache in modeling files: the layers, then their list attributes


def _list_states(cache: Any) -> list[tuple[str, list[Any]]]:
    """List attributes of a cache (besides its layers) holding tensors or empty lists."""
    found = []
    for name, value in vars(cache).items():
        if name == "layers" or not isinstance(value, list):
            continue
        if all(isinstance(v, torch.Tensor) or (isinstance(v, list) and not v) for v in value):
            found.append((name, value))
    return found


def _state_children(cache: Any) -> tuple[list[tuple[str, torch.Tensor]], tuple[Any, ...]]:
    """The tensors of the list attributes, named ``<attribute>_<index>``, and which entries hold one."""
    named, states = [], []
    for name, values in _list_states(cache):
        states.append((name, tuple(isinstance(v, torch.Tensor) for v in values)))
        named.extend((f"{name}_{i}", v) for i, v in enumerate(values) if isinstance(v, torch.Tensor))
    return named, tuple(states)


def _flatten_subclass(cache: Any) -> tuple[list[torch.Tensor], Any]:
    children, (layers, replicate, counted) = _flatten_layers(cache)
    named, states = _state_children(cache)
    return children + [v for _, v in named], (layers, replicate, counted, states)


def _flatten_subclass_with_keys(cache: Any) -> tuple[list[tuple[Any, torch.Tensor]], Any]:
    keyed, (layers, replicate, counted) = _flatten_layers_with_keys(cache)
    named, states = _state_children(cache)
    return keyed + [(pytree.MappingKey(n), v) for n, v in named], (layers, replicate, counted, states)


def _unflatten_subclass(cls: type) -> Callable[[list[torch.Tensor], Any], Any]:
    rebuild_layers = _unflatten_layers(cls)

    def unflatten(children: list[torch.Tensor], context: Any) -> Any:
        layers, replicate, counted, states = context
        position = len(children) - sum(flag for _, flags in states for flag in flags)
        cache = rebuild_layers(list(children[:position]), (layers, replicate, counted))
        for name, flags in states:
            values: list[Any] = []
            for flag in flags:
                values.append(children[position] if flag else [])
                position += int(flag)
            setattr(cache, name, values)
        return cache

    return unflatten


def model_cache_classes() -> list[type]:
    """Subclasses of ``DynamicCache`` defined in the modeling files imported so far."""
    module = sys.modules.get(_CACHE_MODULE)
    if module is None or not hasattr(module, "DynamicCache"):
        return []
    found, stack = [], list(module.DynamicCache.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__ != _CACHE_MODULE and cls.__module__.startswith("transformers."):
            found.append(cls)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


# EncoderDecoderCache: two caches


def _flatten_encoder_decoder(cache: Any) -> tuple[list[Any], Any]:
    return [cache.self_attention_cache, cache.cross_attention_cache], None


def _flatten_encoder_decoder_with_keys(cache: Any) -> tuple[list[tuple[Any, Any]], Any]:
    children, context = _flatten_encoder_decoder(cache)
    keys = [pytree.GetAttrKey("self_attention_cache"), pytree.GetAttrKey("cross_attention_cache")]
    return list(zip(keys, children)), context


def _unflatten_encoder_decoder(children: list[Any], context: Any) -> Any:
    module = importlib.import_module(_CACHE_MODULE)
    return module.EncoderDecoderCache(children[0], children[1])


def _to_dumpable(context: Any) -> str:
    import json

    return json.dumps(context)


def _from_dumpable(text: str) -> Any:
    import json

    value = json.loads(text)
    if value is None:
        return None
    layers = tuple(as_hashable(v) for v in value[0])
    if len(value) > 3:  # a subclass: its list attributes
        return layers, value[1], value[2], tuple((name, tuple(flags)) for name, flags in value[3])
    return layers, value[1], value[2]


def _serializers() -> dict[str, tuple[Callable, Callable, Callable]]:
    """class name -> (flatten, unflatten, flatten_with_keys), for classes of transformers.cache_utils."""
    module = importlib.import_module(_CACHE_MODULE)
    found: dict[str, tuple[Callable, Callable, Callable]] = {}
    for name in ("DynamicCache", "StaticCache"):
        cls = getattr(module, name, None)
        if cls is not None and hasattr(module, "Cache"):
            found[name] = (_flatten_layers, _unflatten_layers(cls), _flatten_layers_with_keys)
    if hasattr(module, "EncoderDecoderCache"):
        found["EncoderDecoderCache"] = (
            _flatten_encoder_decoder,
            _unflatten_encoder_decoder,
            _flatten_encoder_decoder_with_keys,
        )
    return found


# xLSTMCache: a standalone class, per layer a tuple of recurrent states (matrix, normalizer, stabilizer)

_XLSTM_MODULE = "transformers.models.xlstm.modeling_xlstm"


def _flatten_xlstm_with_keys(cache: Any) -> tuple[list[tuple[Any, torch.Tensor]], Any]:
    layers = sorted(cache.rnn_state)
    keyed = [(pytree.MappingKey(f"recurrent_{layer}_{i}"), state)
             for layer in layers for i, state in enumerate(cache.rnn_state[layer])]
    return keyed, tuple((layer, len(cache.rnn_state[layer])) for layer in layers)


def _flatten_xlstm(cache: Any) -> tuple[list[torch.Tensor], Any]:
    keyed, context = _flatten_xlstm_with_keys(cache)
    return [state for _, state in keyed], context


def _unflatten_xlstm(cls: type) -> Callable[[list[torch.Tensor], Any], Any]:
    def unflatten(children: list[torch.Tensor], context: Any) -> Any:
        cache = cls.__new__(cls)  # its constructor needs the configuration; only the states are read
        states = iter(children)
        cache.rnn_state = {layer: tuple(next(states) for _ in range(count)) for layer, count in context}
        # the count of tokens seen, only incremented by the forward: a Python number, no input of the graph
        cache.seqlen_offset = 0
        cache.dtype = children[0].dtype if children else torch.float32
        cache.config = None
        return cache

    return unflatten


def standalone_cache_classes() -> tuple[type, ...]:
    """The cache classes of the modeling files imported so far which are no ``Cache`` (xLSTM's)."""
    xlstm = getattr(sys.modules.get(_XLSTM_MODULE), "xLSTMCache", None)
    return (xlstm,) if xlstm is not None else ()


def _all_serializers(module: Any) -> dict[str, tuple[type, Callable, Callable, Callable]]:
    """name -> (class, flatten, unflatten, flatten_with_keys): the classes of transformers.cache_utils,
    then the subclasses of DynamicCache of the modeling files (named with their module), then xLSTM's cache
    where its modeling file is imported."""
    found = {name: (getattr(module, name), *functions) for name, functions in _serializers().items()}
    for cls in model_cache_classes():
        found[f"{cls.__module__}.{cls.__qualname__}"] = (
            cls, _flatten_subclass, _unflatten_subclass(cls), _flatten_subclass_with_keys)
    xlstm = getattr(sys.modules.get(_XLSTM_MODULE), "xLSTMCache", None)
    if xlstm is not None:
        found[f"{_XLSTM_MODULE}.xLSTMCache"] = (xlstm, _flatten_xlstm, _unflatten_xlstm(xlstm),
                                                _flatten_xlstm_with_keys)
    return found


def _class_named(module: Any, name: str) -> type | None:
    if "." not in name:
        return getattr(module, name, None)
    module_name, _, class_name = name.rpartition(".")
    return getattr(sys.modules.get(module_name), class_name, None)


def supported_cache_classes() -> list[str]:
    """Names of the cache classes of the installed transformers this module can register."""
    try:
        return sorted(_serializers())
    except ImportError:
        return []


def is_registered(cls: type) -> bool:
    """Tells if a class is a pytree node."""
    return cls in pytree.SUPPORTED_NODES


def register_cache_serialization(verbose: int = 0) -> dict[str, bool]:
    """Registers the cache classes of transformers as pytree nodes.

    :param verbose: prints what is registered
    :return: class name -> True if registered by this call, False if it already was
        (to give to :func:`unregister_cache_serialization`)
    """
    try:
        module = importlib.import_module(_CACHE_MODULE)
    except ImportError:
        return {}
    done: dict[str, bool] = {}
    for name, (cls, flatten, unflatten, flatten_with_keys) in _all_serializers(module).items():
        if is_registered(cls):
            done[name] = False
            if verbose:
                print(f"[fx2onnx.patches] {name} is already a pytree node, kept")
            continue
        serialized = f"{cls.__module__}.{cls.__name__}"
        if serialized in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            # another class object of the same name (module reloaded): leave it
            done[name] = False
            continue
        pytree.register_pytree_node(
            cls,
            flatten,
            unflatten,
            serialized_type_name=serialized,
            flatten_with_keys_fn=flatten_with_keys,
            to_dumpable_context=_to_dumpable,
            from_dumpable_context=_from_dumpable,
        )
        done[name] = True
        if verbose:
            print(f"[fx2onnx.patches] register {name} as a pytree node")
    return done


def unregister_cache_serialization(done: dict[str, bool] | None = None, verbose: int = 0) -> None:
    """Unregisters the classes :func:`register_cache_serialization` registered.

    :param done: what :func:`register_cache_serialization` returned; if None, every
        supported class registered with this module's functions is unregistered
    """
    module = importlib.import_module(_CACHE_MODULE)
    if done is None:
        done = {name: _registered_here(entry[0]) for name, entry in _all_serializers(module).items()}
    for name, registered_by_us in done.items():
        if not registered_by_us:
            continue
        cls = _class_named(module, name)
        if cls is None or not is_registered(cls):
            continue
        pytree._deregister_pytree_node(cls)
        _deregister_cxx(cls)
        if verbose:
            print(f"[fx2onnx.patches] unregister {name}")


def _registered_here(cls: type) -> bool:
    node = pytree.SUPPORTED_NODES.get(cls)
    return node is not None and getattr(node.flatten_fn, "__module__", None) == __name__


def _deregister_cxx(cls: type) -> None:
    """Removes the registration from the C++ pytree (optree) if torch made one."""
    if not getattr(pytree, "_cxx_pytree_imported", False):
        return
    try:
        import optree

        optree.unregister_pytree_node(cls, namespace="torch")
    except Exception:  # noqa: BLE001 - optree missing or class not registered there
        pass
