"""
.. _l-plot-exporter-exporter-reportability:

Which submodule does not export? Export piece by piece
======================================================

When a large model fails to export, the error points at one line deep inside
it, often after a long time. :func:`fx2onnx.export_report` runs the model
once with hooks recording the inputs and outputs of every submodule, then
exports every submodule on its own: capture by :func:`torch.export.export`,
conversion into ONNX, and comparison of onnxruntime's results with the
recorded outputs. One row per submodule tells what works and what does not.
The command line does the same: ``python -m fx2onnx report module:function --out report.md``.

A model with a submodule torch.export cannot capture
----------------------------------------------------
"""

import matplotlib.pyplot as plt
import pandas
import torch

import fx2onnx
from fx2onnx.inspect.report import deepest_failures


class Gate(torch.nn.Module):
    def forward(self, x):
        peak = max(x.abs().amax(dim=-1).flatten().tolist())  # Python numbers read from the data
        return x * torch.sigmoid(x / peak)


class Block(torch.nn.Module):
    def __init__(self, dim: int, gate: torch.nn.Module):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, 2 * dim)
        self.gate = gate
        self.down = torch.nn.Linear(2 * dim, dim)

    def forward(self, x):
        return x + self.down(self.gate(self.up(self.norm(x))))


class Model(torch.nn.Module):
    def __init__(self, gate_class, dim: int = 16):
        super().__init__()
        self.embed = torch.nn.Embedding(50, dim)
        self.blocks = torch.nn.ModuleList([Block(dim, torch.nn.GELU()), Block(dim, gate_class())])
        self.head = torch.nn.Linear(dim, 50)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


torch.manual_seed(0)
model = Model(Gate).eval()
ids = torch.randint(0, 50, (2, 7))

# %%
# The whole model fails; the error talks about a data-dependent expression.

try:
    fx2onnx.to_onnx(model, (ids,), dynamic_shapes=({0: "batch", 1: "seq"},))
    raise AssertionError("the export should fail")
except fx2onnx.ExportError as e:
    print(str(e).splitlines()[0][:300])
    assert "data-dependent" in str(e)

# %%
# The report, piece by piece
# --------------------------
#
# The dynamic shapes only apply to the model itself: each submodule is
# exported with the shapes it received.

pandas.set_option("display.width", 200)
pandas.set_option("display.max_columns", 20)


def show(frame, columns):
    """The report as text: the model's own row named ``<model>``, ``-`` where nothing was measured."""
    print(frame.replace({"path": {"": "<model>"}})[columns].to_string(index=False, na_rep="-"))


report = fx2onnx.export_report(model, (ids,), dynamic_shapes=({0: "batch", 1: "seq"},), as_frame=True)
show(report, ["path", "class", "status", "capture", "conversion", "validation", "max_abs"])

# %%
# A failing submodule makes every module containing it fail. The innermost
# failures are where to look: here the gate of the second block.

culprits = deepest_failures(report.to_dict("records"))
print("culprits:", culprits)
print(report.set_index("path").loc["blocks.1.gate", "error"])
assert culprits == ["blocks.1.gate"]
failing = set(report.loc[report["status"] != "OK", "path"])
assert failing == {"", "blocks.1", "blocks.1.gate"}
assert (report.loc[report["status"] == "OK", "max_abs"] < 1e-4).all()

# %%
# Fix the submodule and check again
# ---------------------------------
#
# Dividing by a tensor keeps the peak in the graph: no Python number read from
# the data any more.


class GateFixed(torch.nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x / x.abs().max())


fixed = Model(GateFixed).eval()
fixed.load_state_dict(model.state_dict())
report = fx2onnx.export_report(fixed, (ids,), dynamic_shapes=({0: "batch", 1: "seq"},), as_frame=True)
show(report, ["path", "status", "capture_s", "conversion_s", "max_abs"])
assert (report["status"] == "OK").all()

onx = fx2onnx.to_onnx(fixed, (ids,), dynamic_shapes=({0: "batch", 1: "seq"},))
for other in [torch.randint(0, 50, (3, 11)), torch.randint(0, 50, (1, 4))]:
    check = fx2onnx.validate(onx, fixed, (other,))
    print(tuple(other.shape), check)
    assert check.ok, check

# %%
# Time spent per submodule
# ------------------------

ax = (
    report.set_index("path")[["capture_s", "conversion_s", "validation_s"]]
    .rename(index={"": "(model)"})
    .plot.barh(stacked=True, figsize=(7, 4))
)
ax.set_xlabel("seconds")
ax.set_title("export_report: time per submodule")
plt.tight_layout()
