"""
.. _l-plot-profile-existing-onnx-101:

Profile an ONNX model with onnxruntime
======================================

Where does an ONNX model spend its time? :epkg:`onnxruntime` has a profiler that
records every node of every run in a JSON trace; :func:`fx2onnx.profiling.profile`
turns it into a table with one row per node, :func:`aggregate_by_op_type
<fx2onnx.profiling.aggregate_by_op_type>` sums it per op type and
:func:`plot_profile <fx2onnx.profiling.plot_profile>` draws the op types taking
the most time.

The model: a small convolutional network exported with
``torch.onnx.export(..., dynamo=True)`` and saved to a file, like any existing
ONNX model.

Export and check the model
--------------------------
"""

import os
import tempfile

import matplotlib.pyplot as plt
import onnx
import torch

import fx2onnx
from fx2onnx.zoo.vision import small_cnn
from fx2onnx.profiling import aggregate_by_op_type, plot_profile, profile

# a small CNN: two convolutions, a batch norm, pooling and a linear classifier
model = small_cnn()
x = torch.randn(8, 3, 32, 32)

onx = torch.onnx.export(model, (x,), dynamo=True, verbose=False).model_proto
report = fx2onnx.validate(onx, model, (x,), atol=1e-4)
print(report)
assert report.ok, report

folder = tempfile.TemporaryDirectory()
path = os.path.join(folder.name, "cnn.onnx")
onnx.save(onx, path)
model_op_types = {n.op_type for n in onx.graph.node} - {"Constant"}
print("op types of the model:", sorted(model_op_types))

# %%
# There is no ``BatchNormalization``: the exporter's optimizer already folded it
# into the weights of the first convolution.

# %%
# Time per node
# -------------
#
# ``optimization="disable"`` keeps the nodes of the model as they are, so each row is
# a node of the file. Two warmup runs are not counted, then 20 runs are measured;
# ``mean_us`` is the time per run in microseconds, ``share`` the fraction of the
# time of all nodes.

feeds = {onx.graph.input[0].name: x.numpy()}
per_node = profile(path, feeds, repeat=20, warmup=2, optimization="disable")
print(per_node[["node", "op_type", "count", "mean_us", "share"]].round(3).to_string())
print(f"one run takes {per_node.attrs['run_mean_us']:.0f} µs on average")

# %%
# The profile shows every node of the model, with a positive time.
assert set(per_node["op_type"]) == model_op_types
assert (per_node["count"] == 20).all()
assert per_node["total_us"].sum() > 0

# %%
# Per op type
# -----------

per_op = aggregate_by_op_type(per_node)
print(per_op.round(3).to_string())
assert per_op["share"].sum() > 0.999

# %%
# What onnxruntime does by default
# --------------------------------
#
# By default onnxruntime optimizes the graph before running it: it fuses the
# activation into the convolution before it, changes the memory layout of the
# convolutions (``ReorderOutput`` converts back to the usual layout)... The
# profile then shows the nodes onnxruntime really runs, and they are faster.

optimized = aggregate_by_op_type(profile(path, feeds, repeat=20, optimization="all"))
print(optimized.round(3).to_string())
print("op types replaced:", sorted(model_op_types - set(optimized["op_type"])))
print("op types added:   ", sorted(set(optimized["op_type"]) - model_op_types))
assert optimized["total_us"].sum() > 0
assert "Relu" not in set(optimized["op_type"])  # fused into the convolutions

# %%
# The chart
# ---------

fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.4, 7))  # stacked: the page's width
plot_profile(per_op, top=8, ax=ax1, title="the model as it is")
plot_profile(optimized, top=8, ax=ax2, title="optimized by onnxruntime")
fig.tight_layout()
folder.cleanup()
