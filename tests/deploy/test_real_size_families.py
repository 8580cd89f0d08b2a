"""The two configurations of ``bench/bench_real_size_families.py`` at tiny widths, their layer patterns kept:
LFM2-1.2B's first four layers (conv, conv, attention, conv) and DeepSeek-V2-Lite's structure (latent attention
without a query low rank, YaRN rotary, a dense first layer then mixture-of-experts layers). ``export FOLDER`` (no
flag) then our loop gives transformers' greedy tokens; the benchmark measures the same at the published widths."""

from __future__ import annotations

import pytest
import torch
import transformers

from fx2onnx.__main__ import main
from fx2onnx.runtime.folder import FolderGenerator
from fx2onnx.testing.tokenizer import write_checkpoint_folder

pytestmark = pytest.mark.slow
PROMPT = "hello world, the exporter"
NEW_TOKENS = 12


def _lfm2():
    return transformers.Lfm2Config(hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=256, conv_L_cache=3,
                                   block_auto_adjust_ff_dim=True, block_multiple_of=32,
                                   layer_types=["conv", "conv", "full_attention", "conv"],
                                   architectures=["Lfm2ForCausalLM"])


def _deepseek_v2_lite():
    rope = dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, beta_fast=32.0, beta_slow=1.0, mscale=0.707,
                mscale_all_dim=0.707, original_max_position_embeddings=64)
    return transformers.DeepseekV2Config(hidden_size=64, intermediate_size=160, moe_intermediate_size=32,
                                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                                         n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=3,
                                         first_k_dense_replace=1, n_group=1, topk_group=1, topk_method="greedy",
                                         q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                         v_head_dim=16, head_dim=8, max_position_embeddings=2560,
                                         rope_parameters=rope, architectures=["DeepseekV2ForCausalLM"])


@pytest.fixture(scope="module", params=["lfm2", "deepseek_v2_lite"])
def folders(request, tmp_path_factory):
    """A bf16 checkpoint folder with a tokenizer, and the folder ``export`` (no flag: float32) wrote from it."""
    root = tmp_path_factory.mktemp(request.param)
    checkpoint, out = str(root / "checkpoint"), str(root / "exported")
    config = {"lfm2": _lfm2, "deepseek_v2_lite": _deepseek_v2_lite}[request.param]()
    write_checkpoint_folder(config, checkpoint, dtype="bfloat16", std=0.3)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return request.param, checkpoint, out


def test_generates_transformers_greedy_tokens(folders):
    name, checkpoint, out = folders
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    ids = transformers.AutoTokenizer.from_pretrained(checkpoint)(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    got = FolderGenerator(out).generate_text(PROMPT, max_new_tokens=NEW_TOKENS)
    assert got.prompt_ids == ids[0].tolist()
    assert got.new_ids == expected[0, ids.shape[1]:].tolist(), name
    assert len(set(got.new_ids)) > 1, "a random model generating one token over and over proves little"
