"""
.. _l-plot-llama-diff-export-301:

Compare two exports of a tiny Llama, result by result
=====================================================

Two ONNX models computing the same function rarely have the same nodes: one exporter
fuses, another decomposes, an optimizer removes what is constant. When the outputs
differ, the question is *where*. :func:`fx2onnx.compare_onnx_execution` runs both
models keeping every intermediate result, aligns the two sequences with an edit
distance (op type, shape, dtype and values decide which results pair up) and shows
where the values start to diverge.

Here a one-layer tiny Llama is exported twice with ``torch.onnx.export(dynamo=True)``:
with ``optimize=False`` (the graph as translated) and ``optimize=True`` (after the
:epkg:`onnxscript` optimizer). Both match eager PyTorch within ``atol=1e-4``.

Two exports of the same model
-----------------------------
"""

import copy

import matplotlib.pyplot as plt
import onnx
import torch

import fx2onnx
from fx2onnx.models import get_tiny_model

tiny = get_tiny_model("llama", num_hidden_layers=1)
print(tiny)


def export(optimize: bool) -> onnx.ModelProto:
    program = torch.onnx.export(
        tiny.model,
        (),
        kwargs=copy.deepcopy(tiny.inputs),
        dynamic_shapes=tiny.dynamic_shapes,
        dynamo=True,
        optimize=optimize,
        verbose=False,
    )
    return program.model_proto


raw, optimized = export(optimize=False), export(optimize=True)
for name, onx in [("raw", raw), ("optimized", optimized)]:
    report = fx2onnx.validate(onx, tiny.model, (), tiny.inputs2, atol=1e-4)
    print(f"{name:>9}: {len(onx.graph.node):3d} nodes, {report}")
    assert report.ok, report

# %%
# Aligned side by side
# --------------------
#
# The feeds are the second set of inputs (another batch size and sequence length),
# a dict of tensors keyed by the input names.
# Each line shows a result of each model: index, op type, name, shape, dtype and a
# summary of the values (``min:max m=mean``). The marker says ``=`` when both values
# are close, ``+`` for a result found only in the raw model (``-`` only in the
# optimized one), ``x`` when the values differ.

feeds = tiny.inputs2
result = fx2onnx.compare_onnx_execution(optimized, raw, feeds, atol=1e-4)
print(result.to_text(show_values=False, max_rows=30))

# %%
# The beginning is about shapes and masks. The attention: the rows around the
# ``Softmax``, now with the values.
softmax = next(k for k, r in enumerate(result.rows) if r.op_type1 == "Softmax")
print(result.to_text(start=softmax - 12, max_rows=18))

# %%
# Every result of the optimized model is found in the raw one with the same values.
# The raw model computes more: constants the optimizer folded (shapes, transposed
# weights, rotary tables computed from the positions).
frame = result.to_frame()
print(frame["status"].value_counts().to_string())
print(frame[frame.status == "only2"]["op_type2"].value_counts().head(8).to_string())
assert result.count("only1") == 0 and result.count("diff") == 0
last = result.rows[-1]
print(f"logits: {last.name1} vs {last.name2}, max abs diff {last.max_abs_diff:.2g}")
assert last.op_type1 == last.op_type2 == "MatMul" and last.max_abs_diff < 1e-4

# %%
# Finding a bug
# -------------
#
# Now a wrong model: a copy of the optimized one where the ``Neg`` of the rotary
# embedding (``rotate_half``) became an ``Identity``, a typical mistake of a
# hand-written converter. :func:`fx2onnx.validate` says the model is wrong, the
# comparison says where: the first row marked ``x`` and pointed by ``>>``.

broken = onnx.ModelProto()
broken.CopyFrom(optimized)
neg = next(n for n in broken.graph.node if n.op_type == "Neg")
neg.op_type = "Identity"
report = fx2onnx.validate(broken, tiny.model, (), tiny.inputs2)
print("broken model:", report)
assert not report.ok

diff = fx2onnx.compare_onnx_execution(optimized, broken, feeds)
first = diff.first_divergence
print(diff.to_text(start=first - 3, max_rows=8))
row = diff.rows[first]
assert (row.op_type1, row.op_type2) == ("Neg", "Identity")
# the same nodes on both sides: the alignment is a perfect diagonal
assert diff.count("only1") == diff.count("only2") == 0

# %%
# The difference along the graph
# ------------------------------
#
# Before the broken node every result matches exactly; from there the error spreads
# through the attention and reaches the logits (exact matches are drawn at 1e-9).

diff_frame = diff.to_frame()
values = diff_frame["max_abs_diff"].fillna(0).clip(lower=1e-9)
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.semilogy(range(len(values)), values, ".-", label="max abs diff")
ax.axvline(first, color="red", linestyle="--", label=f"first divergence: row {first}")
ax.set_xlabel("aligned row (execution order)")
ax.set_ylabel("max |model1 - model2|")
ax.set_title("optimized model vs a copy with Neg -> Identity")
ax.legend()
fig.tight_layout()
