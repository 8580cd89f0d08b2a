"""A folder's decoder is captured with its sliding-window layers over the whole past (fx2onnx.inputs.full_cache)."""

import pytest
import torch
import transformers

from fx2onnx.inputs.folder_inputs import task_inputs
from fx2onnx.inputs.full_cache import whole_past

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             head_dim=16, vocab_size=99, max_position_embeddings=256)


def test_sliding_layers_hold_the_whole_past_and_the_check_goes_past_the_window():
    config = transformers.Gemma3TextConfig(sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                                           **SMALL)
    inputs, inputs2, shapes = task_inputs(config, "text-generation", with_cache=True)
    assert any(getattr(layer, "is_sliding", False) for layer in inputs["past_key_values"].layers)
    assert whole_past([inputs, inputs2], shapes, config)
    for input_set in (inputs, inputs2):
        layers = input_set["past_key_values"].layers
        assert {type(layer).__name__ for layer in layers} == {"DynamicLayer"}
        (past,) = {layer.keys.shape[-2] for layer in layers} | {layer.values.shape[-2] for layer in layers}
        batch, seq = input_set["input_ids"].shape
        assert input_set["attention_mask"].shape == (batch, past + seq)
        assert input_set["position_ids"].tolist() == [list(range(past, past + seq))] * batch
    assert inputs2["past_key_values"].layers[0].keys.shape[-2] > config.sliding_window
    assert len(shapes["past_key_values"]) == 2 * config.num_hidden_layers
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        assert torch.isfinite(model(**inputs2).logits).all()


def test_a_cache_without_sliding_layers_is_kept():
    config = transformers.Qwen3Config(**SMALL)
    inputs, inputs2, shapes = task_inputs(config, "text-generation", with_cache=True)
    before = [layer.keys for layer in inputs["past_key_values"].layers]
    assert not whole_past([inputs, inputs2], shapes, config)
    assert [layer.keys for layer in inputs["past_key_values"].layers] == before


@pytest.mark.slow  # the discovery of the architectures: the Gemma 3 test above is the fast tier's
def test_a_hybrid_sliding_layer_keeps_its_other_states():
    from fx2onnx.inputs.discover import discover_architectures, tiny_config

    (arch,) = [a for a in discover_architectures() if a.name == "inkling_text"]
    config = tiny_config(arch, num_hidden_layers=2)
    inputs, inputs2, shapes = task_inputs(config, "text-generation", with_cache=True)
    before = [sorted(vars(layer)) for layer in inputs["past_key_values"].layers]
    assert whole_past([inputs, inputs2], shapes, config)
    layers = inputs2["past_key_values"].layers
    assert [type(layer).__name__ for layer in layers] == ["LinearAttentionAndFullAttentionLayer"] * 2
    assert all(layer.keys.shape[-2] > config.sliding_window for layer in layers)
    # every state but the window's bookkeeping carried over
    assert [sorted(vars(layer)) for layer in inputs["past_key_values"].layers] == [
        [k for k in names if k not in ("sliding_window", "cumulative_length", "_sliding_window_tensor")]
        for names in before]
