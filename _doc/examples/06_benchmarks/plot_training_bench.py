"""
.. _l-plot-training-bench:

Training bench: eager, inductor and the onnxruntime backend
===========================================================

:func:`fx2onnx.backend.make_onnxruntime_backend` runs the forward and backward
graphs of a training step on :epkg:`onnxruntime`. This page runs the repository's
benchmark ``bench/bench_training.py`` in a small setting: a ``LlamaForCausalLM``
of transformers' default configuration (``use_cache=True``, sdpa attention) with
hidden size 256, 2 layers, a vocabulary of 4096 tokens, batch 4 x 64 tokens, one
thread, trained with AdamW and ``labels=input_ids``. Each engine runs in its own
process (its peak memory is measured there):

* ``eager``: PyTorch,
* ``ort``: ``torch.compile(model, backend=make_onnxruntime_backend(threads=1))``,
* ``ort_fused``: the same with ``optimize="onnxruntime"`` (onnxruntime's fused operators).

``torch.compile``'s default backend (``inductor``) is left to the full benchmark:
its first training step, which generates and compiles C++ code, takes over two
minutes on the machine building this site.

The first step's gradients of each engine are compared with eager's. The step
times are medians of a few steps on the machine building this site, which other
jobs share: they show an order of magnitude, not a ranking to rely on. The full
benchmark (hidden sizes 256 and 512, 4 layers, 128 tokens, 1 and 2 threads) is
``python bench/bench_training.py``.

Measured with the full benchmark
--------------------------------

``python bench/bench_training.py --threads 1 --interleave --repeat 20`` (4 layers, batch
4 x 128 tokens, vocabulary 4096, one step of each engine in turn in one process, medians of
the process time of 20 steps; the 2-core machine was shared with other jobs, load average
about 10, so the wall times were 2.5 times the process times):

======  =========  ======================  ====================  =====================
hidden  engine     step (CPU ms, x eager)  forward / backward    gradients vs eager
======  =========  ======================  ====================  =====================
256     eager      215 (1)                 71 / 129              reference
256     inductor   197 (0.92)              62 / 122              2.8e-8
256     ort        200 (0.93)              59 / 127              3.5e-8
256     ort_fused  198 (0.92)              58 / 126              3.7e-8
512     eager      650 (1)                 205 / 389             reference
512     inductor   618 (0.95)              193 / 374             3.7e-8
512     ort        607 (0.93)              176 / 384             4.5e-8
512     ort_fused  608 (0.94)              175 / 386             4.1e-8
======  =========  ======================  ====================  =====================

The optimizer's step (eager AdamW for every engine) takes 14 ms (hidden 256) and 45-58 ms. The
forward graph runs faster on onnxruntime than eager and inductor; the backward graph is
as fast as eager's, slower than inductor's: matrix products are 80% of it, and
onnxruntime's product with a transposed first operand (every weight's gradient
``dY^T @ X``) is 5 to 18% slower than torch's (MKL) on these shapes. The backend feeds the
transposed weights the forward saves as they are stored (no copy), computes the cross
entropy's gradient in three passes over the logits, and transposes the smaller operand
of a weight's gradient (see :mod:`fx2onnx.backend`): with these three switched off in the
same process, the backend's step was 0.96x (hidden 256) and 1.02x (512) eager's.

On **two threads** (``--threads 2 --interleave --repeat 20``, nothing else running), medians of
the wall time: eager 116 / 340 ms (hidden 256 / 512), the backend 122 / 333 ms (1.05x / 0.98x),
with fusions 120 / 330 ms (1.03x / 0.97x); inductor, in the run before, 0.75x / 0.94x. Before
the backend's sessions stopped spinning after a run (onnxruntime's default), its threads took
the cores from torch's work between two graphs: the backend was 1.23x / 1.16x eager's and
eager's AdamW step after it 2.3x slower.

Run the benchmark
-----------------
"""

import contextlib
import importlib.util
import io
import os
import sys

import matplotlib.pyplot as plt
import pandas

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
script = os.path.join(here, "..", "..", "..", "bench", "bench_training.py")
spec = importlib.util.spec_from_file_location("bench_training", script)
bench_training = importlib.util.module_from_spec(spec)
sys.modules["bench_training"] = bench_training
spec.loader.exec_module(bench_training)

engines = ["eager", "ort", "ort_fused"]
with contextlib.redirect_stdout(io.StringIO()):  # the script prints its own table
    rows = bench_training.main(
        [
            "--hidden",
            "256",
            "--threads",
            "1",
            "--layers",
            "2",
            "--seq",
            "64",
            "--engines",
            ",".join(engines),
            "--warmup",
            "1",
            "--repeat",
            "3",
        ]
    )
df = pandas.DataFrame(rows).set_index("engine")
assert "error" not in df.columns, df.get("error")
print(
    df[["step_ms", "vs_eager", "cpu_ms", "first_step_s", "peak_mb", "grad_diff"]].to_string(
        float_format=lambda v: f"{v:.3g}"
    )
)

# %%
# The gradients match eager's
# ---------------------------
#
# The largest absolute difference between the first step's gradients and eager's,
# over every parameter:

for engine in engines[1:]:
    print(f"{engine:>10}: {df.loc[engine, 'grad_diff']:.1e}")
    assert df.loc[engine, "grad_diff"] < 1e-5

# %%
# What the backend converted
# --------------------------
#
# aot_autograd splits the step into a forward graph and a backward graph (FX nodes,
# aten operators); the backend converts each into ONNX. With
# ``optimize="onnxruntime"`` the optimizer folds constants, removes dead code and
# fuses the RMS normalizations and the rotary embeddings.

counts = df.loc[
    ["ort", "ort_fused"], ["fx_forward", "onnx_forward", "fx_backward", "onnx_backward", "fallbacks"]
].astype(int)
print(counts.to_string())
assert (counts["fallbacks"] == 0).all()
assert counts.loc["ort_fused", "onnx_forward"] < counts.loc["ort", "onnx_forward"]

# %%
# Plot
# ----
#
# The first step includes the compilation (aot_autograd, the conversion into ONNX,
# the onnxruntime sessions), hence its separate chart.

fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(7.4, 8))  # stacked: the page's width
colors = ["#888888", "#dd8452", "#55a868"]
ax1.bar(engines, df.loc[engines, "step_ms"], color=colors)
ax1.set_ylabel("median step (ms)")
ax1.set_title("training step, hidden 256, 1 thread")
ax2.bar(engines, df.loc[engines, "first_step_s"], color=colors)
ax2.set_ylabel("first step (s)")
ax2.set_title("first step (compilation included)")
ax3.bar(engines, df.loc[engines, "peak_mb"], color=colors)
ax3.set_ylabel("peak memory (MB)")
ax3.set_title("peak memory of the process")
for ax in (ax1, ax2, ax3):
    ax.tick_params(axis="x", rotation=20)
fig.tight_layout()
