"""Idefics 3 exported with a dynamic batch (the capture failed: tolist() specialized it); SmolVLM, whose
outputs hold one tensor per prompt, with a static batch."""

from __future__ import annotations

import pytest
import torch

import fx2onnx

transformers = pytest.importorskip("transformers")

from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model  # noqa: E402
from fx2onnx.inputs.vlm_inputs import image_text_inputs  # noqa: E402


@pytest.mark.parametrize("name", ["idefics3"])
@pytest.mark.slow
def test_dynamic_batch(name):
    model, config = tiny_task_model(get_task_architecture("image-text-to-text", name))
    inputs, dynamic_shapes = image_text_inputs(model, config, batch=2)
    assert inputs["pixel_values"].dim() == 5 and dynamic_shapes["pixel_values"] == {0: "batch"}
    onx = fx2onnx.to_onnx(model, (), dict(inputs, use_cache=False), dynamic_shapes=dict(dynamic_shapes, use_cache=None))
    dims = [d.dim_param or d.dim_value for d in onx.graph.input[0].type.tensor_type.shape.dim]
    assert dims[0] == "batch", dims
    for batch, seed in ((3, 1), (2, 2)):
        other, _ = image_text_inputs(model, config, batch=batch, seed=seed)
        report = fx2onnx.validate(onx, model, (), dict(other, use_cache=False))
        assert report.ok, report


def test_patched_features_are_the_original_ones():
    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "idefics3"))
    inputs, _ = image_text_inputs(model, config, batch=3, seed=4)
    with torch.no_grad():
        expected = model(**inputs, use_cache=False).logits
        with fx2onnx.torch_export_patches(patch_transformers=True):
            got = model(**inputs, use_cache=False).logits
    torch.testing.assert_close(got, expected, atol=0, rtol=0)


@pytest.mark.slow
def test_smolvlm_static_batch_and_why_not_dynamic():
    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "smolvlm"))
    inputs, _ = image_text_inputs(model, config, batch=2)
    with torch.no_grad():
        outputs = model(**inputs, use_cache=False)
    # one pooled tensor per prompt among the outputs: their number follows the batch
    assert len(outputs.image_hidden_states.pooler_output) == 2
    onx = fx2onnx.to_onnx(model, (), dict(inputs, use_cache=False))
    other, _ = image_text_inputs(model, config, batch=2, seed=5)
    report = fx2onnx.validate(onx, model, (), dict(other, use_cache=False))
    assert report.ok, report
