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
        ["--hidden", "256", "--threads", "1", "--layers", "2", "--seq", "64", "--engines", ",".join(engines),
         "--warmup", "1", "--repeat", "3"]
    )
df = pandas.DataFrame(rows).set_index("engine")
assert "error" not in df.columns, df.get("error")
print(df[["step_ms", "vs_eager", "cpu_ms", "first_step_s", "peak_mb", "grad_diff"]].to_string(float_format=lambda v: f"{v:.3g}"))

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

counts = df.loc[["ort", "ort_fused"], ["fx_forward", "onnx_forward", "fx_backward", "onnx_backward", "fallbacks"]].astype(int)
print(counts.to_string())
assert (counts["fallbacks"] == 0).all()
assert counts.loc["ort_fused", "onnx_forward"] < counts.loc["ort", "onnx_forward"]

# %%
# Plot
# ----
#
# The first step includes the compilation (aot_autograd, the conversion into ONNX,
# the onnxruntime sessions), hence its separate chart.

fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(13, 3.8))
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
