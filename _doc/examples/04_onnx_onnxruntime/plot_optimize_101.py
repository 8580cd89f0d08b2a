"""
.. _l-plot-optimize-101:

Optimize an exported model: what changes, level by level
========================================================

A converter translates every aten operator on its own: the graph it produces holds
constants to fold, shape computations known at export time, casts and reshapes that
do nothing. :func:`fx2onnx.optimize` cleans it up and, depending on the level, fuses
known patterns into bigger operators:

* ``"default"``: constant folding, :epkg:`onnxscript`'s rewrite rules, dead code
  elimination, Transpose / Reshape clean-ups; standard ONNX only,
* ``"onnxruntime"``: the same, then onnxruntime's fused operators (RMS normalization,
  rotary embedding, attention on opset >= 23; the residual ``Add`` into the
  normalization and packed MatMuls with ``enable=[...]``, slower on CPU),
* ``"opset23"``: fused operators of the ONNX standard (``Attention``,
  ``RMSNormalization``, ``RotaryEmbedding``), for a model of opset >= 23.

:func:`fx2onnx.to_onnx` runs ``"default"`` unless ``optimize=False``; it also accepts
a level name (``optimize="onnxruntime"``). This example exports a tiny Llama without
optimization, applies each level and compares the graphs and the results.

Export without optimization
---------------------------
"""

import copy

import matplotlib.pyplot as plt
import numpy as np
import pandas
import torch

import fx2onnx
from fx2onnx.zoo import get_tiny_model
from fx2onnx.validation import run_onnx

tiny = get_tiny_model("llama", num_hidden_layers=2)
print(tiny)
raw = fx2onnx.to_onnx(
    tiny.model,
    (),
    copy.deepcopy(tiny.inputs),
    dynamic_shapes=tiny.dynamic_shapes,
    optimize=False,
    target_opset=23,
)
print(f"{len(raw.graph.node)} nodes without optimization")

# %%
# The three levels
# ----------------
#
# Each call returns a new model and a report: the rules it ran, how many times each
# one applied and how long it took.

models = {"optimize=False": raw}
for level in ["default", "onnxruntime", "opset23"]:
    models[level], report = fx2onnx.optimize(raw, level=level, report=True)
    print(report)

# %%
# The ``onnxruntime`` level replaces the RMS normalizations, rotary embeddings and
# attentions by single nodes, the ``opset23`` level does the same with standard
# operators.

assert len(models["default"].graph.node) < len(raw.graph.node)
ops = {name: {n.op_type for n in onx.graph.node} for name, onx in models.items()}
assert {"SimplifiedLayerNormalization", "RotaryEmbedding", "Attention"} <= ops["onnxruntime"]
assert {"RMSNormalization", "RotaryEmbedding", "Attention"} <= ops["opset23"]
assert not ({"Attention", "RotaryEmbedding"} & ops["default"])

# %%
# Nodes per operator type
# -----------------------

table = (
    pandas.DataFrame(
        {
            name: pandas.Series([n.op_type for n in onx.graph.node]).value_counts()
            for name, onx in models.items()
        }
    )
    .fillna(0)
    .astype(int)
)
table = table.sort_values("optimize=False", ascending=False)
table.loc["total"] = table.sum()
print(table.to_string())

# %%
# Same results
# ------------
#
# Every model runs on the second input set (another batch size and sequence
# length). The optimized models must give the results of the unoptimized one, and
# all of them the results of eager PyTorch.

feeds = [tiny.inputs2[i.name] for i in raw.graph.input]
reference = run_onnx(raw, feeds)[0]
for name, onx in models.items():
    diff = float(np.abs(run_onnx(onx, feeds)[0] - reference).max())
    report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
    print(f"{name:15s} max abs diff with optimize=False: {diff:.2g}; vs eager: {report}")
    assert diff < 1e-5, (name, diff)
    assert report.ok, report

# %%
# Plot
# ----

plotted = table.drop(index="total")
plotted = plotted[plotted.max(axis=1) >= 2]  # the operators present more than once somewhere
ax = plotted.plot.barh(figsize=(7, 0.3 * len(plotted) + 1.5), width=0.8)
ax.invert_yaxis()
ax.set_xlabel("number of nodes")
ax.set_title("tiny Llama, 2 layers: nodes per operator type and level")
plt.tight_layout()
