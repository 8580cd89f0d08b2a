"""A causal LM which cannot decode after a transformers cache (OpenAI GPT takes none) is exported without one, said in a
line, and its folder generates transformers' greedy tokens by running the whole sequence at every step."""

import numpy as np
import pytest
import torch
import transformers

from fx2onnx.__main__ import main
from fx2onnx.runtime.folder import FolderGenerator
from fx2onnx.testing.tokenizer import write_checkpoint_folder

PROMPT = "the exporter writes"


@pytest.mark.slow  # an export, transformers' generate
def test_a_model_without_cache_argument_exports_and_generates_without_one(tmp_path, capsys):
    config = transformers.OpenAIGPTConfig(n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                          architectures=["OpenAIGPTLMHeadModel"])
    checkpoint, out = str(tmp_path / "ck"), str(tmp_path / "out")
    write_checkpoint_folder(config, checkpoint, dtype="float32", std=0.3)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    printed = capsys.readouterr()
    assert "takes no cache (no past_key_values argument)" in printed.out + printed.err
    assert "exported without a cache, its loop runs the whole sequence at every step" in printed.out + printed.err
    generator = FolderGenerator(out)
    assert generator.generator.signature.cache == ()
    got = generator.generate_text(PROMPT, max_new_tokens=6)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    ids = transformers.AutoTokenizer.from_pretrained(checkpoint)(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False)[0, ids.shape[1]:]
    assert got.new_ids == expected.tolist()
    # a batch: the same loop, the rows independent
    batch = generator.generator.generate(np.concatenate([ids.numpy()] * 2), max_new_tokens=3)
    assert batch.shape == (2, ids.shape[1] + 3) and (batch[0] == batch[1]).all()
