"""onnxruntime-genai gets a ``genai_config.json`` only for a folder it runs. A folder's decoder with sliding-window
layers holds the whole past in every layer, the window applied by the mask (:mod:`fx2onnx.inputs.full_cache`): genai
runs it, and so does our loop, past the window. A decoder whose cache is cut to the window in the graph (a present
shorter than genai's buffer) gets no config, and the reason."""

from __future__ import annotations

import json
import os

import pytest
import transformers

from fx2onnx.__main__ import main
from fx2onnx.deploy.genai_config import sliding_window, write_genai_config
from fx2onnx.testing.tokenizer import write_checkpoint_folder

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, vocab_size=384, max_position_embeddings=256)


def _pairs(layers: int) -> tuple[list[str], dict[str, str]]:
    pairs = {f"past_key_values.{i}.{kv}": f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")}
    return ["input_ids", "attention_mask", "position_ids", *pairs], pairs


@pytest.mark.parametrize("config, window", [
    (transformers.Gemma3TextConfig(sliding_window=8, layer_types=["sliding_attention", "full_attention"], **SMALL), 8),
    (transformers.MistralConfig(sliding_window=16, **SMALL), 16),
    (transformers.Qwen3Config(sliding_window=16, use_sliding_window=False, **SMALL), None),
    (transformers.MistralConfig(sliding_window=None, **SMALL), None),
])
def test_a_decoder_gets_no_genai_config_when_its_cache_is_cut_to_the_window(tmp_path, config, window):
    assert sliding_window(config) == window
    generation = transformers.GenerationConfig(eos_token_id=2)
    # the whole past in every layer (a folder's decoder): a config
    assert write_genai_config(str(tmp_path), "onnx/model.onnx", config, generation, *_pairs(2)) is None
    genai = json.load(open(tmp_path / "genai_config.json"))["model"]["decoder"]
    assert genai["filename"] == "onnx/model.onnx"
    assert genai["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert genai["outputs"]["present_value_names"] == "present.%d.value"
    os.remove(tmp_path / "genai_config.json")
    # the sliding layers cut to the window in the graph: none, and the reason
    why = write_genai_config(str(tmp_path), "onnx/model.onnx", config, generation, *_pairs(2), cache_cut_to_window=True)
    written = os.path.isfile(tmp_path / "genai_config.json")
    if window is None:
        assert why is None and written
    else:
        assert not written and f"a window of {window} tokens" in why and "\n" not in why


def test_layers_of_other_head_sizes_get_no_genai_config(tmp_path):
    config = transformers.Gemma4TextConfig(**{**SMALL, "layer_types": ["sliding_attention", "full_attention"]})
    why = write_genai_config(str(tmp_path), "onnx/model.onnx", config, transformers.GenerationConfig(eos_token_id=2),
                             *_pairs(2))
    assert "one head size" in why and not os.path.isfile(tmp_path / "genai_config.json")


def test_an_end_token_of_zero_is_a_token(tmp_path):
    config = transformers.Qwen3Config(eos_token_id=5, **SMALL)
    generation = transformers.GenerationConfig(eos_token_id=0)
    assert write_genai_config(str(tmp_path), "onnx/model.onnx", config, generation, *_pairs(2)) is None
    assert json.load(open(tmp_path / "genai_config.json"))["model"]["eos_token_id"] == 0


@pytest.mark.slow  # two folders exported: the configs above are the fast tier's check
@pytest.mark.parametrize("config", [
    transformers.MistralConfig(sliding_window=8, architectures=["MistralForCausalLM"], **SMALL),
    transformers.Gemma3TextConfig(sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                                  architectures=["Gemma3ForCausalLM"], **SMALL),
], ids=["mistral", "gemma3"])
def test_a_sliding_window_folder_generates_past_the_window(tmp_path, config):
    import numpy as np
    import onnxruntime_genai as og
    import torch

    from fx2onnx.runtime.folder import FolderGenerator

    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "onnx")
    write_checkpoint_folder(config, checkpoint, dtype="bfloat16", std=0.08)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    assert json.load(open(os.path.join(out, "fx2onnx.json")))["genai"] is None
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    model.generation_config.eos_token_id = None
    ids = torch.randint(3, 380, (2, 14), generator=torch.Generator().manual_seed(1))  # 14 + 12 tokens > 8
    expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    # the window matters: the same model seeing the whole context writes other tokens
    model.config.sliding_window = 1000
    assert not torch.equal(model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                                          do_sample=False), expected)
    np.testing.assert_array_equal(FolderGenerator(out).generator.generate(ids.numpy(), 12), expected.numpy())
    genai = og.Model(out)
    params = og.GeneratorParams(genai)
    params.set_search_options(max_length=14 + 12, do_sample=False)
    generator = og.Generator(genai, params)
    generator.append_tokens(ids[:1].numpy().astype(np.int32))
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    assert tokens == expected[0, 14:].tolist()
