"""The folder ``python -m fx2onnx export`` writes runs as it is in optimum's ``ORTModelForCausalLM`` (optimum-onnx),
in its own environment: optimum pins transformers 4.57. The environment is made once under the temporary folder
(the pinned packages of :data:`OPTIMUM_PINS` without their dependency on torch: the torch of this environment is
linked into it, no other torch is downloaded); the test is skipped, with pip's reason, where they do not install."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile

import pytest
import torch
import transformers


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "clients", "optimum_generate.py")
#: optimum's stack (its transformers is older than ours), installed without dependencies
OPTIMUM_PINS = ["optimum-onnx==0.1.0", "optimum==2.1.0", "transformers==4.57.6", "huggingface-hub==0.36.2",
                "tokenizers==0.22.2"]
#: their other dependencies but torch
OPTIMUM_DEPENDENCIES = ["onnxruntime==1.31.1", "onnx", "numpy", "sympy", "networkx", "jinja2", "fsspec", "filelock",
                        "typing_extensions", "packaging", "pyyaml", "regex", "requests", "safetensors", "tqdm"]


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines()
        pytest.skip(f"optimum's environment does not install here: {lines[-1] if lines else done.returncode}")


@pytest.fixture(scope="module")
def optimum_python() -> str:
    """The Python of optimum's environment (made on first use)."""
    versions = "-".join(p.split("==")[1] for p in OPTIMUM_PINS[:3])
    venv = os.path.join(tempfile.gettempdir(), f"fx2onnx-optimum-{versions}")
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".complete")  # holds the torch folder linked: another environment's is made again
    ours = os.path.realpath(os.path.dirname(os.path.dirname(torch.__file__)))
    if not os.path.isfile(marker) or open(marker).read() != ours:
        _run(sys.executable, "-m", "venv", "--clear", venv)
        _run(python, "-m", "pip", "install", "-q", "--no-deps", *OPTIMUM_PINS)
        _run(python, "-m", "pip", "install", "-q", *OPTIMUM_DEPENDENCIES)
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        for name in ("torch", "torchgen", "functorch", *map(os.path.basename,
                                                            glob.glob(os.path.join(ours, "torch-*.dist-info")))):
            if os.path.exists(os.path.join(ours, name)):
                os.symlink(os.path.join(ours, name), os.path.join(site, name))
        with open(marker, "w") as f:
            f.write(ours)
    return python


@pytest.mark.slow
def test_optimum_generates_transformers_tokens(optimum_python, qwen3_export):
    """The default folder (GroupQueryAttention, the present fed back by optimum) in ORTModelForCausalLM: transformers'
    greedy tokens."""
    checkpoint, out = qwen3_export
    prompt = [5, 60, 7, 200, 31]
    done = subprocess.run([optimum_python, SCRIPT, out, json.dumps(prompt), "12"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])["new_ids"]
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False)
    assert got == expected[0, len(prompt):].tolist() and len(set(got)) > 3


SEQ2SEQ_SCRIPT = os.path.join(ROOT, "tests", "clients", "optimum_seq2seq.py")


def _optimum_seq2seq(optimum_python: str, folder: str, inputs: dict, new_tokens: int, tmp_path) -> list:
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(inputs))
    done = subprocess.run([optimum_python, SEQ2SEQ_SCRIPT, folder, str(path), str(new_tokens)], capture_output=True,
                          text=True, timeout=600)
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
