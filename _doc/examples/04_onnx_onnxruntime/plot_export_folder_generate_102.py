"""
.. _l-plot-export-folder-generate-102:

From a checkpoint folder to generated text in two commands
==========================================================

A user brings a ``save_pretrained`` folder (bfloat16 safetensors, a tokenizer, a
generation config) and wants a folder back that generates text on CPU. Two commands:

.. code-block:: bash

    python -m fx2onnx export FOLDER --out OUTDIR
    python -m fx2onnx generate OUTDIR "a prompt" --max-new-tokens 24

This example writes such a folder with the published widths of Qwen3-0.6B (hidden 1024,
16 heads, 8 key-value heads, head dimension 128, MLP 3072, tied embeddings) but 2 layers
instead of 28 and the vocabulary of a tokenizer trained in code (about 300 tokens
instead of 151,936: no download), random bfloat16 weights, then runs both commands as a user would
and checks the text against :epkg:`transformers`.

The checkpoint folder
---------------------
"""

import os
import subprocess
import sys
import tempfile

import matplotlib.pyplot as plt
import torch
import transformers

from fx2onnx.testing.tokenizer import write_checkpoint_folder

config = transformers.Qwen3Config(
    hidden_size=1024,
    intermediate_size=3072,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    num_hidden_layers=2,
    vocab_size=384,
    tie_word_embeddings=True,
    rope_theta=1_000_000.0,
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    architectures=["Qwen3ForCausalLM"],
)
work = tempfile.TemporaryDirectory()
checkpoint, out = os.path.join(work.name, "qwen3"), os.path.join(work.name, "qwen3_onnx")
write_checkpoint_folder(config, checkpoint, dtype="bfloat16", std=0.1)
print(sorted(os.listdir(checkpoint)))


def run(*argv: str) -> subprocess.CompletedProcess:
    """Runs ``python -m fx2onnx ...`` as a user would, prints what it prints."""
    done = subprocess.run([sys.executable, "-m", "fx2onnx", *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    err = [
        line
        for line in done.stderr.splitlines()
        if line.startswith(("exporting", "checking", "prefill"))
    ]
    lines = [f"$ python -m fx2onnx {' '.join(a if ' ' not in a else repr(a) for a in argv)}"]
    lines += [line for line in err if not line.startswith("prefill")] + [done.stdout.rstrip()]
    lines += [line for line in err if line.startswith("prefill")]
    print("\n".join(lines).replace(work.name + os.sep, ""))  # paths relative to the temporary folder
    return done


# %%
# Export: no flag
# ---------------
# Without a flag the command exports what generates: the model with its cache, float32
# (the type of onnxruntime's CPU kernels), optimized for onnxruntime. It copies the
# tokenizer, config and generation config, writes ``genai_config.json`` (the same folder
# runs in :epkg:`onnxruntime-genai`) and checks two input sets against eager float32. The
# model and its weights go under ``onnx/``, where transformers.js and optimum look for them.

run("export", checkpoint, "--out", out, "--quiet")
print(sorted(os.listdir(out)), sorted(os.listdir(os.path.join(out, "onnx"))))

# %%
# Generate
# --------
# The prompt is encoded by the folder's tokenizer, offline, the text is printed as it
# is decoded, then the speed of the prefill and of the decoding. Greedy by default.

prompt = "The exporter converts the graph"
greedy = run("generate", out, prompt, "--max-new-tokens", "24")

# %%
# The same text as transformers' greedy ``generate`` on the checkpoint (float32):

transformers.utils.logging.disable_progress_bar()
model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
ids = tokenizer(prompt, return_tensors="pt")
expected = model.generate(**ids, max_new_tokens=24, do_sample=False)
text = tokenizer.decode(expected[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
print(repr(text))
assert greedy.stdout == text + "\n"

# %%
# Sampling follows transformers' definitions (temperature, top-k, top-p, repetition
# penalty), its draws those of ``torch.manual_seed(seed)``; ``--chat`` applies the
# tokenizer's chat template. Top-k and top-p cut the distribution at a threshold: a
# token whose probability differs by 1e-6 between the two runtimes may fall on the other
# side of it, so the comparison below samples from the whole distribution (``--top-k 0``).

sampled = run(
    "generate",
    out,
    "Write a short story",
    "--chat",
    "--temperature",
    "0.8",
    "--top-k",
    "0",
    "--seed",
    "0",
    "--max-new-tokens",
    "24",
)
torch.manual_seed(0)
chat = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Write a short story"}],
    add_generation_prompt=True,
    return_tensors="pt",
    return_dict=True,
)
expected = model.generate(**chat, max_new_tokens=24, do_sample=True, temperature=0.8, top_k=0)
assert (
    sampled.stdout
    == tokenizer.decode(expected[0, chat["input_ids"].shape[1] :], skip_special_tokens=True) + "\n"
)

# %%
# Smaller: int4
# -------------
# ``--quantize int4`` stores the weights of the linear layers as onnxruntime's
# ``MatMulNBits`` (blocks of 32 values sharing a scale); the check against eager then
# reports the difference instead of holding it to a tolerance.

out4 = os.path.join(work.name, "qwen3_int4")
run("export", checkpoint, "--out", out4, "--quantize", "int4", "--quiet")
run("generate", out4, prompt, "--max-new-tokens", "24")


def size(folder: str) -> float:
    return (
        sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder) for f in files)
        / 2**20
    )


sizes = {"checkpoint (bf16)": size(checkpoint), "export float32": size(out), "export int4": size(out4)}
print({k: f"{v:.1f} MiB" for k, v in sizes.items()})
assert sizes["export int4"] < sizes["checkpoint (bf16)"] < sizes["export float32"]

fig, ax = plt.subplots(figsize=(6, 3))
ax.barh(list(sizes), list(sizes.values()), color=["gray", "tab:blue", "tab:green"])
ax.set_xlabel("folder size (MiB)")
ax.set_title("Qwen3-0.6B widths, 2 layers: the folders")
fig.tight_layout()
work.cleanup()
