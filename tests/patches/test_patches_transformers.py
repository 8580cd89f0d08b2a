"""transformers fixes and tiny models exported with a cache, checked on onnxruntime."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils import _pytree as pytree

import fx2onnx
from fx2onnx.models import export_dynamic_shapes, get_tiny_model


def _onnx_export(tiny, patch_transformers=True):
    with fx2onnx.torch_export_patches(patch_transformers=patch_transformers) as modificator:
        return torch.onnx.export(
            tiny.model,
            (),
            kwargs=modificator(copy.deepcopy(tiny.inputs)),
            dynamic_shapes=tiny.dynamic_shapes,
            dynamo=True,
            optimize=False,
        )


def _validate(onx, tiny):
    # eager runs unpatched; only the cache registration is needed to flatten the inputs
    with fx2onnx.torch_export_patches(patch_torch=False):
        report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
    assert report.ok, report
    return report


@pytest.mark.parametrize("name", ["llama", "phi3", "gemma2", "gpt2"])
def test_export_with_cache(name):
    tiny = get_tiny_model(name, with_cache=True, num_hidden_layers=2 if name == "gemma2" else 1)
    onx = _onnx_export(tiny)
    names = [i.name for i in onx.model_proto.graph.input]
    assert "past_key_values_key_0" in names and "past_key_values_value_0" in names
    dims = {d.dim_param for i in onx.model_proto.graph.input for d in i.type.tensor_type.shape.dim}
    assert {"batch", "seq", "past_seq", "total_seq"} <= dims
    _validate(onx.model_proto, tiny)


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
    onx = _onnx_export(tiny)
    # inputs2 has 11 positions > max_position_embeddings=9: the frequencies are rescaled
    _validate(onx.model_proto, tiny)


def test_lazy_initialization_constants():
    """transformers' own registration rebuilds caches through lazy_initialization,
    whose torch.tensor([]) constants break torch.onnx.export; the patch fixes it."""
    from transformers.cache_utils import DynamicCache
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    tiny = get_tiny_model("llama", with_cache=True)
    ds = dict(tiny.dynamic_shapes)
    ds["past_key_values"] = [[ds["past_key_values"][0]], [ds["past_key_values"][1]]]
    assert DynamicCache not in pytree.SUPPORTED_NODES
    register_dynamic_cache_export_support()
    try:
        with pytest.raises(Exception, match="lifted_tensor"):
            torch.onnx.export(tiny.model, (), kwargs=copy.deepcopy(tiny.inputs), dynamic_shapes=ds, dynamo=True)
        with fx2onnx.torch_export_patches(patch_transformers=True) as m:
            assert {r.name: r.status for r in m.reports}["DynamicCache"] == "skipped"
            onx = torch.onnx.export(
                tiny.model, (), kwargs=copy.deepcopy(tiny.inputs), dynamic_shapes=ds, dynamo=True, optimize=False
            )
        report = fx2onnx.validate(onx.model_proto, tiny.model, (), copy.deepcopy(tiny.inputs2))
        assert report.ok, report
    finally:
        pytree._deregister_pytree_node(DynamicCache)
