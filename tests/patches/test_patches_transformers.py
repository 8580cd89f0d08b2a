"""transformers fixes and tiny models exported with a cache, checked on onnxruntime."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils import _pytree as pytree

import fx2onnx
from fx2onnx.zoo import export_dynamic_shapes, get_tiny_model


def _onnx_export(tiny, patch_transformers=True, exporter="torch.onnx"):
    """Returns a ModelProto."""
    with fx2onnx.torch_export_patches(patch_transformers=patch_transformers) as modificator:
        kwargs = modificator(copy.deepcopy(tiny.inputs))
        if exporter == "fx2onnx":
            return fx2onnx.to_onnx(tiny.model, (), kwargs=kwargs, dynamic_shapes=tiny.dynamic_shapes)
        return torch.onnx.export(
            tiny.model, (), kwargs=kwargs, dynamic_shapes=tiny.dynamic_shapes, dynamo=True, optimize=False
        ).model_proto


def _validate(onx, tiny):
    # eager runs unpatched; only the cache registration is needed to flatten the inputs
    with fx2onnx.torch_export_patches(patch_torch=False):
        report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
    assert report.ok, report
    return report


@pytest.mark.parametrize(
    "name,exporter",
    [
        pytest.param("llama", "torch.onnx", marks=pytest.mark.slow),
        pytest.param("gpt2", "torch.onnx", marks=pytest.mark.slow),
        ("llama", "fx2onnx"),
        pytest.param("phi3", "fx2onnx", marks=pytest.mark.slow),
        pytest.param("gemma2", "fx2onnx", marks=pytest.mark.slow),
        pytest.param("bart", "fx2onnx", marks=pytest.mark.slow),
    ],
)
def test_export_with_cache(name, exporter):
    # gemma2 alternates sliding-window and full attention layers: two layers;
    # bart takes an EncoderDecoderCache
    tiny = get_tiny_model(name, with_cache=True, num_hidden_layers=2 if name == "gemma2" else 1)
    onx = _onnx_export(tiny, exporter=exporter)
    dims = {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in onx.graph.input
    }
    # the dimensions keep the names given in the dynamic shapes
    for name, spec in tiny.dynamic_shapes.items():
        if isinstance(spec, dict):
            assert [dims[name][axis] for axis in sorted(spec)] == [spec[a] for a in sorted(spec)], dims
    key = [n for n in dims if "key" in n][0]
    assert dims[key][0] == "batch" and dims[key][2] == "past_seq", dims
    _validate(onx, tiny)


@pytest.mark.slow
def test_dynamic_rope_needs_the_patch():
    rope = {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 9}
    tiny = get_tiny_model("llama", with_cache=True, **rope)
    with fx2onnx.torch_export_patches(patch_transformers=False):
        with pytest.raises(Exception, match="seq_len > max_seq_len_cached|data-dependent"):
            torch.export.export(
                tiny.model,
                (),
                kwargs=copy.deepcopy(tiny.inputs),
                dynamic_shapes=export_dynamic_shapes(tiny.dynamic_shapes),
                strict=False,
            )
    onx = _onnx_export(tiny, exporter="fx2onnx")
    # inputs2 has 11 positions > max_position_embeddings=9: the frequencies are rescaled
    _validate(onx, tiny)


@pytest.mark.slow
def test_lazy_initialization_constants():
    """transformers' own registration rebuilds caches through lazy_initialization,
    whose torch.tensor([]) constants break torch.onnx.export; the patch fixes it."""
    from transformers.cache_utils import DynamicCache
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    tiny = get_tiny_model("llama", with_cache=True)
    ds = dict(tiny.dynamic_shapes)
    ds["past_key_values"] = [[ds["past_key_values"][0]], [ds["past_key_values"][1]]]
    previous = pytree.SUPPORTED_NODES.get(DynamicCache)  # left by another test or library
    previous_name = previous and pytree.SUPPORTED_SERIALIZED_TYPES[DynamicCache].serialized_type_name
    if previous is not None:
        pytree._deregister_pytree_node(DynamicCache)
    register_dynamic_cache_export_support()
    try:
        with pytest.raises(Exception, match="lifted_tensor"):
            torch.onnx.export(
                tiny.model, (), kwargs=copy.deepcopy(tiny.inputs), dynamic_shapes=ds, dynamo=True
            )
        with fx2onnx.torch_export_patches(patch_transformers=True) as m:
            assert {r.name: r.status for r in m.reports}["DynamicCache"] == "skipped"
            onx = torch.onnx.export(
                tiny.model,
                (),
                kwargs=copy.deepcopy(tiny.inputs),
                dynamic_shapes=ds,
                dynamo=True,
                optimize=False,
            )
        report = fx2onnx.validate(onx.model_proto, tiny.model, (), copy.deepcopy(tiny.inputs2))
        assert report.ok, report
    finally:
        pytree._deregister_pytree_node(DynamicCache)
        if previous is not None:
            pytree.register_pytree_node(
                DynamicCache,
                previous.flatten_fn,
                previous.unflatten_fn,
                serialized_type_name=previous_name,
                flatten_with_keys_fn=previous.flatten_with_keys_fn,
            )


@pytest.mark.slow
def test_static_cache_export():
    """A StaticCache input: fixed length, its number of written positions is an input."""
    from transformers.cache_utils import StaticCache

    tiny = get_tiny_model("llama", with_cache=True)

    def make(batch, seq, past, seed):
        g = torch.Generator().manual_seed(seed)
        cache = StaticCache(config=tiny.config, max_cache_len=16)
        kv = [torch.randn(batch, 2, past, 8, generator=g) for _ in range(2)]
        cache.update(*kv, layer_idx=0)
        return dict(
            input_ids=torch.randint(3, 128, (batch, seq), generator=g),
            attention_mask=torch.ones(batch, past + seq, dtype=torch.int64),
            position_ids=torch.arange(past, past + seq).expand(batch, -1).contiguous(),
            past_key_values=cache,
        )

    ds = dict(
        input_ids={0: "batch", 1: "seq"},
        attention_mask={0: "batch", 1: "total_seq"},
        position_ids={0: "batch", 1: "seq"},
        past_key_values=[{0: "batch"}, {0: "batch"}, None],  # keys, values, cumulative_length
    )
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(tiny.model, (), kwargs=make(2, 3, 5, 0), dynamic_shapes=ds)
    names = [i.name for i in onx.graph.input]
    assert names[-3:] == ["past_key_values_key_0", "past_key_values_value_0", "past_key_values_length_0"]
    with fx2onnx.torch_export_patches(patch_torch=False):
        report = fx2onnx.validate(onx, tiny.model, (), make(3, 4, 7, 1))
    assert report.ok, report
