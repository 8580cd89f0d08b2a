"""onnxruntime-genai gets a ``genai_config.json`` only for a folder it runs: a decoder with sliding-window layers (its
cache cut to the window in the graph, a present shorter than genai's buffer) gets none, and the reason."""

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
def test_sliding_window_decoders_get_no_genai_config(tmp_path, config, window):
    assert sliding_window(config) == window
    generation = transformers.GenerationConfig(eos_token_id=2)
    why = write_genai_config(str(tmp_path), "onnx/model.onnx", config, generation, *_pairs(2))
    written = os.path.isfile(tmp_path / "genai_config.json")
    if window is None:
        assert why is None and written
        genai = json.load(open(tmp_path / "genai_config.json"))["model"]["decoder"]
        assert genai["filename"] == "onnx/model.onnx"
        assert genai["inputs"]["past_key_names"] == "past_key_values.%d.key"
        assert genai["outputs"]["present_value_names"] == "present.%d.value"
    else:
        assert not written and f"a window of {window} tokens" in why and "\n" not in why


def test_an_end_token_of_zero_is_a_token(tmp_path):
    config = transformers.Qwen3Config(eos_token_id=5, **SMALL)
    generation = transformers.GenerationConfig(eos_token_id=0)
    assert write_genai_config(str(tmp_path), "onnx/model.onnx", config, generation, *_pairs(2)) is None
    assert json.load(open(tmp_path / "genai_config.json"))["model"]["eos_token_id"] == 0


@pytest.mark.slow  # a folder exported: the configs above are the fast tier's check
def test_a_mistral_folder_with_a_window_says_why(tmp_path, capsys):
    checkpoint, out = str(tmp_path / "mistral"), str(tmp_path / "mistral_onnx")
    config = transformers.MistralConfig(sliding_window=8, architectures=["MistralForCausalLM"], **SMALL)
    write_checkpoint_folder(config, checkpoint, dtype="bfloat16", std=0.3)
    capsys.readouterr()
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    summary = capsys.readouterr().out
    assert not os.path.exists(os.path.join(out, "genai_config.json"))
    reason = json.load(open(os.path.join(out, "fx2onnx.json")))["genai"]
    assert "sliding-window layers (a window of 8 tokens" in reason
    assert f"  onnxruntime-genai: no genai_config.json ({reason})" in summary.splitlines()
