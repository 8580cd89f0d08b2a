"""
.. _l-plot-bench-export-time:

Export time: torch.export, to_onnx and torch.onnx.export
========================================================

How long does an export take? This page runs the repository's benchmark script
``bench/bench_export.py`` on four models (an MLP, a CNN, a tiny Llama with hidden size 64
and 2 layers, and a Llama with hidden size 512, 4 layers, 8 heads, 2 key-value heads)
and plots the time of one run of three ways to export each of them:

* :func:`torch.export.export` alone: the capture into an FX graph, the part every
  exporter built on it pays,
* :func:`fx2onnx.to_onnx`: the capture, then one converter per ATen operator and a
  clean-up of the ONNX graph,
* ``torch.onnx.export(..., dynamo=True)``: the capture, torch's decompositions and the
  translation with :epkg:`onnxscript`.

``to_onnx`` does not decompose the graph: the target is a total time at most 1.3 times
the capture alone on the Llamas. Each model exported by ``to_onnx`` is also validated
against eager by the script: a fast but wrong exporter would not count.

Each exporter first runs once untimed on the MLP (its imports and registries are not
counted). The numbers below come from the machine which built this page; rerun the script
(``python bench/bench_export.py --repeat 5``: the median of five runs) to measure yours.

Run the benchmark
-----------------
"""

import importlib.util
import logging
import os
import warnings

import matplotlib.pyplot as plt
import numpy as np

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
script = os.path.join(here, "..", "..", "..", "bench", "bench_export.py")
spec = importlib.util.spec_from_file_location("bench_export", script)
bench_export = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_export)

warnings.filterwarnings("ignore")
logging.getLogger("torch.onnx").setLevel(logging.ERROR)
rows = bench_export.main(["--repeat", "1"])  # one run each: the docs build has a time budget

# %%
# Every model was exported three ways and the ONNX model of ``to_onnx`` matched eager
# (the script asserts it). The ratio column tells how much the conversion adds to the
# capture.

exporters = ["torch.export", "to_onnx", "torch.onnx.export"]
assert [r["model"] for r in rows] == ["mlp", "cnn", "llama64", "llama512"]
assert all(r[e] > 0 for r in rows for e in exporters)
for r in rows:
    print(
        f"{r['model']:>10}: to_onnx is {r['to_onnx / torch.export']:.2f}x torch.export, "
        f"torch.onnx.export {r['torch.onnx.export'] / r['torch.export']:.2f}x"
    )

# %%
# Plot
# ----
#
# Left, the time of each exporter per model (log scale); right, the time of each
# ONNX exporter divided by the capture time, with the 1.3 target of ``to_onnx``.

colors = {"torch.export": "tab:gray", "to_onnx": "tab:blue", "torch.onnx.export": "tab:orange"}
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.4, 7))  # stacked: the page's width
x = np.arange(len(rows))
width = 0.27
for i, name in enumerate(exporters):
    ax1.bar(x + (i - 1) * width, [r[name] for r in rows], width, label=name, color=colors[name])
ax1.set_xticks(x, [r["model"] for r in rows])
ax1.set_yscale("log")
ax1.set_ylabel("median time (s)")
ax1.set_title("export time per model")
ax1.legend()
for i, name in enumerate(["to_onnx", "torch.onnx.export"]):
    ratios = [r[name] / r["torch.export"] for r in rows]
    ax2.bar(x + (i - 0.5) * width, ratios, width, label=name, color=colors[name])
ax2.axhline(1.3, color="black", linestyle="--", label="target of to_onnx (1.3)")
ax2.set_xticks(x, [r["model"] for r in rows])
ax2.set_ylabel("time / torch.export.export")
ax2.set_title("overhead over the capture")
ax2.legend()
fig.tight_layout()
