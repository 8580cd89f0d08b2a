"""
.. _l-plot-exporter-recipes-custom-custom-ops-fct:

to_onnx and custom ops: give the exporter a converter
=====================================================

A custom operator (:func:`torch.library.custom_op`) is opaque to :epkg:`torch.export`: it
stays one node in the graph, and no exporter knows its ONNX translation. With
:func:`fx2onnx.to_onnx`, a :class:`fx2onnx.Dispatcher` maps the op (its overload, its
packet or its name ``"namespace::name"``) to a converter, written in one of two ways:

* a Python function ``fn(ctx, node, *args)`` using the builder (``ctx.op.Relu(x)``...),
* an :epkg:`onnxscript` function (``@onnxscript.script()``), added as a local function.

A custom op and a model using it
--------------------------------
"""

import matplotlib.pyplot as plt
import onnx
import onnxscript
import torch
from onnxscript import FLOAT
from onnxscript import opset18 as op

import fx2onnx
from fx2onnx.validation import run_onnx, validate


@torch.library.custom_op("recipes::soft_clip", mutates_args=())
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

# %%
# Without a converter, the error names the op and shows how to write one.

try:
    fx2onnx.to_onnx(model, (x,))
except fx2onnx.UnsupportedOpError as e:
    print(e)

# %%
# First way: a converter written with the builder
# -----------------------------------------------
#
# The converter receives the ONNX values of the tensor arguments and the Python
# values of the others (``limit`` is a float).


def convert_soft_clip(ctx, node, x, limit):
    scale = ctx.const(limit, torch.float32)
    return ctx.op.Mul(scale, ctx.op.Tanh(ctx.op.Div(x, scale)))


dispatcher = fx2onnx.Dispatcher({"recipes::soft_clip": convert_soft_clip})
onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=({0: "batch"},), dispatcher=dispatcher)
print("builder:", [n.op_type for n in onx.graph.node])
for batch in (5, 11):
    report = validate(onx, model, (torch.randn(batch, 4) * 4,), atol=1e-5)
    print(f"batch={batch}: {report}")
    assert report.ok, report

# %%
# Second way: an onnxscript function
# ----------------------------------
#
# Non-tensor parameters (``limit: float``) become attributes of the function.
# Without optimization the function stays a local function of the model; the
# optimizer inlines it.


@onnxscript.script()
def soft_clip_script(x: FLOAT, limit: float) -> FLOAT:
    scale = op.CastLike(limit, x)
    return scale * op.Tanh(x / scale)


dispatcher2 = fx2onnx.Dispatcher({torch.ops.recipes.soft_clip.default: soft_clip_script})
for optimize in (False, True):
    onx2 = fx2onnx.to_onnx(
        model, (x,), dynamic_shapes=({0: "batch"},), dispatcher=dispatcher2, optimize=optimize
    )
    onnx.checker.check_model(onx2)
    report = validate(onx2, model, (torch.randn(7, 4) * 4,), atol=1e-5)
    print(
        f"onnxscript, optimize={optimize}: {[n.op_type for n in onx2.graph.node]}, functions "
        f"{[f.name for f in onx2.functions]}: {report}"
    )
    assert report.ok, report

# %%
# The official exporter
# ---------------------
#
# ``torch.onnx.export`` takes the same onnxscript function through
# ``custom_translation_table`` (its output needs a type annotation, see
# :ref:`l-plot-exporter-recipes-onnx-exporter-custom-ops-fct`). Without it, it fails.


def official_export(table):
    return torch.onnx.export(
        model,
        (x,),
        dynamic_shapes=({0: "batch"},),
        dynamo=True,
        custom_translation_table=table,
        verbose=False,
    ).model_proto


try:
    official_export(None)
    raise AssertionError("torch.onnx.export should fail without a translation of the custom op")
except torch.onnx.OnnxExporterError as e:
    reason = str(e.__cause__.__cause__)  # the root cause says more than the first line
    print(f"torch.onnx.export without a translation table fails: {reason}")
    assert "No ONNX function found for <OpOverload(op='recipes.soft_clip'" in reason

official = official_export({torch.ops.recipes.soft_clip.default: soft_clip_script})
report = validate(official, model, (torch.randn(7, 4) * 4,), atol=1e-5)
print(f"torch.onnx.export with a translation table: {report}")
assert report.ok, report

# %%
# The custom op and its ONNX translation on a range of inputs.

xs = torch.linspace(-8, 8, 200)
inner = Model()
with torch.no_grad():
    inner.linear.weight.copy_(torch.eye(4))
    inner.linear.bias.zero_()
onx_plot = fx2onnx.to_onnx(
    inner, (xs.reshape(-1, 4),), dynamic_shapes=({0: "batch"},), dispatcher=dispatcher
)
got = run_onnx(onx_plot, (xs.reshape(-1, 4),))[0].reshape(-1) - 1
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(xs, soft_clip(xs, 2.0), label="eager custom op")
ax.plot(xs, got, "--", label="onnxruntime")
ax.legend()
ax.set_title("soft_clip(x, 2.0)")
fig.tight_layout()
