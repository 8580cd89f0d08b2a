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


def test_an_indexer_cache_follows_the_longer_past():
    # a sparse-attention indexer keeps its keys along the past ([batch, past, width]) beside the layer's keys: the
    # longer past of the check's second set lengthens them too (onnxruntime refused the mask of another length)
    config = transformers.Dots3NoteTextConfig(
        hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=99, q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8,
        qk_rope_head_dim=8, v_head_dim=8, head_dim=16, index_n_heads=2, index_head_dim=16, index_topk=4,
        n_routed_experts=2, num_experts_per_tok=1, sliding_window=6, per_layer_config={},
        layer_types=["indexed_attention", "sliding_attention"], mlp_layer_types=["dense", "dense"],
        architectures=["Dots3NoteForCausalLM"], pad_token_id=0, bos_token_id=1, eos_token_id=2)
    inputs, inputs2, shapes = task_inputs(config, "text-generation", with_cache=True)
    assert whole_past([inputs, inputs2], shapes, config)
    indexed = inputs2["past_key_values"].layers[0]
    past = indexed.keys.shape[-2]
    assert past == config.sliding_window + 3 and indexed.indexer_keys.shape[1] == past  # 7 after the prefill
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        assert model(**inputs2).logits.shape[:2] == inputs2["input_ids"].shape
