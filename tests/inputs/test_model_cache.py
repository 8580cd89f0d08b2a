"""The example cache read from the model (:mod:`fx2onnx.inputs.model_cache`): every state the model keeps, its
shape, dtype and dynamic axes, where a configuration cannot tell them."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers

from fx2onnx.inputs import model_cache
from fx2onnx.inputs.decoder import _kv_shape
from fx2onnx.inputs.folder_inputs import task_inputs
from fx2onnx.inputs.model_cache import PrefillError, cache_summary, model_cache_inputs

KV = {0: "batch", 2: "past_seq"}


def _lfm2():
    return transformers.Lfm2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=99, max_position_embeddings=64,
                                   layer_types=["conv", "full_attention"], architectures=["Lfm2ForCausalLM"])


def _states(inputs):
    return {name: (shape, dtype) for name, shape, dtype in cache_summary(inputs["past_key_values"])}


def test_short_convolution_states_have_a_fixed_shape():
    inputs, inputs2, shapes = model_cache_inputs(_lfm2(), dtype=torch.bfloat16)
    states = _states(inputs)
    # the conv layer keeps its last L_cache inputs (fixed, batch dynamic), the attention layer its keys and values
    assert list(states) == ["conv_0", "key_1", "value_1"]
    assert states["conv_0"] == ((2, 64, 3), torch.bfloat16)
    assert states["key_1"] == ((2, 2, 5, 16), torch.bfloat16)
    assert _states(inputs2)["conv_0"][0] == (3, 64, 3) and _states(inputs2)["key_1"][0] == (3, 2, 7, 16)
    assert shapes["past_key_values"] == [{0: "batch"}, KV, KV]
    assert shapes["attention_mask"] == {0: "batch", 1: "total_seq"} and inputs["attention_mask"].shape == (2, 8)
    # the rebuilt cache runs in eager as the model's own
    model = transformers.Lfm2ForCausalLM(_lfm2()).eval()
    with torch.no_grad():
        logits = model(**{**copy.deepcopy(inputs), "past_key_values": copy.deepcopy(inputs2["past_key_values"]),
                          "input_ids": inputs2["input_ids"], "attention_mask": inputs2["attention_mask"],
                          "position_ids": inputs2["position_ids"]}).logits
    assert logits.shape == (3, 4, 99) and torch.isfinite(logits).all()


def test_latent_attention_cache():
    config = transformers.DeepseekV3Config(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                           n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                                           first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16,
                                           qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, head_dim=8,
                                           vocab_size=99, architectures=["DeepseekV3ForCausalLM"])
    inputs, _, shapes = model_cache_inputs(config)
    shapes_read = {name: shape for name, (shape, _) in _states(inputs).items()}
    # not [batch, heads, seq, head_dim] per layer as the configuration's fields would make it
    assert shapes_read["key_0"] != _kv_shape(config, 2, 5)
    assert len(shapes_read) == 4 and all(s[0] == 2 and s[2] == 5 for s in shapes_read.values())
    assert shapes["past_key_values"] == [KV] * 4


def test_a_config_field_the_model_ignores():
    config = transformers.GPTNeoXConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, vocab_size=99, architectures=["GPTNeoXForCausalLM"])
    config.num_key_value_heads = 2  # a field GPT-NeoX does not read
    inputs, _, _ = task_inputs(config, "text-generation", with_cache=True)
    assert _kv_shape(config, 2, 5) == (2, 2, 5, 16)
    assert _states(inputs)["key_0"][0] == (2, 4, 5, 16)


def test_sliding_cache_carries_its_token_count():
    config = transformers.MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=99,
                                        sliding_window=8, architectures=["MistralForCausalLM"])
    _, _, shapes = model_cache_inputs(config)
    assert shapes["past_key_values"] == [KV] * 4 + [{1: "tokens_seen"}]


def test_no_transformers_class_keeps_the_config_cache():
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, vocab_size=99)
    with pytest.raises(PrefillError, match="names no transformers class"):
        model_cache_inputs(config)
    inputs, _, shapes = task_inputs(config, "text-generation", with_cache=True)
    assert _states(inputs)["key_0"][0] == (2, 2, 5, 16) and shapes["past_key_values"] == [KV, KV]


def test_meta_prefill_reads_the_same_cache(monkeypatch):
    # a model too large for a CPU prefill runs it on the meta device (bfloat16, no mask): the same states
    cpu = model_cache_inputs(_lfm2())
    monkeypatch.setattr(model_cache, "CPU_PREFILL_PARAMETERS", 0)
    meta = model_cache_inputs(_lfm2())
    assert _states(meta[0]) == _states(cpu[0]) and _states(meta[1]) == _states(cpu[1])
    assert meta[2] == cpu[2]
    assert all(not t.is_meta for t in torch.utils._pytree.tree_leaves(meta[0]["past_key_values"].layers[1].keys))


@pytest.mark.slow  # 4-20 s on a loaded machine: DeepSeek V4's first import and prefill
def test_a_cache_that_cannot_be_rebuilt_is_refused_in_one_line():
    # DeepSeek V4's cache layers need the config to be rebuilt from their tensors: the configuration's cache has the
    # same classes, so the export is refused (a ValueError: one error line of the command) instead of a traceback
    from fx2onnx.inputs.discover import get_architecture, tiny_config

    arch = get_architecture("deepseek_v4")
    config = tiny_config(arch)
    config.architectures = [arch.model_class().__name__]
    with pytest.raises(model_cache.UnrebuildableCache, match="DeepseekV4HCACache.* cannot be rebuilt"):
        task_inputs(config, "text-generation", with_cache=True)
