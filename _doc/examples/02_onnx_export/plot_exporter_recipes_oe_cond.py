"""
.. _l-plot-exporter-recipes-onnx-exporter-cond:

torch.onnx.export and a test on the data: torch.cond becomes an If node
=======================================================================

A Python ``if`` on the content of a tensor cannot be exported: :epkg:`torch.export`
would have to pick one branch for every input. :func:`torch.cond` keeps both branches
as two graphs and ``torch.onnx.export(..., dynamo=True)`` turns them into the two
subgraphs of an ONNX ``If`` node, evaluated at runtime.

A Python test fails
-------------------
"""

import matplotlib.pyplot as plt
import onnx
import torch

import fx2onnx


class PythonIf(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


x = torch.randn(3, 4)
try:
    torch.onnx.export(
        PythonIf().eval(), (x,), dynamic_shapes=({0: "batch"},), dynamo=True, verbose=False
    )
    raise AssertionError("a Python test on the data should not be exportable")
except torch.onnx.OnnxExporterError as e:
    cause = e.__cause__
    print(f"{type(e).__name__} caused by {type(cause).__name__}:")
    print(str(cause).splitlines()[0])
    assert "Failed to export the model with torch.export" in str(e)
    assert isinstance(cause, torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode)

# %%
# The test depends on ``x.sum()``, unknown while tracing: torch.export refuses to
# guess (``Could not guard on data-dependent expression``). The fix is to write the
# test with :func:`torch.cond`.
#
# torch.cond
# ----------
#
# Both branches take the same inputs and return tensors of the same types and
# shapes. They may use the weights of the module.


class ConditionalLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        def positive(x):
            return self.linear(x).relu()

        def negative(x):
            return x.cos() - 1

        return torch.cond(x.sum() > 0, positive, negative, [x])


torch.manual_seed(0)
model = ConditionalLayer().eval()
onnx_program = torch.onnx.export(
    model, (x.abs(),), dynamic_shapes=({0: "batch"},), dynamo=True, verbose=False
)
onx = onnx_program.model_proto
onnx.checker.check_model(onx)
print("main graph:", [n.op_type for n in onx.graph.node])
if_node = next(n for n in onx.graph.node if n.op_type == "If")
branches = {attr.name: [n.op_type for n in attr.g.node] for attr in if_node.attribute}
print(branches)
assert branches == {"then_branch": ["Gemm", "Relu"], "else_branch": ["Cos", "Sub"]}

# %%
# The If node and its two subgraphs, as text:

text = onnx.printer.to_text(onx.graph)  # the weights' values cut at 120 characters a line
print("\n".join(line if len(line) <= 120 else line[:116] + " ..." for line in text.splitlines()))

# %%
# Both branches run
# -----------------
#
# The model was exported with a positive sum; onnxruntime takes the other branch
# when the sum is negative, for any batch size.

diffs = {}
for batch in (3, 8):
    for sign in (1, -1):
        xs = sign * torch.randn(batch, 4).abs()
        report = fx2onnx.validate(onx, model, (xs,), atol=1e-5)
        label = f"{'positive' if sign > 0 else 'negative'}, batch={batch}"
        print(f"{label}: {report}")
        assert report.ok, report
        diffs[label] = report.max_abs

# %%
# A predicate on a dynamic dimension
# ----------------------------------
#
# The predicate may depend on a shape: it stays a comparison computed at runtime
# (``Shape``, ``Squeeze``, ``Greater``) instead of being frozen to the export shape.


class ShapeCondition(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda x: x * 2, lambda x: x + 1, [x])


onx_shape = torch.onnx.export(
    ShapeCondition().eval(),
    (torch.randn(3, 4),),
    dynamic_shapes=({0: "n"},),
    dynamo=True,
    verbose=False,
).model_proto
print("main graph:", [n.op_type for n in onx_shape.graph.node])
assert "If" in [n.op_type for n in onx_shape.graph.node]
for n in (3, 7):
    report = fx2onnx.validate(onx_shape, ShapeCondition(), (torch.randn(n, 4),), atol=1e-6)
    print(f"n={n}: {report}")
    assert report.ok, report

# %%
# Discrepancies per input set, next to the tolerance of the check.

fig, ax = plt.subplots(figsize=(6, 3))
ax.barh(list(diffs), list(diffs.values()), color="#4c72b0")
ax.axvline(1e-5, color="#c44e52", linestyle="--", label="tolerance 1e-5")
for i, value in enumerate(diffs.values()):
    ax.text(value + 2e-7, i, f"{value:.1e}", va="center", fontsize=8)
ax.set_xlim(0, 1.1e-5)
ax.legend(loc="lower right")
ax.set_xlabel("max abs diff, ONNX vs eager")
ax.set_title("torch.cond exported by torch.onnx.export")
fig.tight_layout()
