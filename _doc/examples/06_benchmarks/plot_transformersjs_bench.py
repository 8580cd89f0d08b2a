"""
.. _l-plot-transformersjs-bench:

Decoder folders in transformers.js: fx2onnx beside optimum
==========================================================

transformers.js (``@huggingface/transformers`` in Node, on onnxruntime-node) runs the folder
``python -m fx2onnx export FOLDER --out OUT`` writes as it is, and the folder optimum's exporter
writes (``onnx/model.onnx``). ``bench/bench_transformersjs.py`` exports the same checkpoint with both
(a Qwen3 config with the published widths of Qwen3-0.6B, its depth and vocabulary printed below:
the stored run has Qwen3-0.6B's 28 layers and 151,936 tokens, random bfloat16 weights, a tokenizer
made in code beside them), float32 and int4: ours with
``--quantize int4`` (``onnx/model_q4.onnx``), optimum's quantized as transformers.js' conversion
scripts do (onnxruntime's ``MatMulNBitsQuantizer``, blocks of 32, symmetric). Each folder then runs in
``bench/transformersjs_speed.mjs``: greedy, a prompt of 16 tokens, a warm-up, then rounds of one new
token (the first-token time) and of ``new`` tokens (the decode speed), the medians kept, at 1 and 2
intra-op threads, the exporters interleaved. Runs that record it also give the decode speed in the
process' CPU time (``cpu tok/s``): at 1 thread it is the compute and hardly moves when other jobs load
the machine, where the wall-clock speed does; at 2 threads it counts the workers' spinning too.

The page renders ``_doc/bench/transformersjs.json`` (exports and runs take minutes); the command,
the widths and the machine are printed with the rows.
"""

import json
import os

import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
root = os.path.join(here, "..", "..", "..")
with open(os.path.join(root, "_doc", "bench", "transformersjs.json"), encoding="utf-8") as f:
    stored = json.load(f)
rows = stored["rows"]
print(
    f"Qwen3, {stored['widths']} widths, {stored['layers']} layers, vocabulary {stored['vocab']}; "
    f"{stored['new']} new tokens, {stored['rounds']} rounds"
)
print(f"{stored['date']}: {stored['command']}")
print(stored["machine"])

# %%
# The rows
# --------
# ``same``: whether both folders generated the same greedy tokens; ``=hf``: whether they are
# transformers' greedy tokens on the checkpoint. In float32 both folders compute the model and must
# give them; the two int4 quantizations round the weights their own way (random weights give nearly
# uniform logits: the tokens part after a few steps). optimum's transformers (4.57) reads
# ``rope_theta`` at the top of config.json, where transformers 5 writes ``rope_parameters``: the script
# gives optimum's exporter the same config with both.

print(
    f"{'dtype':<6} {'threads':>7} {'exporter':<9} {'MB':>8} {'first token ms':>14} "
    f"{'decode tok/s':>12} {'cpu tok/s':>9}  same  =hf"
)
for r in rows:
    cpu = f"{r['decode_tok_s_cpu']:>9.2f}" if "decode_tok_s_cpu" in r else f"{'':>9}"
    print(
        f"{r['dtype']:<6} {r['threads']:>7} {r['exporter']:<9} {r['size_mb']:>8.1f} "
        f"{r['first_token_ms']:>14.1f} {r['decode_tok_s']:>12.1f} {cpu}  {r['same_tokens']!s:<5} "
        f"{r['transformers_tokens']}"
    )
    if r["dtype"] == "fp32":
        assert r["transformers_tokens"], r
keys = sorted({(r["dtype"], r["threads"]) for r in rows})
by = {(r["dtype"], r["threads"], r["exporter"]): r for r in rows}
assert all((d, t, e) in by for d, t in keys for e in ("fx2onnx", "optimum"))

# %%
# The ratios: fx2onnx's decode speed over optimum's, and its size over optimum's.

for d, t in keys:
    ours, theirs = by[d, t, "fx2onnx"], by[d, t, "optimum"]
    print(
        f"{d:<5} {t} thread(s): decode x{ours['decode_tok_s'] / theirs['decode_tok_s']:.2f}, "
        f"first token x{theirs['first_token_ms'] / ours['first_token_ms']:.2f} faster, "
        f"size x{ours['size_mb'] / theirs['size_mb']:.2f}"
        + (f", decode in CPU time x{ours['decode_tok_s_cpu'] / theirs['decode_tok_s_cpu']:.2f}"
           if t == 1 and "decode_tok_s_cpu" in ours else "")
    )

# %%
# The plot
# --------

fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
labels = [f"{d}\n{t} thr" for d, t in keys]
x = range(len(keys))
for ax, metric, title in (
    (axes[0], "decode_tok_s", "decode tokens/s (higher is better)"),
    (axes[1], "first_token_ms", "first token ms (lower is better)"),
):
    for shift, exporter in ((-0.2, "fx2onnx"), (0.2, "optimum")):
        ax.bar([i + shift for i in x], [by[d, t, exporter][metric] for d, t in keys], 0.4,
               label=exporter)
    ax.set_xticks(list(x), labels)
    ax.set_title(title)
    ax.legend()
fig.suptitle("transformers.js (onnxruntime-node): the same checkpoint exported by both tools")
fig.tight_layout()
