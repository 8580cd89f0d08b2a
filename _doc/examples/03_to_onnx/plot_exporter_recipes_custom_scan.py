"""
.. _l-plot-exporter-recipes-custom-scan:

to_onnx and scan: a loop carrying a state becomes a Scan node
=============================================================

``torch._higher_order_ops.scan(combine_fn, init, xs)`` calls ``combine_fn(carry, x)``
on every slice ``x`` of ``xs`` along the first dimension and carries a state from one
step to the next, like :func:`itertools.accumulate` but returning the stacked outputs
too. The number of steps stays dynamic. :func:`fx2onnx.to_onnx` converts it into an
ONNX ``Scan``: the carries are the state variables, the sliced tensors the scan inputs,
the stacked outputs the scan outputs.

The model: an exponential moving average, two carries
------------------------------------------------------
"""

import re

import matplotlib.pyplot as plt
import onnx
import torch
from torch._higher_order_ops.map import map as torch_map
from torch._higher_order_ops.scan import scan

import fx2onnx
from fx2onnx.inspect.dot import GraphPicture
from fx2onnx.validation import run_onnx, validate


class MovingAverage(torch.nn.Module):
    """Exponential moving average and running maximum of a sequence, read backwards or not."""

    def __init__(self, reverse: bool = False):
        super().__init__()
        self.reverse = reverse
        self.decay = torch.nn.Parameter(torch.tensor([0.9, 0.5, 0.1]))

    def forward(self, init, xs):
        def step(carry, x):
            mean, top = carry
            mean = self.decay * mean + (1 - self.decay) * x  # a weight read inside the loop
            top = torch.maximum(top, x)
            return (mean, top), mean * 1  # new carries, one output per step

        (mean, top), means = scan(step, (init, init.clone()), xs, reverse=self.reverse)
        return mean, top, means


torch.manual_seed(0)
model = MovingAverage().eval()
init, xs = torch.zeros(3), torch.randn(20, 3).cumsum(dim=0)

# %%
# Export with a dynamic number of steps
# -------------------------------------

dynamic_shapes = (None, {0: "steps"})
onx = fx2onnx.to_onnx(model, (init, xs), dynamic_shapes=dynamic_shapes)
print("main graph:", [n.op_type for n in onx.graph.node])
scan_node = next(n for n in onx.graph.node if n.op_type == "Scan")
print("Scan body:", [n.op_type for n in scan_node.attribute[0].g.node])
print(
    "outputs:",
    [
        (o.name, [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim])
        for o in onx.graph.output
    ],
)

# %%
# The ONNX graph as a picture (:func:`fx2onnx.to_dot`): the body of ``Scan`` is a
# cluster; ``decay``, a weight of the module, is read by the body from the main graph.

picture = GraphPicture(onx, title="ONNX graph: Scan and its body")
assert picture.dot.count("subgraph cluster_") == 1

# %%
# The model runs on onnxruntime with sequences of any length.

for steps in (20, 5, 50):
    args = (torch.randn(3), torch.randn(steps, 3).cumsum(dim=0))
    report = validate(onx, model, args, atol=1e-5)
    print(f"steps={steps}: {report}")
    assert report.ok, report

# %%
# ``reverse=True``: torch.export flips the inputs and the outputs around the loop,
# the ONNX Scan itself stays the same.

reverse_model = MovingAverage(reverse=True).eval()
onx_rev = fx2onnx.to_onnx(reverse_model, (init, xs), dynamic_shapes=dynamic_shapes)
print("main graph:", [n.op_type for n in onx_rev.graph.node])
report = validate(onx_rev, reverse_model, (init, torch.randn(9, 3)), atol=1e-5)
print("reverse:", report)
assert report.ok, report

# %%
# The official exporter
# ---------------------

for name, m in [("forward", model), ("reverse", reverse_model)]:
    official = torch.onnx.export(
        m, (init, xs), dynamic_shapes=dynamic_shapes, dynamo=True, verbose=False
    ).model_proto
    onnx.checker.check_model(official)
    report = validate(official, m, (init, torch.randn(9, 3)), atol=1e-5)
    print(f"torch.onnx.export({name}): {[n.op_type for n in official.graph.node]}: {report}")
    assert "Scan" in [n.op_type for n in official.graph.node]
    assert report.ok, report

# %%
# map: the same body on every row
# --------------------------------
#
# ``torch._higher_order_ops.map(fn, xs, *args)`` is a scan without state: fx2onnx
# converts it into a Scan with no state variable; the official exporter has no
# translation for it.


class RowNorm(torch.nn.Module):
    def forward(self, xs, scale):
        return torch_map(lambda row, scale: row / row.norm() * scale, xs, scale)


map_args = (torch.randn(6, 3), torch.tensor([1.0, 2.0, 3.0]))
onx_map = fx2onnx.to_onnx(RowNorm().eval(), map_args, dynamic_shapes=({0: "rows"}, None))
print("map:", [n.op_type for n in onx_map.graph.node])
report = validate(onx_map, RowNorm().eval(), (torch.randn(11, 3), map_args[1]), atol=1e-5)
print("map:", report)
assert report.ok, report
try:
    torch.onnx.export(
        RowNorm().eval(), map_args, dynamic_shapes=({0: "rows"}, None), dynamo=True, verbose=False
    )
    raise AssertionError("torch.onnx.export converted map: update this example")
except torch.onnx.OnnxExporterError as e:
    cause = e  # the root cause says more than the first line
    while cause.__cause__ is not None:
        cause = cause.__cause__
    first_line = re.sub(r" at 0x[0-9a-f]+", "", str(cause).strip().splitlines()[0])  # no memory address
    print(f"torch.onnx.export(map) fails: {type(cause).__name__}: {first_line}")
    assert type(cause).__name__ == "DispatchError" and "No ONNX function found for" in str(cause), cause
    assert "MapImpl" in str(cause), cause

# %%
# The sequence, its moving average computed by onnxruntime, and eager's.

got = run_onnx(onx, (init, xs))
expected = model(init, xs)[2].detach()
fig, ax = plt.subplots(figsize=(6, 3))
for k in range(3):
    ax.plot(xs[:, k], color=f"C{k}", alpha=0.3)
    ax.plot(got[2][:, k], color=f"C{k}", label=f"decay={model.decay[k].item():.1f} (onnxruntime)")
    ax.plot(expected[:, k], "k:", lw=1)
ax.plot([], [], "k:", lw=1, label="eager PyTorch")
ax.set_xlabel("step")
ax.set_ylabel("value (faint: the input sequence)")
ax.legend(fontsize=7)
ax.set_title("moving averages computed by an ONNX Scan")
fig.tight_layout()
