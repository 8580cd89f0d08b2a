"""
.. _l-plot-llama-diff-export:

Compare two exports of a tiny Llama, result by result
=====================================================

Two ONNX models computing the same function rarely have the same nodes: one exporter
fuses, another decomposes, an optimizer removes what is constant. When the outputs
differ, the question is *where*. :func:`fx2onnx.compare_onnx_execution` runs both
models keeping every intermediate result, aligns the two sequences with an edit
distance (op type, shape, dtype and values decide which results pair up) and shows
where the values start to diverge.

Here a one-layer tiny Llama is exported by ``torch.onnx.export(dynamo=True)`` and by
:func:`fx2onnx.to_onnx`. Both match eager PyTorch within ``atol=1e-4``.

Two exporters, one model
------------------------
"""

import copy

import matplotlib.pyplot as plt
import onnx
import torch

import fx2onnx
from fx2onnx.zoo import get_tiny_model

tiny = get_tiny_model("llama", num_hidden_layers=1)
print(tiny)


def dynamo_export(optimize: bool = True) -> onnx.ModelProto:
    inputs = copy.deepcopy(tiny.inputs)
    return torch.onnx.export(
        tiny.model,
        (),
        kwargs=inputs,
        dynamic_shapes=tiny.dynamic_shapes,
        dynamo=True,
        optimize=optimize,
        verbose=False,
    ).model_proto


dynamo = dynamo_export()
ours = fx2onnx.to_onnx(
    tiny.model, (), kwargs=copy.deepcopy(tiny.inputs), dynamic_shapes=tiny.dynamic_shapes
)
for name, onx in [("torch.onnx.export", dynamo), ("fx2onnx.to_onnx", ours)]:
    report = fx2onnx.validate(onx, tiny.model, (), tiny.inputs2, atol=1e-4)
    print(f"{name:>17}: {len(onx.graph.node):3d} nodes, {report}")
    assert report.ok, report

# %%
# Aligned side by side
# --------------------
#
# The feeds are the second set of inputs (another batch size and sequence length),
# a dict of tensors keyed by the input names. Each line shows a result of each
# model: index, op type, name, shape and dtype. The marker says ``=`` when both
# values are close, ``+`` for a result found only in the second model (``-`` only in
# the first one), ``x`` when the values differ.

feeds = tiny.inputs2
result = fx2onnx.compare_onnx_execution(dynamo, ours, feeds, atol=1e-4)
print(result.to_text(show_values=False, max_rows=45))

# %%
# The two exporters build the index used to read the attention mask in different
# ways, so the intermediate indices may differ while the mask they select is the
# same: an isolated ``x`` followed by ``=`` rows is an implementation detail, a
# difference which spreads to the next results is a bug (see below).
# The table tells which result of one model corresponds to which of the other,
# even when the names or the op types differ:

frame = result.to_frame()
paired = frame[frame.status != "only2"]
renamed = paired[(paired.name1 != paired.name2) | (paired.op_type1 != paired.op_type2)]
print(
    renamed[["index1", "op_type1", "name1", "index2", "op_type2", "name2", "status"]]
    .head(15)
    .to_string()
)

# %%
# The attention and the logits give the same values.
softmax = next(k for k, r in enumerate(result.rows) if r.op_type1 == "Softmax")
print(result.to_text(start=softmax - 3, max_rows=6))
assert result.rows[softmax].status == "same"
last = result.rows[-1]
print(f"logits: {last.name1} vs {last.name2}, max abs diff {last.max_abs_diff:.2g}")
assert last.status == "same" and last.max_abs_diff < 1e-4

# %%
# Finding a bug
# -------------
#
# Now a wrong model: a copy of ours where the ``Neg`` of the rotary embedding
# (``rotate_half``) became an ``Identity``, a typical mistake of a converter.
# :func:`fx2onnx.validate` says the model is wrong, the comparison says where:
# the first row marked ``x``, pointed at by ``>>``, and every result after it.

broken = onnx.ModelProto()
broken.CopyFrom(ours)
neg = next(n for n in broken.graph.node if n.op_type == "Neg")
neg.op_type = "Identity"
report = fx2onnx.validate(broken, tiny.model, (), tiny.inputs2)
print("broken model:", report)
assert not report.ok

diff = fx2onnx.compare_onnx_execution(ours, broken, feeds)
first = diff.first_divergence
print(diff.to_text(start=first - 3, max_rows=8))
row = diff.rows[first]
print(f"the broken node comes from the module {row.module2!r}")
assert (row.op_type1, row.op_type2) == ("Neg", "Identity")
# the same nodes on both sides: the alignment is a perfect diagonal
assert diff.count("only1") == diff.count("only2") == 0

# %%
# The difference along the graph: before the broken node every result matches
# exactly, from there the error spreads through the attention and reaches the
# logits (exact matches are drawn at 1e-9).

values = diff.to_frame()["max_abs_diff"].fillna(0).clip(lower=1e-9)
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.semilogy(range(len(values)), values, ".-", label="max abs diff")
ax.axvline(first, color="red", linestyle="--", label=f"first divergence: row {first}")
ax.set_xlabel("aligned row (execution order)")
ax.set_ylabel("max |model1 - model2|")
ax.set_title("fx2onnx.to_onnx vs a copy with Neg -> Identity")
ax.legend()
fig.tight_layout()

# %%
# Before and after an optimizer
# -----------------------------
#
# The same tool shows what the :epkg:`onnxscript` optimizer removed from the graph
# ``torch.onnx.export`` translated (``optimize=False``): every result of the
# optimized model is found in the raw one with the same values, the raw model
# computes more (shapes, casts, transposed weights the optimizer folded).

raw = dynamo_export(optimize=False)
assert fx2onnx.validate(raw, tiny.model, (), tiny.inputs2).ok
before_after = fx2onnx.compare_onnx_execution(dynamo, raw, feeds)
print(before_after.summary())
only_raw = before_after.to_frame().query("status == 'only2'")
print(only_raw["op_type2"].value_counts().head(6).to_string())
assert before_after.count("only1") == 0 and before_after.count("diff") == 0
