"""
.. _l-plot-llama-bench-102:

Llama bench 102: fused operators and optimization levels
========================================================

:func:`fx2onnx.to_onnx` sees high-level operators (``scaled_dot_product_attention``,
the RMS normalization, the rotary embedding) and :func:`fx2onnx.optimize` replaces
their decomposed form by one fused node at the levels ``"onnxruntime"`` and
``"opset23"`` (see :ref:`l-design-optimizer`). This page runs the repository's
benchmark ``bench/bench_models.py`` in its quick mode on a tiny Llama and a tiny
phi-2 shaped model (rotary embedding on 40% of each head, biases, LayerNorm) with 2
layers decoding 1 token after 31 cached (``--scenarios llama-prefill,phi-prefill`` adds
the prefill of 32 tokens) and compares:

* ``to_onnx`` at each level: ``default``, ``onnxruntime``, ``opset23``,
* ``torch.onnx.export(..., dynamo=True)`` (``dynamo``),
* eager PyTorch.

Every ONNX model is checked against eager by the script before it is timed (a fast
but wrong model would not count). The latencies are medians of interleaved runs on
onnxruntime CPU, one thread. On tiny models the numbers mostly measure the cost of
each node, which is exactly what fusions remove; run
``python bench/bench_models.py --profile`` for the Llama with hidden size 512 of the
design page.

Run the benchmark
-----------------
"""

import contextlib
import importlib.util
import io
import logging
import os
import sys
import warnings

import matplotlib.pyplot as plt
import pandas

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
script = os.path.join(here, "..", "..", "..", "bench", "bench_models.py")
spec = importlib.util.spec_from_file_location("bench_models", script)
bench_models = importlib.util.module_from_spec(spec)
sys.modules["bench_models"] = bench_models  # its dataclasses look their module up
spec.loader.exec_module(bench_models)

warnings.filterwarnings("ignore")
logging.getLogger("torch.onnx").setLevel(logging.ERROR)
exporters = ["to_onnx[default]", "to_onnx[onnxruntime]", "to_onnx[opset23]", "dynamo", "eager"]
with contextlib.redirect_stdout(
    io.StringIO()
):  # the script prints its own table, shown below with a caption
    rows = bench_models.main(
        [
            "--quick",
            "--threads",
            "1",
            "--repeat",
            "10",
            "--warmup",
            "3",
            "--profile",
            "--scenarios",
            "llama-decode,phi-decode",
            "--exporters",
            ",".join(exporters),
        ]
    )
df = pandas.DataFrame(rows)
shown = df.drop(columns="threads").assign(
    nodes=df["nodes"].map(lambda v: "-" if pandas.isna(v) else str(int(v)))
)
print("the benchmark's rows (eager has no ONNX model: no node count, no export time):")
print(shown.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.3f}"))

# %%
# Fewer nodes
# -----------
#
# The fused levels replace each attention (with its cache concatenation and the
# repeated key-value heads), each rotary embedding and each RMS normalization by one node.

nodes = (
    df[df.exporter != "eager"]
    .pivot(index="exporter", columns="scenario", values="nodes")
    .astype("Int64")
)
print("number of nodes of each ONNX model:")
print(nodes.to_string(na_rep="-"))
decode = nodes["llama-decode"]
assert decode["to_onnx[onnxruntime]"] < 0.6 * decode["to_onnx[default]"]
assert decode["to_onnx[opset23]"] < 0.6 * decode["to_onnx[default]"]
# phi's partial rotary embedding is one node too (rotary_embedding_dim)
assert nodes["phi-decode"]["to_onnx[onnxruntime]"] < 0.7 * nodes["phi-decode"]["to_onnx[default]"]

# %%
# Latency and the time outside MatMul
# -----------------------------------
#
# ``outside_matmul`` is the share of the node time spent in something else than
# ``MatMul`` / ``Gemm`` according to onnxruntime's profiler (:mod:`fx2onnx.profiling`).
# On a tiny model the MatMuls are small, so the share stays high; it is the part the
# fusions shrink.

latency = df.pivot(index="exporter", columns="scenario", values="latency_ms")
print("latency (ms, median, one thread):")
print(latency.round(3).to_string(na_rep="-"))
outside = df[df.exporter != "eager"].pivot(
    index="exporter", columns="scenario", values="outside_matmul"
)
print("\nshare of the node time outside MatMul and Gemm:")
print(outside.round(3).to_string(na_rep="-"))
assert (latency > 0).all().all()

fig, axes = plt.subplots(3, 1, figsize=(7.4, 9))  # stacked: the page's width
latency.T.plot.bar(ax=axes[0], rot=0, title="latency (ms, 1 thread)")
nodes.T.plot.bar(ax=axes[1], rot=0, title="number of nodes", legend=False)
outside.T.plot.bar(ax=axes[2], rot=0, title="share of time outside MatMul", legend=False)
for ax in axes:
    ax.tick_params(axis="x", labelsize=8)
axes[0].legend(fontsize=7)
fig.tight_layout()

# %%
# Generation
# ----------
#
# The scenario ``llama-generate``: tokens per second of :func:`fx2onnx.generate` (greedy,
# 16 new tokens after 32 here, 64 after 128 without ``--quick``) at float32, int8 and int4
# against transformers' eager ``generate(do_sample=False)``, one thread, the generations
# interleaved, medians of 5 rounds with their spread; ``loop_overhead`` is the share of a
# decode step spent outside onnxruntime's run. The tiny model's weights are random: its
# quantized tokens say nothing of accuracy (see :ref:`l-design-optimizer` for the trained one).

quantized = ["to_onnx[onnxruntime]", "to_onnx[onnxruntime,int8]", "to_onnx[onnxruntime,int4]"]
with contextlib.redirect_stdout(io.StringIO()):
    gen = pandas.DataFrame(
        bench_models.main(
            [
                "--quick",
                "--scenarios",
                "llama-generate",
                "--gen-repeat",
                "5",
                "--exporters",
                ",".join(quantized),
            ]
        )
    )
columns = [
    "exporter",
    "tokens_per_s",
    "tokens_per_s_min",
    "tokens_per_s_max",
    "vs_transformers",
    "loop_overhead",
    "tokens_equal_float32",
]
print(gen[columns].to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.2f}"))
# the script asserts fx2onnx.generate at float32 gives transformers' tokens
assert gen.set_index("exporter").loc["to_onnx[onnxruntime]", "tokens_equal_float32"] == "16/16"
assert (gen["tokens_per_s"] > 0).all()

# %%
# What the fused models contain
# -----------------------------
#
# The decode model at level ``onnxruntime``: the standard ``Attention`` (opset 23,
# onnxruntime's own attention kernels do not run grouped-query attention with a
# cache for a batch > 1), onnxruntime's ``RotaryEmbedding`` and
# ``SimplifiedLayerNormalization``. ``SkipSimplifiedLayerNormalization`` and packed
# MatMuls (one MatMul and a ``Split`` for q, k, v) are slower with onnxruntime's CPU
# kernels: the level runs them only with ``enable=["skip_rms_normalization",
# "matmul_packing"]``.

import collections  # noqa: E402
import copy  # noqa: E402

import fx2onnx  # noqa: E402

sc = bench_models.llama_decode(quick=True)
with fx2onnx.torch_export_patches(patch_transformers=True):
    onx = fx2onnx.to_onnx(
        sc.model,
        (),
        copy.deepcopy(sc.export_kwargs),
        dynamic_shapes=sc.dynamic_shapes,
        optimize=False,
        target_opset=23,
    )
onx, report = fx2onnx.optimize(onx, level="onnxruntime", report=True)
print(report)
counts = collections.Counter(n.op_type for n in onx.graph.node)
print(dict(counts.most_common(12)))
assert counts["Attention"] == 2 and counts["RotaryEmbedding"] == 4 and "Softmax" not in counts
assert fx2onnx.validate(onx, sc.model, (), copy.deepcopy(sc.bench_kwargs), atol=1e-4).ok
