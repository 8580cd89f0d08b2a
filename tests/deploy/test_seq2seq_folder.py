"""Encoder-decoder folders (T5, Whisper) in the layout transformers.js and optimum load: ``onnx/encoder_model.onnx``
and ``onnx/decoder_model_merged.onnx`` with optimum's names; our ``generate`` and transformers.js in Node give
transformers' greedy tokens (optimum's: tests/deploy/test_optimum.py). Slow tier: each folder is an export."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import onnx
import pytest
import torch
import transformers

from fx2onnx.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "clients", "transformersjs_seq2seq.mjs")
PROMPTS = ["hello world, the exporter converts", "a robot learning to paint"]

pytestmark = pytest.mark.slow


def transformersjs_seq2seq(folder: str, inputs: dict, new_tokens: int, tmp_path, dtype: str = "fp32") -> list:
    """transformers.js' greedy sequences (the decoder's prompt first) on ``inputs`` (ids and mask, or features)."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: transformers.js runs in Node")
    if not os.path.isdir(os.path.join(ROOT, "node_modules", "@huggingface", "transformers")):
        pytest.fail("transformers.js is not installed: run make venv (npm ci --ignore-scripts at the root)")
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(inputs))
    done = subprocess.run(["node", SCRIPT, folder, str(path), str(new_tokens), dtype], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["sequences"]


def _t5_expected(checkpoint: str, new_tokens: int) -> tuple[dict, list]:
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint)
    inputs = tok(PROMPTS, padding=True, return_tensors="pt")
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    expected = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
    return {k: v.tolist() for k, v in inputs.items()}, expected.tolist()


def _until_eos(tokens: list, eos: int) -> list:
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def test_t5_folder_layout(t5_export):
    """The files and names transformers.js and optimum load."""
    _, out = t5_export
    assert {"encoder_model.onnx", "encoder_model.onnx_data", "decoder_model_merged.onnx",
            "decoder_model_merged.onnx_data"} <= set(os.listdir(os.path.join(out, "onnx")))
    encoder = onnx.load(os.path.join(out, "onnx", "encoder_model.onnx"), load_external_data=False)
    assert [i.name for i in encoder.graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in encoder.graph.output] == ["last_hidden_state"]
    decoder = onnx.load(os.path.join(out, "onnx", "decoder_model_merged.onnx"), load_external_data=False)
    inputs = [i.name for i in decoder.graph.input]
    assert inputs[:8] == ["input_ids", "encoder_attention_mask", "encoder_hidden_states", "use_cache_branch",
                          "past_key_values.0.decoder.key", "past_key_values.0.decoder.value",
                          "past_key_values.0.encoder.key", "past_key_values.0.encoder.value"]
    assert [o.name for o in decoder.graph.output][:5] == ["logits", "present.0.decoder.key", "present.0.decoder.value",
                                                          "present.0.encoder.key", "present.0.encoder.value"]
    assert decoder.graph.input[4].type.tensor_type.shape.dim[0].dim_param == "batch_size"
    assert [n.op_type for n in decoder.graph.node].count("If") == 1
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["transformers.js_config"]["use_external_data_format"] == {"encoder_model.onnx": 1,
                                                                           "decoder_model_merged.onnx": 1}
    assert json.load(open(os.path.join(out, "fx2onnx.json")))["task"] == "text2text-generation"


def test_t5_generate_equals_transformers(t5_export, capsys):
    """``generate OUT PROMPT PROMPT``: a batch of two texts padded, transformers' greedy tokens and texts."""
    checkpoint, out = t5_export
    _, expected = _t5_expected(checkpoint, 12)
    eos = transformers.AutoConfig.from_pretrained(checkpoint).eos_token_id
    rows = [_until_eos(e[1:], eos) for e in expected]
    assert len({t for r in rows for t in r}) > 3  # the tokens vary: a real check
    capsys.readouterr()
    assert main(["generate", out, *PROMPTS, "--max-new-tokens", "12", "--print-ids"]) == 0
    got = [[int(t) for t in line.split(",")] for line in capsys.readouterr().out.strip().splitlines()]
    assert got == rows


def test_t5_in_transformersjs(t5_export, tmp_path):
    """transformers.js' AutoModelForSeq2SeqLM loads the folder as it is: transformers' greedy sequences."""
    checkpoint, out = t5_export
    inputs, expected = _t5_expected(checkpoint, 12)
    assert transformersjs_seq2seq(out, inputs, 12, tmp_path) == expected


def _whisper_expected(checkpoint: str, features: list, new_tokens: int) -> list:
    model = transformers.WhisperForConditionalGeneration.from_pretrained(checkpoint, dtype=torch.float32).eval()
    return model.generate(torch.tensor(features), max_new_tokens=new_tokens, do_sample=False,
                          language="en").tolist()


def test_whisper_folder_generates_transformers_tokens(whisper_export, tmp_path):
    """The Whisper folder: our loop, transformers.js' AutoModelForSpeechSeq2Seq (English, its default) and
    transformers give the same tokens."""
    import numpy as np

    from fx2onnx.runtime.speech import SpeechGenerator

    checkpoint, out, features = whisper_export
    assert json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["decoder"]["file"] == \
        "onnx/decoder_model_merged.onnx"
    [expected] = _whisper_expected(checkpoint, features, 12)
    assert len(set(expected)) > 2
    result = SpeechGenerator(out).generate_ids(np.asarray(features, dtype=np.float32), 12, language="en")
    eos = transformers.AutoConfig.from_pretrained(checkpoint).eos_token_id
    assert result.new_ids[0] == _until_eos(expected, eos)
    [js] = transformersjs_seq2seq(out, {"input_features": features}, 12, tmp_path)
    assert js[len(result.prompt_ids[0]):] == expected
