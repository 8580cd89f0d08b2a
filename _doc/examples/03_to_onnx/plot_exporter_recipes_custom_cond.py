"""
.. _l-plot-exporter-recipes-custom-cond:

to_onnx and torch.cond: a test on the data becomes an If node
=============================================================

A Python ``if`` on the content of a tensor cannot be exported: :epkg:`torch.export`
follows one path and would silently drop the other. :func:`torch.cond` keeps both
branches as two small graphs; :func:`fx2onnx.to_onnx` turns each branch into a
subgraph of an ONNX ``If`` node. The branches may return several tensors and use the
weights of the module.

The model
---------
"""

import matplotlib.pyplot as plt
import onnx
import torch

import fx2onnx
from fx2onnx.inspect.dot import GraphPicture
from fx2onnx.validation import validate


class ConditionalLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, y):
        def positive(x, y):  # uses the weights of self.linear
            return self.linear(x) + y, x.sin()

        def negative(x, y):
            return x - y, x.cos()

        return torch.cond(x.sum() > 0, positive, negative, [x, y])


torch.manual_seed(0)
model = ConditionalLayer().eval()
x, y = torch.randn(3, 4).abs(), torch.randn(3, 4)

# %%
# Export with a dynamic first dimension
# -------------------------------------

dynamic_shapes = ({0: "batch"}, {0: "batch"})
onx = fx2onnx.to_onnx(model, (x, y), dynamic_shapes=dynamic_shapes)
print("main graph:", [n.op_type for n in onx.graph.node])
if_node = next(n for n in onx.graph.node if n.op_type == "If")
for attr in if_node.attribute:
    print(f"{attr.name}:", [n.op_type for n in attr.g.node])

# %%
# :func:`fx2onnx.to_dot` draws both graphs (:class:`fx2onnx.inspect.dot.GraphPicture`
# renders them as SVG; a click opens the full-size picture). First the FX graph of
# :epkg:`torch.export`, with the two branches as submodules.

ep = torch.export.export(model, (x, y), dynamic_shapes=({0: torch.export.Dim("batch")},) * 2)
fx_picture = GraphPicture(ep, title="FX graph: torch.cond and its two branches")
assert fx_picture.svg.count('class="cluster"') == 2

# %%
# Then the ONNX model: the two branches are the subgraphs of ``If``. Dotted edges bring a
# value of the main graph into a branch.

onnx_picture = GraphPicture(onx, title="ONNX graph: If and its two subgraphs")
assert "cluster" in onnx_picture.dot and "else_branch" in onnx_picture.dot

# %%
# Both branches run on onnxruntime and match eager PyTorch, with other batch sizes.

inputs = {
    "positive, batch=3": (x, y),
    "negative, batch=3": (-x, y),
    "positive, batch=8": (torch.randn(8, 4).abs(), torch.randn(8, 4)),
    "negative, batch=8": (-torch.randn(8, 4).abs(), torch.randn(8, 4)),
}
diffs = {}
for label, args in inputs.items():
    report = validate(onx, model, args, atol=1e-5)
    print(f"{label}: max abs diff {report.max_abs:.2e}")
    assert report.ok, report
    diffs[label] = report.max_abs

# %%
# A predicate on a shape
# ----------------------
#
# The predicate may also come from a dynamic dimension: it stays a comparison computed
# at runtime instead of being frozen at export time.


class ShapeCondition(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda x: x * 2, lambda x: x + 1, [x])


onx_shape = fx2onnx.to_onnx(ShapeCondition(), (torch.randn(3, 4),), dynamic_shapes=({0: "n"},))
print("main graph:", [n.op_type for n in onx_shape.graph.node])
for n in (3, 7):
    report = validate(onx_shape, ShapeCondition(), (torch.randn(n, 4),), atol=1e-6)
    print(f"n={n}: {report}")
    assert report.ok, report

# %%
# Nested conditions work the same way: an ``If`` inside a branch of an ``If``.


class Nested(torch.nn.Module):
    def forward(self, x):
        def inner(x):
            return torch.cond(x.max() > 1, lambda x: x * 10, lambda x: x / 10, [x]) + 1

        return torch.cond(x.sum() > 0, inner, lambda x: x.abs(), [x])


onx_nested = fx2onnx.to_onnx(Nested(), (torch.rand(4, 2),), dynamic_shapes=({0: "n"},))
assert all(
    validate(onx_nested, Nested(), (torch.rand(6, 2) * s,), atol=1e-5).ok for s in (3.0, 0.1, -1.0)
)
print("nested conditions: ok for the three paths")

# %%
# The official exporter
# ---------------------
#
# ``torch.onnx.export(..., dynamo=True)`` also converts :func:`torch.cond` into ``If``
# (see :ref:`l-plot-exporter-recipes-onnx-exporter-cond`), both branches checked here.

for name, m, args_list, ds in [
    ("ConditionalLayer", model, [(x, y), (-x, y)], dynamic_shapes),
    ("Nested", Nested().eval(), [(torch.rand(4, 2) * s,) for s in (3.0, 0.1, -1.0)], ({0: "n"},)),
]:
    official = torch.onnx.export(
        m, args_list[0], dynamic_shapes=ds, dynamo=True, verbose=False
    ).model_proto
    onnx.checker.check_model(official)
    assert "If" in [n.op_type for n in official.graph.node]
    for args in args_list:
        report = validate(official, m, args, atol=1e-5)
        print(f"torch.onnx.export({name}): {report}")
        assert report.ok, report

# %%
# Discrepancies per input set, next to the tolerance of the check: every difference is
# a rounding error far below it.

atol = 1e-5
fig, ax = plt.subplots(figsize=(6, 3))
bars = ax.barh(list(diffs), list(diffs.values()), color="#4c72b0")
ax.axvline(atol, color="#c44e52", linestyle="--", label=f"tolerance {atol:g}")
ax.bar_label(bars, fmt="%.1e", fontsize=8, padding=2)
ax.set_xlim(0, atol * 1.1)
ax.set_xlabel("max abs diff, to_onnx vs eager")
ax.set_title("torch.cond exported as If")
ax.legend(loc="lower right")
fig.tight_layout()
