"""Folders whose cache a configuration does not describe, from ``export FOLDER`` (no flag) to transformers' greedy
tokens: a hybrid of short convolutions and attention (LFM2), latent attention (DeepSeek V3), a state-space hybrid
(Jamba), and a GPT-NeoX config carrying a ``num_key_value_heads`` the model ignores. The example cache of the
export is the one the model returns (:mod:`fx2onnx.inputs.model_cache`), the loop carries every state."""

from __future__ import annotations

import json
import os

import onnx
import pytest
import torch
import transformers

from fx2onnx.__main__ import main
from fx2onnx.deploy.cache_names import is_mamba_config, state_names
from fx2onnx.formats import CACHE_METADATA_KEY
from fx2onnx.runtime.folder import FolderGenerator
from fx2onnx.testing.tokenizer import write_checkpoint_folder

PROMPTS = ["hello world, the exporter", "Write a short story"]
NEW_TOKENS = 10


def _lfm2():
    return transformers.Lfm2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=128,
                                   layer_types=["conv", "full_attention"], architectures=["Lfm2ForCausalLM"])


def _deepseek_v3():
    return transformers.DeepseekV3Config(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                         n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                                         first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16,
                                         qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, head_dim=8,
                                         max_position_embeddings=128, architectures=["DeepseekV3ForCausalLM"])


def _jamba():
    return transformers.JambaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, num_experts=2,
                                    num_experts_per_tok=1, expert_layer_period=2, expert_layer_offset=1,
                                    attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8, mamba_d_conv=4,
                                    mamba_expand=2, mamba_dt_rank=8, use_mamba_kernels=False,
                                    max_position_embeddings=128, architectures=["JambaForCausalLM"])


def _gpt_neox():
    config = transformers.GPTNeoXConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=128,
                                        architectures=["GPTNeoXForCausalLM"])
    config.num_key_value_heads = 2  # written to config.json, not read by GPT-NeoX (4 heads of keys)
    return config


CONFIGS = {"lfm2": _lfm2, "deepseek_v3": _deepseek_v3, "jamba": _jamba, "gpt_neox": _gpt_neox}


@pytest.fixture(scope="module", params=[
    "lfm2",
    pytest.param("deepseek_v3", marks=pytest.mark.slow),
    pytest.param("jamba", marks=pytest.mark.slow),
    pytest.param("gpt_neox", marks=pytest.mark.slow),
])
def folders(request, tmp_path_factory):
    """A float32 checkpoint folder with a tokenizer, and the folder ``export`` (no flag) wrote from it."""
    root = tmp_path_factory.mktemp(request.param)
    checkpoint, out = str(root / "checkpoint"), str(root / "exported")
    write_checkpoint_folder(CONFIGS[request.param](), checkpoint, dtype="float32", std=0.3)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return request.param, checkpoint, out


def _eager(checkpoint):
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    return model, transformers.AutoTokenizer.from_pretrained(checkpoint)


def _decoder(out: str) -> str:
    with open(os.path.join(out, "fx2onnx.json"), encoding="utf-8") as f:
        return os.path.join(out, json.load(f)["decoder"])


def test_generates_transformers_greedy_tokens(folders):
    name, checkpoint, out = folders
    model, tokenizer = _eager(checkpoint)
    generator = FolderGenerator(out)
    ids = tokenizer(PROMPTS[0], return_tensors="pt")["input_ids"]
    expected = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    got = generator.generate_text(PROMPTS[0], max_new_tokens=NEW_TOKENS)
    assert got.prompt_ids == ids[0].tolist()
    assert got.new_ids == expected[0, ids.shape[1]:].tolist(), name


def test_every_state_is_an_input_output_pair(folders):
    name, _, out = folders
    proto = onnx.load(_decoder(out), load_external_data=False)
    pairs = json.loads({p.key: p.value for p in proto.metadata_props}[CACHE_METADATA_KEY])
    inputs = {i.name: i for i in proto.graph.input}
    outputs = {o.name for o in proto.graph.output}
    assert pairs and all(past in inputs and present in outputs for past, present in pairs.items())
    fixed = [p for p in pairs if all(d.dim_value for d in inputs[p].type.tensor_type.shape.dim[1:])]
    # the convolution and recurrent states keep their shape (batch apart), the keys and values grow
    expected_fixed = {"lfm2": 1, "jamba": 2}.get(name, 0)
    assert len(fixed) == expected_fixed, (name, list(pairs))
    if name == "gpt_neox":
        key = next(p for p in pairs if "key" in p)
        assert inputs[key].type.tensor_type.shape.dim[1].dim_value == 4
    # the names transformers.js reads (getCacheNames: past_conv.N for LFM2's conv layers, past_ssm.N for Mamba's)
    expected_names = {"lfm2": {"past_conv.0": "present_conv.0", "past_key_values.1.key": "present.1.key",
                               "past_key_values.1.value": "present.1.value"},
                      "jamba": {"past_conv.0": "present_conv.0", "past_ssm.0": "present_ssm.0",
                                "past_key_values.1.key": "present.1.key", "past_key_values.1.value": "present.1.value"}}
    if name in expected_names:
        assert pairs == expected_names[name]
    with open(os.path.join(out, "fx2onnx.json"), encoding="utf-8") as f:
        assert json.load(f)["cache_pairs"] == pairs


def test_left_padded_batch_generates_as_transformers(folders):
    # the shorter prompt padded on the left: the convolution and recurrent states see the pads as transformers' do
    name, checkpoint, out = folders
    model, tokenizer = _eager(checkpoint)
    tokenizer.padding_side = "left"
    encoded = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    assert (encoded["attention_mask"] == 0).any()
    expected = model.generate(**encoded, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    got = [r.new_ids for r in FolderGenerator(out).generate_texts(PROMPTS, max_new_tokens=NEW_TOKENS)]
    assert got == expected[:, encoded["input_ids"].shape[1]:].tolist(), name


def test_state_names_as_transformers_js_reads_them():
    assert state_names("past_key_values_conv_0") == ("past_conv.0", "present_conv.0")
    assert state_names("past_key_values_recurrent_3") == ("past_recurrent.3", "present_recurrent.3")
    assert state_names("past_key_values_recurrent_3", mamba=True) == ("past_ssm.3", "present_ssm.3")
    assert state_names("past_key_values_conv_2_1") == ("past_conv.2.1", "present_conv.2.1")
    assert state_names("past_key_values.1.key") is None and state_names("past_key_values_key_1") is None
    assert is_mamba_config(_jamba()) and not is_mamba_config(_lfm2())
