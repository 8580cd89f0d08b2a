"""Tiny transformers models that need the operators added for issue 10: GPT-J (interleaved rotary,
repeat_interleave) and Mixtral (mixture of experts, histc), exported with dynamic batch and sequence
and checked against eager on a second input of other shapes (no cache)."""

from __future__ import annotations

import pytest
import torch
import transformers

import fx2onnx

CONFIGS = {
    "gptj": lambda: transformers.GPTJConfig(n_embd=64, n_layer=2, n_head=4, vocab_size=99, rotary_dim=8, n_positions=64),
    "mixtral": lambda: transformers.MixtralConfig(
        hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=99, num_local_experts=4, num_experts_per_tok=2,
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "mixtral" else n for n in sorted(CONFIGS)])
def test_tiny_model_exports_and_matches(name):
    torch.manual_seed(0)
    config = CONFIGS[name]()
    config.use_cache = False
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids, ids2 = torch.randint(0, 99, (2, 7)), torch.randint(0, 99, (3, 11))
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(model, (), {"input_ids": ids}, dynamic_shapes={"input_ids": {0: "batch", 1: "seq"}})
    targets = {n.metadata_props[i].value for n in onx.graph.node for i in range(len(n.metadata_props)) if n.metadata_props[i].key == "fx_target"}
    expected_op = {"gptj": "aten::repeat_interleave.self_int", "mixtral": "aten::histc"}[name]
    assert expected_op in targets, sorted(targets)
    for inputs in ({"input_ids": ids}, {"input_ids": ids2}):
        report = fx2onnx.validate(onx, model, (), inputs, atol=1e-4, rtol=1e-2)
        assert report.ok, report
