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
``_doc/bench/llm_deploy.json`` (``--json``, one model per run, the rows merged), each with the
date and the command which measured it (printed below), on this project's 2-core machine.
:ref:`l-design-deploy` renders the same rows as a table.
"""

import json
import os
import textwrap

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

print(
    f"{'model':<14} {'precision':<9} {'prompt':>6} {'exporter':<18} {'export s':>8} {'peak GB':>7} "
    f"{'MB':>6} "
    f"{'prefill tok/s':>13} {'decode tok/s':>12}  same"
)
for r in rows:
    print(
        f"{r['model']:<14} {r['precision']:<9} {r['prompt']:>6} {r['exporter']:<18} "
        f"{r['export_s']:>8.1f} "
        f"{r['peak_rss_gb']:>7.2f} {r['size_mb']:>6} {r['prefill_tok_s']:>13.1f} "
        f"{r['decode_tok_s']:>12.2f}  "
        f"{r['same_tokens']}"
    )

print()
for date, command in dict.fromkeys((r.get("date", "?"), r.get("command", "?")) for r in rows):
    print(f"{date}:", textwrap.fill(command, 88, subsequent_indent="    "))

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
        print(
            f"{model:<14} {precision:<9} {prompt:>6} "
            + " ".join(f"{ours[f] / theirs[f]:>13.2f}" for f in fields)
        )

# %%
# Plot
# ----
#
# For every model, precision and prompt length, fx2onnx (blue) and onnxruntime-genai (orange),
# as horizontal bars: one panel per measure, its unit on the axis.

labels = [f"{m} {p}" + (f", {n} tokens" if n != 24 else "") for m, p, n in keys]
panels = [
    ("prefill_tok_s", "prefill (tokens/s, higher is better)"),
    ("decode_tok_s", "decode (tokens/s, higher is better)"),
    ("size_mb", "files (MB, lower is better)"),
    ("export_s", "export time (s, lower is better)"),
]
fig, axes = plt.subplots(2, 2, figsize=(7.4, 6.4), sharey=True)
for ax, (field, title) in zip(axes.ravel(), panels):
    for shift, (exporter, color) in enumerate(
        [("fx2onnx", "tab:blue"), ("onnxruntime-genai", "tab:orange")]
    ):
        values = [by.get((m, p, n, exporter), {}).get(field, 0) for m, p, n in keys]
        ax.barh(
            [i + 0.4 * shift for i in range(len(keys))], values, height=0.4, color=color, label=exporter
        )
    ax.set_yticks([i + 0.2 for i in range(len(keys))])
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(title, fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
axes[0, 0].invert_yaxis()  # the first row on top (the panels share their y axis)
fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8)
fig.suptitle("LLM folders: fx2onnx and onnxruntime-genai (the rows above)", fontsize=10)
fig.tight_layout(rect=(0, 0.04, 1, 1))  # room for the legend below the panels
