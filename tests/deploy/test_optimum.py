"""The folder ``python -m fx2onnx export`` writes runs as it is in optimum's ``ORTModelForCausalLM`` (optimum-onnx),
in its own environment: optimum pins transformers 4.57. The environment is made once under the temporary folder by
:func:`fx2onnx.testing.optimum_env.optimum_environment` (no other torch is downloaded: this environment's is put first
on its path); the tests are skipped, with pip's reason, where it does not install."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch
import transformers

from fx2onnx.testing.optimum_env import optimum_environment


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "clients", "optimum_generate.py")


@pytest.fixture(scope="module")
def optimum_python() -> tuple[str, dict[str, str]]:
    """optimum's environment (made on first use, shared with the benchmarks): its Python and the variables
    that put this environment's torch first on its path; skipped, with pip's reason, where it does not install."""
    try:
        return optimum_environment()
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.mark.slow
def test_optimum_generates_transformers_tokens(optimum_python, qwen3_export):
    """The default folder (GroupQueryAttention, the present fed back by optimum) in ORTModelForCausalLM: transformers'
    greedy tokens."""
    checkpoint, out = qwen3_export
    prompt = [5, 60, 7, 200, 31]
    python, env = optimum_python
    done = subprocess.run([python, SCRIPT, out, json.dumps(prompt), "12"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])["new_ids"]
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False)
    assert got == expected[0, len(prompt):].tolist() and len(set(got)) > 3


SEQ2SEQ_SCRIPT = os.path.join(ROOT, "tests", "clients", "optimum_seq2seq.py")


def _optimum_seq2seq(optimum_python: tuple[str, dict[str, str]], folder: str, inputs: dict, new_tokens: int,
                     tmp_path) -> list:
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(inputs))
    python, env = optimum_python
    done = subprocess.run([python, SEQ2SEQ_SCRIPT, folder, str(path), str(new_tokens)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["sequences"]


@pytest.mark.slow
def test_optimum_seq2seq_lm_generates_transformers_tokens(optimum_python, t5_export, tmp_path):
    """The T5 folder (encoder_model.onnx, decoder_model_merged.onnx and its use_cache_branch) in
    ORTModelForSeq2SeqLM: transformers' greedy sequences on a padded batch."""
    checkpoint, out = t5_export
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint)
    inputs = tok(["hello world, the exporter converts", "a robot learning to paint"], padding=True,
                 return_tensors="pt")
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    expected = model.generate(**inputs, max_new_tokens=12, do_sample=False).tolist()
    got = _optimum_seq2seq(optimum_python, out, {k: v.tolist() for k, v in inputs.items()}, 12, tmp_path)
    assert got == expected and len({t for row in expected for t in row}) > 3


@pytest.mark.slow
def test_optimum_speech_seq2seq_generates_transformers_tokens(optimum_python, whisper_export, tmp_path):
    """The Whisper folder in ORTModelForSpeechSeq2Seq: transformers' greedy tokens."""
    checkpoint, out, features = whisper_export
    model = transformers.WhisperForConditionalGeneration.from_pretrained(checkpoint, dtype=torch.float32).eval()
    expected = model.generate(torch.tensor(features), max_new_tokens=12, do_sample=False).tolist()
    got = _optimum_seq2seq(optimum_python, out, {"input_features": features}, 12, tmp_path)
    assert got[0][-12:] == expected[0][-12:] and len(set(expected[0])) > 2
