"""
.. _l-plot-exporter-recipes-custom-custom-ops-inplace:

to_onnx and custom ops modifying their inputs in place
======================================================

A custom op declared with ``mutates_args`` writes into one of its inputs. ONNX has no
in-place operation: every result is a new tensor. :epkg:`torch.export` rewrites the call
into a functional form, ``auto_functionalized_v2(op, ...)``, returning the op's outputs
followed by the new values of the mutated tensors; later uses of the tensor read the new
value. With :func:`fx2onnx.to_onnx`, the converter of such an op returns **the op's
outputs followed by the new value of each mutated argument**.

Two custom ops
--------------
"""

import matplotlib.pyplot as plt
import onnxscript
import torch
from onnxscript import FLOAT
from onnxscript import opset18 as op

import fx2onnx
from fx2onnx.validation import run_onnx, validate


@torch.library.custom_op("recipes::leaky_", mutates_args=("x",))
def leaky_(x: torch.Tensor, slope: float) -> None:  # x[x < 0] *= slope, returns nothing
    x.mul_(torch.where(x < 0, slope, 1.0))


@leaky_.register_fake
def _(x, slope):
    return None


@torch.library.custom_op("recipes::accumulate_", mutates_args=("total",))
def accumulate_(total: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # total += x.sum(0)
    total.add_(x.sum(dim=0))
    return x.mean(dim=0)


@accumulate_.register_fake
def _(total, x):
    return x.new_empty(x.shape[1:])


class Model(torch.nn.Module):
    def forward(self, x, total):
        y = x * 2
        leaky_(y, 0.1)  # y changes
        total = total.clone()
        mean = accumulate_(total, y)  # total changes, mean is returned
        return y, total, mean


torch.manual_seed(0)
model = Model().eval()
x, total = torch.randn(6, 3), torch.zeros(3)

# %%
# The functional graph torch.export produces.

ep = torch.export.export(model, (x, total)).run_decompositions({})
for node in ep.graph.nodes:
    if "auto_functionalized" in str(node.target):
        print(node.format_node())

# %%
# Converters returning the new values
# -----------------------------------
#
# ``leaky_`` returns nothing: its converter returns the new ``x``, written here
# with onnxscript. ``accumulate_`` returns ``mean``: its converter returns
# ``(mean, new_total)``, written with the builder.


@onnxscript.script()
def leaky_script(x: FLOAT, slope: float) -> FLOAT:
    return op.Where(x < op.CastLike(0.0, x), x * op.CastLike(slope, x), x)


def convert_accumulate(ctx, node, total, x):
    new_total = ctx.op.Add(total, ctx.op.ReduceSum(x, ctx.const([0], torch.int64), keepdims=0))
    mean = ctx.op.ReduceMean(x, ctx.const([0], torch.int64), keepdims=0)
    return mean, new_total


dispatcher = fx2onnx.Dispatcher(
    {"recipes::leaky_": leaky_script, "recipes::accumulate_": convert_accumulate}
)
onx = fx2onnx.to_onnx(model, (x, total), dynamic_shapes=({0: "rows"}, None), dispatcher=dispatcher)
print([n.op_type for n in onx.graph.node])
for rows in (6, 2, 40):
    report = validate(onx, model, (torch.randn(rows, 3), torch.randn(3)), atol=1e-5)
    print(f"rows={rows}: {report}")
    assert report.ok, report

# %%
# A converter forgetting the new value of the mutated tensor is caught.


def wrong_converter(ctx, node, total, x):
    return ctx.op.ReduceMean(x, ctx.const([0], torch.int64), keepdims=0)


wrong = fx2onnx.Dispatcher({"recipes::leaky_": leaky_script, "recipes::accumulate_": wrong_converter})
try:
    fx2onnx.to_onnx(model, (x, total), dispatcher=wrong)
    raise AssertionError("a converter forgetting the mutated value should be refused")
except fx2onnx.ConversionError as e:
    print(str(e).splitlines()[0])
    assert (
        "must return the 1 output(s) of the op followed by the new value of each mutated argument"
        in str(e)
    )

# %%
# The official exporter
# ---------------------
#
# ``torch.onnx.export`` receives translations through ``custom_translation_table``, but
# with torch==2.13 it cannot convert ``auto_functionalized_v2``, with or without them:
# it takes the op given as first argument for a node of the graph and fails with a
# ``KeyError``. :ref:`l-plot-exporter-recipes-onnx-exporter-custom-ops-inplace`
# explains the failure and a workaround (a functional twin of the op).


def accumulate_official(total, x):  # the official exporter's style: onnxscript ops, no ctx
    axes = op.Constant(value_ints=[0])
    return op.ReduceMean(x, axes, keepdims=0), total + op.ReduceSum(x, axes, keepdims=0)


table = {
    torch.ops.recipes.leaky_.default: leaky_script,
    torch.ops.recipes.accumulate_.default: accumulate_official,
}
try:
    torch.onnx.export(model, (x, total), dynamo=True, custom_translation_table=table, verbose=False)
    raise AssertionError("torch.onnx.export converted auto_functionalized_v2: update this example")
except torch.onnx.OnnxExporterError as e:
    cause = e.__cause__.__cause__  # the root cause says more than the first line
    print(f"torch.onnx.export fails: {type(cause).__name__}: {cause}")
    assert isinstance(cause, KeyError) and "OpOverload.name" in str(cause)

# %%
# The running total computed by onnxruntime, batch after batch.

torch.manual_seed(0)
running, history, expected = torch.zeros(3), [], []
for _ in range(20):
    batch = torch.randn(8, 3) + 0.2
    eager_total = model(batch, running)[1]
    running = torch.from_numpy(run_onnx(onx, (batch, running))[1])
    torch.testing.assert_close(running, eager_total, atol=1e-4, rtol=1e-4)
    history.append(running.numpy().copy())
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(history)
ax.set_xlabel("batch")
ax.set_ylabel("total (onnxruntime)")
ax.set_title("state updated in place by a custom op")
fig.tight_layout()
