"""The folder ``python -m fx2onnx export`` writes runs as it is in transformers.js (``@huggingface/transformers``)
in Node (onnxruntime-node) and in headless Chromium (onnxruntime-web): its greedy tokens are transformers'. The
packages are installed by ``make venv`` (``package.json`` at the root, ``npm ci --ignore-scripts``); the tests are
skipped only where ``node`` is absent, the browser's where Debian's ``chromium`` is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import torch
import transformers

from fx2onnx.__main__ import main
from fx2onnx.testing.tokenizer import write_checkpoint_folder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "clients", "transformersjs_generate.mjs")
BROWSER_SCRIPT = os.path.join(ROOT, "tests", "clients", "transformersjs_browser.mjs")
PROMPT = "hello world, the exporter"

pytestmark = pytest.mark.skipif(shutil.which("node") is None,
                                reason="node is not installed: transformers.js runs in Node")


def transformersjs_generate(folder: str, prompt: str | list[int], new_tokens: int, script: str = SCRIPT,
                            dtype: str = "") -> dict:
    """What the Node script prints: transformers.js' greedy tokens after ``prompt`` (a text or token ids); ``dtype``:
    the file transformers.js selects (default: the one config.json names)."""
    if not os.path.isdir(os.path.join(ROOT, "node_modules", "@huggingface", "transformers")):
        pytest.fail("transformers.js is not installed: run make venv (npm ci --ignore-scripts at the root)")
    argument = prompt if isinstance(prompt, str) else json.dumps(prompt)
    extra = ["0", dtype] if dtype else []
    done = subprocess.run(["node", script, folder, argument, str(new_tokens), *extra], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_transformersjs_generates_transformers_tokens(qwen3_export):
    """The default folder (the cache in place through GroupQueryAttention, which concatenates when the caller does
    not bind buffers) in transformers.js: its tokenizer encodes the prompt as transformers' does, its greedy
    tokens and text are transformers' ``generate``."""
    checkpoint, out = qwen3_export
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["transformers.js_config"] == {"use_external_data_format": {"model.onnx": 1}, "dtype": "fp32"}
    got = transformersjs_generate(out, PROMPT, 16)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint)
    ids = tok(PROMPT, return_tensors="pt")
    assert got["prompt_ids"] == ids["input_ids"][0].tolist()
    expected = model.generate(**ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)
    new = expected[0, ids["input_ids"].shape[1]:].tolist()
    assert len(set(new)) > 3  # the tokens vary: a real check
    assert got["new_ids"] == new
    assert got["text"] == tok.decode(new, skip_special_tokens=True)


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="chromium is not installed (Debian's package: apt-get install chromium; .ci/run does)")
def test_transformersjs_in_headless_chromium_generates_transformers_tokens(qwen3_export):
    """The same folder in a browser: transformers.js' web build on onnxruntime-web (WASM) in headless Chromium, the
    page and the folder served on 127.0.0.1; transformers' greedy tokens."""
    checkpoint, out = qwen3_export
    prompt = [5, 60, 7, 200, 31]
    got = transformersjs_generate(out, prompt, 12, script=BROWSER_SCRIPT)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False)
    assert got["new_ids"] == expected[0, len(prompt):].tolist() and len(set(got["new_ids"])) > 3


@pytest.mark.slow  # the fast tier runs the float32 folder
def test_transformersjs_runs_the_int4_folder_as_our_loop(qwen3_export, tmp_path):
    """``--quantize int4`` (onnxruntime's MatMulNBits and GatherBlockQuantized) writes ``onnx/model_q4.onnx``, the file
    transformers.js selects for ``dtype: "q4"`` (config.json names it its default): transformers.js gives the tokens
    our loop gives on the same folder (not eager's: the weights are quantized)."""
    from fx2onnx.runtime.folder import FolderGenerator

    checkpoint, _ = qwen3_export
    out = str(tmp_path / "int4")
    assert main(["export", checkpoint, "--out", out, "--quiet", "--quantize", "int4"]) == 0
    assert {"model_q4.onnx", "model_q4.onnx_data"} == set(os.listdir(os.path.join(out, "onnx")))
    block = json.load(open(os.path.join(out, "config.json")))["transformers.js_config"]
    assert block == {"use_external_data_format": {"model_q4.onnx": 1}, "dtype": "q4"}
    prompt = [5, 60, 7, 200, 31]
    ours = FolderGenerator(out).generate_text(prompt, 12).new_ids
    assert len(set(ours)) > 3
    assert transformersjs_generate(out, prompt, 12)["new_ids"] == ours  # config.json's dtype
    assert transformersjs_generate(out, prompt, 12, dtype="q4")["new_ids"] == ours  # a user's dtype: "q4"


@pytest.mark.slow
def test_transformersjs_generates_llama_tokens(tmp_path):
    """A Llama folder (another class of transformers.js) gives transformers' greedy tokens."""
    checkpoint, out = str(tmp_path / "llama"), str(tmp_path / "llama_onnx")
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16, vocab_size=384, max_position_embeddings=256,
                                      architectures=["LlamaForCausalLM"])
    write_checkpoint_folder(config, checkpoint, dtype="bfloat16", std=0.3)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    prompt = [5, 60, 7, 200, 31]
    got = transformersjs_generate(out, prompt, 12)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False)
    assert got["new_ids"] == expected[0, len(prompt):].tolist() and len(set(got["new_ids"])) > 3


@pytest.mark.slow
def test_transformersjs_multi_query_folder_and_a_refused_one(tmp_path, capsys):
    """GPTBigCode's multi-query folder: config.json leaves out multi_query (transformers' default, which
    transformers.js would read as one fused key_value cache per layer), transformers.js feeds its keys and values and
    gives transformers' tokens. A decoder-only MBart, whose cache transformers.js does not feed, says so in one line
    and gets no transformers.js_config block."""
    checkpoint, out = str(tmp_path / "bigcode"), str(tmp_path / "bigcode_onnx")
    config = transformers.GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4, n_inner=128, vocab_size=384,
                                           n_positions=256, multi_query=True, architectures=["GPTBigCodeForCausalLM"])
    write_checkpoint_folder(config, checkpoint, dtype="float32", std=0.3)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    assert "multi_query" not in json.load(open(os.path.join(out, "config.json"), encoding="utf-8"))
    assert transformers.AutoConfig.from_pretrained(out).multi_query is True
    prompt = [5, 60, 7, 200, 31]
    got = transformersjs_generate(out, prompt, 8)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert got["new_ids"] == expected[0, len(prompt):].tolist()

    checkpoint, out = str(tmp_path / "mbart"), str(tmp_path / "mbart_onnx")
    config = transformers.MBartConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                      decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                      vocab_size=384, max_position_embeddings=256, architectures=["MBartForCausalLM"])
    write_checkpoint_folder(config, checkpoint, dtype="float32", std=0.3)
    capsys.readouterr()
    assert main(["export", checkpoint, "--out", out, "--quiet", "--no-validate"]) == 0  # the names only
    assert "  transformers.js: transformers.js feeds a decoder-only mbart no cache" in capsys.readouterr().out
    assert "transformers.js_config" not in json.load(open(os.path.join(out, "config.json"), encoding="utf-8"))
