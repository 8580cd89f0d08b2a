"""
.. _l-plot-llm-deploy-bench:

LLM folders: fx2onnx beside onnxruntime-genai's builder
=======================================================

A user deploying an LLM on CPU starts from its ``save_pretrained`` folder and can build it
with ``python -m fx2onnx export FOLDER --out OUT`` or with onnxruntime-genai's model builder
(``python -m onnxruntime_genai.models.builder -i FOLDER -o OUT -p int4 -e cpu``).
``bench/bench_deploy.py`` writes such a folder from a published config (bf16, random weights
seeded, a tokenizer made in code), exports it with both tools, each in a child process (wall
time, peak memory), then runs both loops on the same onnxruntime, one intra-op thread, greedy,
24 prompt tokens (and 1000 in the long-context rows) and 32 or 64 new ones, in interleaved rounds,
the best of each kept:

* **prefill**: the prompt's tokens / the time to the first new token;
* **decode**: the later tokens / their time.

Exports run for minutes: the page plots the rows the script stored in
``_doc/bench/llm_deploy.json`` (``--json``, one model per run, the rows merged):
``python bench/bench_deploy.py --model qwen3-0.6b --precisions float32,int8,int4 --rounds 5
--json _doc/bench/llm_deploy.json`` and the same for ``llama-3.2-1b``, on this project's
2-core machine.
"""

import json
import os

import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
root = os.path.join(here, "..", "..", "..")
with open(os.path.join(root, "_doc", "bench", "llm_deploy.json"), encoding="utf-8") as f:
    stored = json.load(f)
rows = stored["rows"]
for r in rows:
    r.setdefault("prompt", 24)  # the rows stored before the prompt length was recorded

# %%
# The rows
# --------
#
# ``same``: whether both loops generated the same greedy tokens. In float32 both folders compute
# the same model and must agree; quantized folders round the bf16 weights into blocks their own
# way, and on random weights (nearly uniform logits) the tokens part after a few steps.

print(f"{'model':<14} {'precision':<9} {'prompt':>6} {'exporter':<18} {'export s':>8} {'peak GB':>7} {'MB':>6} "
      f"{'prefill tok/s':>13} {'decode tok/s':>12}  same")
for r in rows:
    print(f"{r['model']:<14} {r['precision']:<9} {r['prompt']:>6} {r['exporter']:<18} {r['export_s']:>8.1f} "
          f"{r['peak_rss_gb']:>7.2f} {r['size_mb']:>6} {r['prefill_tok_s']:>13.1f} {r['decode_tok_s']:>12.2f}  "
          f"{r['same_tokens']}")

by = {(r["model"], r["precision"], r["prompt"], r["exporter"]): r for r in rows}
for (model, precision, prompt, exporter), r in by.items():
    if precision == "float32":
        assert r["same_tokens"], r  # the same model in float32: the same tokens

# %%
# The ratios
# ----------
#
# fx2onnx's value over onnxruntime-genai's (above 1: fx2onnx is faster; for files, memory and
# export time, below 1 is better).

keys = sorted({(r["model"], r["precision"], r["prompt"]) for r in rows})
fields = ["prefill_tok_s", "decode_tok_s", "size_mb", "peak_rss_gb", "export_s"]
print(f"{'model':<14} {'precision':<9} {'prompt':>6} " + " ".join(f"{f:>13}" for f in fields))
for model, precision, prompt in keys:
    ours = by.get((model, precision, prompt, "fx2onnx"))
    theirs = by.get((model, precision, prompt, "onnxruntime-genai"))
    if ours and theirs:
        print(f"{model:<14} {precision:<9} {prompt:>6} " + " ".join(f"{ours[f] / theirs[f]:>13.2f}" for f in fields))

# %%
# Plot
# ----
#
# For every model and precision, fx2onnx (blue) and onnxruntime-genai (orange).

labels = [f"{m}\n{p}" + (f"\n{n} tokens" if n != 24 else "") for m, p, n in keys]
fig, axes = plt.subplots(1, 4, figsize=(16, 4))
for ax, field, title in zip(axes, ["prefill_tok_s", "decode_tok_s", "size_mb", "export_s"],
                            ["prefill tokens/s (higher is better)", "decode tokens/s (higher is better)",
                             "files (MB)", "export time (s)"]):
    for shift, (exporter, color) in enumerate([("fx2onnx", "tab:blue"), ("onnxruntime-genai", "tab:orange")]):
        values = [by.get((m, p, n, exporter), {}).get(field, 0) for m, p, n in keys]
        ax.bar([i + 0.4 * shift for i in range(len(keys))], values, width=0.4, color=color, label=exporter)
    ax.set_xticks([i + 0.2 for i in range(len(keys))])
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_title(title, fontsize=9)
axes[0].legend(fontsize=7)
fig.tight_layout()
