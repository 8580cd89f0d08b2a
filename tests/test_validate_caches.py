"""validate / flatten_inputs / flatten_outputs on inputs and outputs holding transformers caches."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers.cache_utils import DynamicCache  # noqa: E402

import fx2onnx  # noqa: E402
from fx2onnx.zoo import get_tiny_model  # noqa: E402
from fx2onnx.patches.caches import (  # noqa: E402
    _registered_here,
    is_registered,
    register_cache_serialization,
    unregister_cache_serialization,
)
from fx2onnx.validation import flatten_inputs, flatten_outputs  # noqa: E402


@pytest.fixture
def unregistered_cache():
    """Starts without DynamicCache registered, restores the registration found."""
    before = is_registered(DynamicCache)
    if before and not _registered_here(DynamicCache):
        pytest.skip("DynamicCache registered by another library in this process")
    unregister_cache_serialization()
    yield
    if before and not is_registered(DynamicCache):
        register_cache_serialization()


def make_cache(past: int = 3, layers: int = 2) -> DynamicCache:
    gen = torch.Generator().manual_seed(0)
    pairs = [(torch.randn(2, 2, past, 4, generator=gen), torch.randn(2, 2, past, 4, generator=gen)) for _ in range(layers)]
    return DynamicCache(pairs)


def test_flatten_inputs_unregistered_cache(unregistered_cache):
    cache = make_cache()
    x = torch.randn(2, 3)
    flat = flatten_inputs((x,), {"past_key_values": cache})
    assert len(flat) == 5
    assert flat[0] is x
    # order: key_0, value_0, key_1, value_1
    expected = [cache.layers[0].keys, cache.layers[0].values, cache.layers[1].keys, cache.layers[1].values]
    assert all(a is b for a, b in zip(flat[1:], expected))
    # the registration was temporary
    assert not is_registered(DynamicCache)


def test_flatten_keeps_existing_registration(unregistered_cache):
    done = register_cache_serialization()
    try:
        assert done["DynamicCache"]
        assert len(flatten_inputs((), {"cache": make_cache(layers=3)})) == 6
        assert is_registered(DynamicCache)
    finally:
        unregister_cache_serialization(done)


def test_flatten_outputs_model_output_with_cache(unregistered_cache):
    tiny = get_tiny_model("llama", with_cache=True)
    with torch.no_grad():
        out = tiny.model(**copy.deepcopy(tiny.inputs))
    flat = flatten_outputs(out)
    # logits, then key and value of the only layer, longer by the new tokens
    assert len(flat) == 3
    assert flat[0] is out.logits
    past = tiny.inputs["past_key_values"].layers[0].keys.shape[2]
    seq = tiny.inputs["input_ids"].shape[1]
    assert flat[1].shape[2] == past + seq
    assert not is_registered(DynamicCache)


def test_unknown_cache_class_raises(unregistered_cache):
    class MyCache(DynamicCache):
        pass

    cache = MyCache([(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))])
    with pytest.raises(TypeError, match="MyCache.*register_pytree_node"):
        flatten_inputs((), {"past_key_values": cache})
    assert not is_registered(DynamicCache)


@pytest.mark.slow
def test_validate_exported_llama_with_cache(unregistered_cache):
    tiny = get_tiny_model("llama", with_cache=True)
    with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
        onx = fx2onnx.to_onnx(
            tiny.model, (), kwargs=modificator(copy.deepcopy(tiny.inputs)), dynamic_shapes=tiny.dynamic_shapes
        )
    assert not is_registered(DynamicCache)
    # no torch_export_patches around validate: the caches are flattened anyway
    report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
    assert report.ok, report
    assert report.n_outputs == len(onx.graph.output) == 3
    assert report.max_abs < 1e-4
    assert not is_registered(DynamicCache)
    # another model (other weights) is caught
    other = get_tiny_model("llama", with_cache=True, seed=7)
    bad = fx2onnx.validate(onx, other.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
    assert not bad.ok


@pytest.mark.slow
def test_validate_importable_without_transformers():
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "import torch\n"
        "from fx2onnx.validation import flatten_inputs, flatten_outputs\n"
        "assert len(flatten_inputs((torch.ones(2),), {'y': [torch.ones(1), None]})) == 2\n"
        "assert len(flatten_outputs({'a': torch.ones(1), 'b': (torch.ones(2), 3)})) == 3\n"
        "assert 'transformers.cache_utils' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
