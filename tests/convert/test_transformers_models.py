"""Tiny transformers text models (random weights, configs in code) exported with to_onnx.

Each model is exported with dynamic batch and sequence (no cache), then checked
against eager on a second input set of other sizes whose attention mask has padding.
"""

from __future__ import annotations

import pytest

import fx2onnx
from fx2onnx.zoo import get_tiny_model, list_tiny_models

#: the models of the issue, exported with both attention implementations
MAIN_MODELS = ["llama", "mistral", "qwen2", "phi", "phi3", "gemma", "gpt2", "bert"]
#: other text models which export cheaply, eager attention only (gemma2 has no sdpa)
OTHER_MODELS = ["qwen3", "gemma2", "gemma3", "olmo", "granite", "smollm3"]

CASES = [(m, a) for m in MAIN_MODELS for a in ("eager", "sdpa")] + [(m, "eager") for m in OTHER_MODELS]
#: the case of the fast tier (`make test`): an encoder (the fast tier exports the llama decoder in
#: test_transformers_model_with_cache); the other cases are a sweep, marked slow (`make test-all`)
FAST_CASES = {("bert", "eager")}


def _padded(inputs: dict) -> dict:
    """Same inputs, the first sequence of the batch padded on the left (two masked tokens)."""
    inputs = dict(inputs)
    mask = inputs["attention_mask"].clone()
    mask[0, :2] = 0
    inputs["attention_mask"] = mask
    return inputs


def _dims(value_info) -> list:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def test_models_are_available():
    assert set(MAIN_MODELS + OTHER_MODELS) <= set(list_tiny_models())


@pytest.mark.parametrize(
    ("name", "attn"),
    [pytest.param(m, a, id=f"{m}-{a}", marks=() if (m, a) in FAST_CASES else pytest.mark.slow) for m, a in CASES],
)
def test_transformers_model(name, attn):
    tiny = get_tiny_model(name, attn_implementation=attn)
    tiny.model.config.use_cache = False
    onx = fx2onnx.to_onnx(tiny.model, (), tiny.inputs, dynamic_shapes=tiny.dynamic_shapes)

    # the user's dimension names are kept
    inputs = {i.name: _dims(i) for i in onx.graph.input}
    assert inputs["input_ids"] == ["batch", "seq"], inputs
    assert inputs["attention_mask"] == ["batch", "seq"], inputs
    first = onx.graph.output[0]
    # outputs are named after the ModelOutput's keys
    assert first.name == ("last_hidden_state" if name == "bert" else "logits")
    assert _dims(first)[:2] == ["batch", "seq"]

    second = _padded(tiny.inputs2)
    assert second["input_ids"].shape != tiny.inputs["input_ids"].shape
    report = fx2onnx.validate(onx, tiny.model, (), second, atol=1e-4)
    assert report.ok, report


@pytest.mark.parametrize(
    "name", ["llama", pytest.param("phi3", marks=pytest.mark.slow), pytest.param("gpt2", marks=pytest.mark.slow)]
)
def test_transformers_model_with_cache(name):
    import copy

    tiny = get_tiny_model(name, with_cache=True)
    with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
        onx = fx2onnx.to_onnx(tiny.model, (), modificator(copy.deepcopy(tiny.inputs)), dynamic_shapes=tiny.dynamic_shapes)
        second = _padded(copy.deepcopy(tiny.inputs2))
        report = fx2onnx.validate(onx, tiny.model, (), second, atol=1e-4)
    assert report.ok, report
    inputs = {i.name: _dims(i) for i in onx.graph.input}
    assert inputs["attention_mask"] == ["batch", "total_seq"]
    assert inputs["past_key_values_key_0"][::2] == ["batch", "past_seq"]
    outputs = {o.name: _dims(o) for o in onx.graph.output}
    # the updated cache is named after the cache's keys, its length is an expression
    assert list(outputs) == ["logits", "present_key_0", "present_value_0"], outputs
    assert outputs["present_key_0"][::2] == ["batch", "past_seq+seq"]
