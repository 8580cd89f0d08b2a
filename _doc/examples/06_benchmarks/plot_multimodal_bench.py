"""
.. _l-plot-multimodal-bench:

Image + text and audio folders: fx2onnx beside onnxruntime-genai
=================================================================

A user deploys a vision-language model or Whisper from its checkpoint folder. Two scripts
write such folders with the published widths (bf16, random weights seeded, tokenizer and
processor made in code), export them with ``python -m fx2onnx export`` and with
onnxruntime-genai's builder (``python -m onnxruntime_genai.models.builder``), each in a child
process, then run both loops on the same onnxruntime with the same threads, interleaved
rounds, the best of each kept:

* ``bench/bench_speech.py``: whisper-tiny and whisper-base (the published configs, whole). The
  same audio features and decoder prompt go to both loops; the first-token latency includes
  the encoder.
* ``bench/bench_vlm.py``: Qwen2.5-VL-3B's widths with **fewer layers** (8 decoder layers of 36,
  8 vision blocks of 32), an image of 224 x 224 pixels made in code (64 image features). The
  builder writes **the text model only** for this architecture (it prints "the vision and
  audio components are not supported"): its folder runs the same token ids, the image
  placeholders as plain tokens, so its first-token latency has no vision encoder in it; the
  tokens are compared on a prompt without image.

Exports run for minutes: the page plots the rows the scripts stored in
``_doc/bench/multimodal.json`` (their ``--json``), each with the date and the command which
measured it (printed below), on this project's 2-core machine (quiet at the time, noisy still:
the scripts keep the best of their rounds). :ref:`l-design-deploy` renders the same rows as a table.
"""

import json
import os
import textwrap

import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
root = os.path.join(here, "..", "..", "..")
with open(os.path.join(root, "_doc", "bench", "multimodal.json"), encoding="utf-8") as f:
    stored = json.load(f)
rows = stored["rows"]

# %%
# The rows
# --------
#
# Export time and peak memory of the exporting process, the size of the written folder (and of
# its text decoder alone: ``text MB``; the builder writes no vision piece), the first token's
# latency (with the vision piece or the audio encoder; ``text ms``: the text decoder's prefill
# alone) and the decoding speed; ``same``: on a builder's row, whether its greedy tokens are ours
# (Whisper: on the chirp; Qwen2.5-VL: on a text prompt), on our Whisper rows whether they are
# transformers' ``generate``.

print(
    f"{'model':<34} {'precision':<8} {'exporter':<18} {'export s':>8} {'peak GB':>7} {'MB':>6} "
    f"{'text MB':>7} "
    f"{'first ms':>8} {'text ms':>7} {'tok/s':>6}  same"
)
for r in rows:
    same = (
        r.get("same_as_transformers", "-")
        if r["exporter"] == "fx2onnx"
        else r.get("same_as_ours", r.get("same_tokens_text"))
    )
    print(
        f"{r['model']:<34} {r['precision']:<8} {r['exporter']:<18} {r['export_s']:>8.1f} "
        f"{r['peak_rss_gb']:>7.2f} "
        f"{r['size_mb']:>6.0f} {r.get('text_mb', r['size_mb']):>7.0f} {r['first_token_ms']:>8} "
        f"{r.get('text_first_token_ms', r['first_token_ms']):>7} {r['decode_tok_s']:>6.1f}  {same}"
    )

# %%
# What the rows hold: in float32 both folders compute the same model (equal greedy tokens) and
# our Whisper folder gives transformers' tokens; int4 folders quantize differently (ours and the
# builder's blocks of 32, their tokens may part after a few steps on random weights).

print()
for date, command in dict.fromkeys((r.get("date", "?"), r.get("command", "?")) for r in rows):
    print(f"{date}:", textwrap.fill(command, 88, subsequent_indent="    "))

by = {(r["model"], r["precision"], r["exporter"]): r for r in rows}
for (model, precision, exporter), r in by.items():
    if precision == "float32" and exporter == "onnxruntime-genai":
        assert r.get("same_as_ours", r.get("same_tokens_text")), r
    if exporter == "fx2onnx" and "same_as_transformers" in r and precision == "float32":
        assert r["same_as_transformers"], r

# %%
# Plot
# ----
#
# For every model and precision, ours (blue) and onnxruntime-genai's (orange): decoding
# tokens/s, the files of the text decoder (Whisper: the whole folder, encoder included), export
# time, peak memory of the export.


def value(row, field):
    """A row's field; Whisper's rows have no text_mb: their whole folder is the model."""
    return row.get(field, row.get("size_mb", 0))


keys = sorted({(r["model"], r["precision"]) for r in rows}, key=lambda k: (k[0], k[1] != "float32"))
labels = [f"{m.split(',')[0]} {p}" for m, p in keys]
panels = [
    ("decode_tok_s", "decode (tokens/s, higher is better)"),
    ("text_mb", "text decoder's files (MB, log scale)"),
    ("export_s", "export time (s)"),
    ("peak_rss_gb", "peak memory of the export (GB)"),
]
fig, axes = plt.subplots(2, 2, figsize=(7.4, 6.0), sharey=True)
for ax, (field, title) in zip(axes.ravel(), panels):
    for shift, (exporter, color) in enumerate(
        [("fx2onnx", "tab:blue"), ("onnxruntime-genai", "tab:orange")]
    ):
        values = [value(by.get((m, p, exporter), {}), field) for m, p in keys]
        ax.barh(
            [i + 0.4 * shift for i in range(len(keys))], values, height=0.4, color=color, label=exporter
        )
    ax.set_yticks([i + 0.2 for i in range(len(keys))])
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(title, fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    if field == "text_mb":
        ax.set_xscale("log")  # Whisper's tens of MB beside Qwen2.5-VL's thousands
axes[0, 0].invert_yaxis()  # the first row on top (the panels share their y axis)
fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8)
fig.suptitle("Speech and image-text folders: fx2onnx and onnxruntime-genai", fontsize=10)
fig.tight_layout(rect=(0, 0.04, 1, 1))  # room for the legend below the panels
