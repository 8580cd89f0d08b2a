"""Cache classes as pytree nodes: registration, round trip, unregistration."""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree
from transformers.cache_utils import (
    DynamicCache,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    EncoderDecoderCache,
    StaticCache,
)

import fx2onnx
from fx2onnx.zoo import get_tiny_model
from fx2onnx.patches.caches import supported_cache_classes


@pytest.fixture
def registered():
    done = fx2onnx.register_cache_serialization()
    yield done
    fx2onnx.unregister_cache_serialization(done)


def _kv(past=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 2, past, 4, generator=g), torch.randn(2, 2, past, 4, generator=g)


def _layers_equal(a, b):
    assert type(a) is type(b)
    assert [type(x) for x in a.layers] == [type(x) for x in b.layers]
    for la, lb in zip(a.layers, b.layers):
        torch.testing.assert_close(la.keys, lb.keys)
        torch.testing.assert_close(la.values, lb.values)
        assert getattr(la, "sliding_window", None) == getattr(lb, "sliding_window", None)
        ca, cb = getattr(la, "cumulative_length", None), getattr(lb, "cumulative_length", None)
        if isinstance(ca, torch.Tensor):
            torch.testing.assert_close(ca, cb)
        else:
            assert ca == cb


def test_supported_classes():
    assert {"DynamicCache", "StaticCache", "EncoderDecoderCache"} <= set(supported_cache_classes())


def test_dynamic_cache_round_trip(registered):
    assert registered["DynamicCache"] is True
    cache = DynamicCache()
    cache.layers = [DynamicLayer(), DynamicSlidingWindowLayer(sliding_window=8)]
    cache.layer_class_to_replicate = None
    for i, layer in enumerate(cache.layers):
        layer.update(*_kv(seed=i))
    leaves, spec = pytree.tree_flatten(cache)
    assert len(leaves) == 4
    torch.testing.assert_close(leaves[0], cache.layers[0].keys)
    torch.testing.assert_close(leaves[3], cache.layers[1].values)
    rebuilt = pytree.tree_unflatten(leaves, spec)
    _layers_equal(cache, rebuilt)
    # the cache still works after unflattening
    k, v = rebuilt.update(*_kv(past=1, seed=5), layer_idx=0)
    assert k.shape[2] == 4
    paths = [pytree.keystr(p) for p, _ in pytree.tree_flatten_with_path(cache)[0]]
    assert paths == ["['key_0']", "['value_0']", "['key_1']", "['value_1']"]


def test_static_cache_round_trip(registered):
    tiny = get_tiny_model("llama", num_hidden_layers=2)
    cache = StaticCache(config=tiny.config, max_cache_len=6)
    for i in range(2):
        cache.update(*_kv(seed=i), layer_idx=i)
    leaves, spec = pytree.tree_flatten(cache)
    assert len(leaves) == 6  # keys, values, cumulative_length per layer
    _layers_equal(cache, pytree.tree_unflatten(leaves, spec))


def test_encoder_decoder_cache_round_trip(registered):
    cache = EncoderDecoderCache(DynamicCache([_kv(seed=0)]), DynamicCache([_kv(past=5, seed=1)]))
    leaves, spec = pytree.tree_flatten(cache)
    assert len(leaves) == 4
    rebuilt = pytree.tree_unflatten(leaves, spec)
    _layers_equal(cache.self_attention_cache, rebuilt.self_attention_cache)
    _layers_equal(cache.cross_attention_cache, rebuilt.cross_attention_cache)


def test_spec_serialization(registered):
    cache = DynamicCache([_kv()])
    _, spec = pytree.tree_flatten({"past_key_values": cache})
    assert pytree.treespec_loads(pytree.treespec_dumps(spec)) == spec


def test_unregister_restores_and_keeps_existing():
    before = set(pytree.SUPPORTED_NODES)
    done = fx2onnx.register_cache_serialization()
    assert DynamicCache in pytree.SUPPORTED_NODES
    again = fx2onnx.register_cache_serialization()
    assert not any(again.values())  # already registered: kept
    fx2onnx.unregister_cache_serialization(again)
    assert DynamicCache in pytree.SUPPORTED_NODES
    fx2onnx.unregister_cache_serialization(done)
    assert set(pytree.SUPPORTED_NODES) == before
    # a registration made before the context manager is left untouched
    done = fx2onnx.register_cache_serialization()
    try:
        with fx2onnx.torch_export_patches() as m:
            assert all(r.status == "skipped" for r in m.reports if r.kind == "cache")
        assert DynamicCache in pytree.SUPPORTED_NODES
    finally:
        fx2onnx.unregister_cache_serialization(done)
    assert set(pytree.SUPPORTED_NODES) == before


def test_legacy_cache_converted():
    pairs = [_kv(seed=0), _kv(seed=1)]
    with fx2onnx.torch_export_patches() as modificator:
        inputs = modificator({"input_ids": torch.zeros((2, 3), dtype=torch.int64), "past_key_values": pairs})
    cache = inputs["past_key_values"]
    assert isinstance(cache, DynamicCache) and len(cache.layers) == 2
    torch.testing.assert_close(cache.layers[1].values, pairs[1][1])


def test_empty_cache_round_trip(registered):
    """A cache created empty fills its layers lazily: it stays so once unflattened."""
    cache = DynamicCache()
    leaves, spec = pytree.tree_flatten(cache)
    assert leaves == []
    rebuilt = pytree.tree_unflatten(leaves, spec)
    assert rebuilt.layers == [] and rebuilt.layer_class_to_replicate is DynamicLayer
    k, _ = rebuilt.update(*_kv(seed=1), layer_idx=0)
    assert k.shape[2] == 3


def test_dynamic_cache_subclass_of_a_modeling_file_round_trips():
    """MiniMaxCache adds a list of linear-attention states (a tensor or [] per layer) to DynamicCache."""
    from transformers.models.minimax.modeling_minimax import MiniMaxCache

    from fx2onnx.patches.caches import model_cache_classes

    assert MiniMaxCache in model_cache_classes()
    cache = MiniMaxCache()
    cache.layers.append(DynamicLayer())  # a linear-attention layer keeps no keys
    cache.layers.append(DynamicLayer())
    cache.layers[1].update(*_kv())
    state = torch.randn(2, 4, 8, 8)
    cache.set_linear_cache(0, state)
    cache.set_linear_cache(1, [])
    done = fx2onnx.register_cache_serialization()
    try:
        assert pytree.SUPPORTED_NODES.get(MiniMaxCache) is not None
        leaves, spec = pytree.tree_flatten(cache)
        assert len(leaves) == 3 and leaves[2] is state
        keyed, _ = pytree.tree_flatten_with_path(cache)
        assert [pytree.keystr(path) for path, _ in keyed] == ["['key_1']", "['value_1']", "['linear_cache_0']"]
        rebuilt = pytree.tree_unflatten(leaves, spec)
        assert type(rebuilt) is MiniMaxCache and rebuilt.get_linear_cache(1) == []
        assert rebuilt.get_linear_cache(0) is state
        torch.testing.assert_close(rebuilt.layers[1].keys, cache.layers[1].keys)
        assert rebuilt.layers[0].keys is None
    finally:
        fx2onnx.unregister_cache_serialization(done)
    assert MiniMaxCache not in pytree.SUPPORTED_NODES
