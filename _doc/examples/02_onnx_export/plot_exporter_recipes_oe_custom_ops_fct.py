"""
.. _l-plot-exporter-recipes-onnx-exporter-custom-ops-fct:

torch.onnx.export and a custom operator: custom_translation_table
=================================================================

A custom operator (:func:`torch.library.custom_op`) is opaque to :epkg:`torch.export`:
it stays one node of the graph and no exporter knows its ONNX translation.
``torch.onnx.export(..., dynamo=True)`` takes one through ``custom_translation_table``,
a dictionary ``{op overload: function}`` where the function is written with
:epkg:`onnxscript`.

A custom op and a model using it
--------------------------------
"""

import re

import matplotlib.pyplot as plt
import onnx_ir
import onnxscript
import torch
from onnxscript import FLOAT
from onnxscript import opset18 as op

import fx2onnx


@torch.library.custom_op("recipes_oe::soft_clip", mutates_args=())
def soft_clip(x: torch.Tensor, limit: float) -> torch.Tensor:
    """A smooth clipping: ``limit * tanh(x / limit)``."""
    return limit * torch.tanh(x / limit)


@soft_clip.register_fake
def _(x, limit):
    return torch.empty_like(x)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return soft_clip(self.linear(x), 2.0) + 1


torch.manual_seed(0)
model = Model().eval()
x = torch.randn(5, 4) * 4
x2 = torch.randn(9, 4) * 4  # another batch size to check the dynamic dimension


def export(table):
    return torch.onnx.export(
        model,
        (x,),
        dynamic_shapes=({0: "batch"},),
        dynamo=True,
        custom_translation_table=table,
        verbose=False,
    ).model_proto


# %%
# Without a translation, the conversion step (3/3) fails: the exporter names the
# operator it does not know.

try:
    export(None)
    raise AssertionError("the export should fail without a translation")
except torch.onnx.OnnxExporterError as e:
    message = str(e.__cause__.__cause__)
    print(type(e).__name__, "caused by:", message)
    assert "No ONNX function found for <OpOverload(op='recipes_oe.soft_clip'" in message

# %%
# An onnxscript function
# ----------------------
#
# The tensor arguments of the op are the ONNX inputs of the function, the others
# (``limit: float``) its attributes. The exporter inlines the function into the graph.


@onnxscript.script()
def soft_clip_onnx(x: FLOAT, limit: float) -> FLOAT:
    scale = op.CastLike(limit, x)
    return scale * op.Tanh(x / scale)


onx = export({torch.ops.recipes_oe.soft_clip.default: soft_clip_onnx})
print("nodes:", [n.op_type for n in onx.graph.node], "functions:", [f.name for f in onx.functions])
assert [n.op_type for n in onx.graph.node] == ["Gemm", "Div", "Tanh", "Mul", "Add"]
for inputs in (x, x2):
    report = fx2onnx.validate(onx, model, (inputs,), atol=1e-5)
    print(f"batch={inputs.shape[0]}: {report}")
    assert report.ok, report

# %%
# The output needs a type annotation
# ----------------------------------
#
# The same function without ``-> FLOAT`` compiles, but the export fails when the
# exporter inlines it: without the annotation it does not match the outputs of the
# function with the outputs of the node calling it.


@onnxscript.script()
def soft_clip_no_annotation(x: FLOAT, limit: float):
    scale = op.CastLike(limit, x)
    return scale * op.Tanh(x / scale)


try:
    export({torch.ops.recipes_oe.soft_clip.default: soft_clip_no_annotation})
    raise AssertionError("the export should fail without the output annotation")
except onnx_ir.passes.PassError as e:
    print(
        f"{type(e).__name__}: {re.sub(r' at 0x[0-9a-f]+', '', str(e).splitlines()[0])}"
    )  # no memory address
    print(f"caused by {type(e.__cause__).__name__}: {e.__cause__}")
    assert "InlinePass" in str(e)
    assert "The number of values and replacements must match" in str(e.__cause__)

# %%
# The fix is the annotation of the output (``-> FLOAT``). Another way is a plain
# Python function calling onnxscript's ops: the exporter traces it, the result is
# the same graph.


def soft_clip_traced(x, limit: float):
    scale = op.CastLike(limit, x)
    return op.Mul(scale, op.Tanh(op.Div(x, scale)))


onx_traced = export({torch.ops.recipes_oe.soft_clip.default: soft_clip_traced})
print("traced function:", [n.op_type for n in onx_traced.graph.node])
assert [n.op_type for n in onx_traced.graph.node] == [n.op_type for n in onx.graph.node]
report = fx2onnx.validate(onx_traced, model, (x2,), atol=1e-5)
print(report)
assert report.ok, report

# %%
# The custom op and its ONNX translation on a range of inputs
# -----------------------------------------------------------

xs = torch.linspace(-8, 8, 200).reshape(-1, 4)
with torch.no_grad():
    model.linear.weight.copy_(torch.eye(4))
    model.linear.bias.zero_()
onx_plot = export({torch.ops.recipes_oe.soft_clip.default: soft_clip_onnx})
got = fx2onnx.validation.run_onnx(onx_plot, (xs,))[0].reshape(-1) - 1
assert torch.allclose(torch.from_numpy(got), soft_clip(xs, 2.0).reshape(-1), atol=1e-5)
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(xs.reshape(-1), soft_clip(xs, 2.0).reshape(-1), label="eager custom op")
ax.plot(xs.reshape(-1), got, "--", label="onnxruntime")
ax.legend()
ax.set_title("soft_clip(x, 2.0)")
fig.tight_layout()
