"""
.. _l-plot-exporter-recipes-onnx-exporter-optimize:

torch.onnx.export: what ONNXProgram.optimize() changes
======================================================

``torch.onnx.export(..., dynamo=True)`` translates every aten operator on its own,
which leaves constants to fold, identities, shape computations known in advance and
repeated subexpressions. :meth:`torch.onnx.ONNXProgram.optimize` runs
:epkg:`onnxscript`'s optimizer on the model: constant folding, removal of unused
nodes, pattern-based rewrite rules. ``optimize=True``, the default of
``torch.onnx.export``, calls it at the end of the export. Here the export is done with
``optimize=False`` to compare the model before and after, on a tiny Llama.

The model
---------
"""

import collections
import copy
import time

import matplotlib.pyplot as plt
import torch

import fx2onnx
from fx2onnx.zoo import get_tiny_model

tiny = get_tiny_model("llama", num_hidden_layers=2)
print(tiny)

onnx_program = torch.onnx.export(
    tiny.model,
    (),
    kwargs=copy.deepcopy(tiny.inputs),
    dynamic_shapes=tiny.dynamic_shapes,
    dynamo=True,
    optimize=False,
    verbose=False,
)
before = onnx_program.model_proto  # a new ModelProto, not modified by optimize()
report = fx2onnx.validate(before, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
print("before:", report)
assert report.ok, report

# %%
# Optimization
# ------------
#
# ``optimize()`` modifies the model held by the program in place.

begin = time.perf_counter()
onnx_program.optimize()
print(f"optimize(): {time.perf_counter() - begin:.2f}s")
after = onnx_program.model_proto
report_after = fx2onnx.validate(after, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
print("after: ", report_after)
assert report_after.ok, report_after

# %%
# The same outputs
# ----------------
#
# Both models run on the second input set (another batch size and sequence length)
# and must give the same logits, up to float rounding.

names = [i.name for i in before.graph.input]
feeds = [tiny.inputs2[name] for name in names]
got_before = fx2onnx.validation.run_onnx(before, feeds)[0]
got_after = fx2onnx.validation.run_onnx(after, feeds)[0]
diff = abs(got_before - got_after).max()
print(f"max abs diff between the two ONNX models: {diff:.2g}")
assert diff < 1e-5, diff

# %%
# Nodes per operator type
# -----------------------

counts_before = collections.Counter(n.op_type for n in before.graph.node)
counts_after = collections.Counter(n.op_type for n in after.graph.node)
op_types = sorted(set(counts_before) | set(counts_after), key=lambda op: (-counts_before[op], op))
print(f"{'op_type':22s} {'before':>6s} {'after':>6s}")
for op in op_types:
    print(f"{op:22s} {counts_before[op]:6d} {counts_after[op]:6d}")
print(f"{'total':22s} {len(before.graph.node):6d} {len(after.graph.node):6d}")

# %%
# The optimized graph is more than three times smaller. ``Constant`` nodes are
# folded or become initializers; most ``Reshape``, ``Cast`` and ``Transpose`` nodes
# of the operator-by-operator translation do nothing once shapes and types are
# known, and go away with the ``Identity`` nodes.

assert 3 * len(after.graph.node) < len(before.graph.node)
assert counts_after["Identity"] == 0
assert counts_after["Constant"] <= counts_before["Constant"]
print(f"removed: {dict((counts_before - counts_after).most_common(8))}")

# %%
# A plot of both.

y = range(len(op_types))
fig, ax = plt.subplots(figsize=(7, 0.25 * len(op_types) + 1))
ax.barh(
    [i - 0.2 for i in y], [counts_before[op] for op in op_types], height=0.4, label="optimize=False"
)
ax.barh(
    [i + 0.2 for i in y], [counts_after[op] for op in op_types], height=0.4, label="after optimize()"
)
ax.set_yticks(list(y))
ax.set_yticklabels(op_types)
ax.invert_yaxis()
ax.set_xlabel("number of nodes")
ax.set_title("tiny Llama exported by torch.onnx.export")
ax.legend()
fig.tight_layout()
