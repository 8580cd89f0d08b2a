"""
.. _l-plot-exporter-lost_dynamic_dimension:

A dynamic dimension lost: see it, find the line, fix it
=======================================================

A dimension declared dynamic in ``dynamic_shapes`` becomes static when the
model's code ties it to a constant: a reshape with a hard-coded size, a test
on a size, or, as here, a broadcast with a tensor of fixed size.
:func:`torch.export.export` refuses the export, but it reports it at the end,
far from the line responsible. ``fx2onnx.torch_export_patches(stop_if_static=1)``
stops the export at that line.

The model
---------

A projection followed by learned positions, one per token. The positions
are stored for ``max_len=16`` tokens and added to all of them: eager PyTorch
only works when the sequence has exactly 16 tokens, which the example input has.
"""

import linecache
import re

import torch
from torch.export import Dim

import fx2onnx
from fx2onnx.inspect.dot import GraphPicture
from fx2onnx.patches.torch_fixes import DynamicDimensionBecameStatic


class AddPositions(torch.nn.Module):
    def __init__(self, max_len: int = 16, dim: int = 8):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)
        self.positions = torch.nn.Parameter(torch.randn(1, max_len, dim))

    def forward(self, x):
        h = self.proj(x)
        return h + self.positions  # the sequence must have max_len tokens


torch.manual_seed(0)
model = AddPositions().eval()
x = torch.randn(2, 16, 8)
dynamic_shapes = {"x": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}}
print("eager:", model(x).shape)

# %%
# What torch.export says
# ----------------------
#
# The export fails with a ``UserError``: dimension 1 of ``x`` was marked dynamic,
# the code specialized it to the constant 16. The message does not say where.

try:
    torch.export.export(model, (x,), dynamic_shapes=dynamic_shapes)
    raise AssertionError("torch.export.export should fail")
except torch._dynamo.exc.UserError as e:
    message = str(e)
    print(message.split("The error above")[0])
    assert "Constraints violated (L['x'].size()[1])" in message
    assert "specialized it to be a constant (16)" in message

# %%
# :func:`fx2onnx.to_onnx` gives the same diagnosis with the name of the
# dimension when the user named it, and the line which made it a constant.

try:
    fx2onnx.to_onnx(model, (x,), dynamic_shapes={"x": {0: "batch", 1: "seq"}})
    raise AssertionError("to_onnx should fail")
except fx2onnx.ExportError as e:
    hint = next(line for line in str(e).splitlines() if "makes dimension" in line)
    print(hint)
    assert "'seq' (x, axis 1)" in hint
    where = next(line for line in str(e).splitlines() if "became the constant" in line)
    print(re.sub(r"\S*[/\\](\w+\.py)", r"\1", where))  # the file name without its folder
    assert "'seq' (x, axis 1) became the constant 16" in where and "return h + self.positions" in where

# %%
# Find the line with stop_if_static
# ---------------------------------
#
# The patch replaces the method torch calls when a symbolic dimension becomes
# a constant: the export stops right there and the error names the user's
# frame, the first one outside torch.

with fx2onnx.torch_export_patches(stop_if_static=1):
    try:
        torch.export.export(model, (x,), dynamic_shapes=dynamic_shapes)
        raise AssertionError("the patch should stop the export")
    except DynamicDimensionBecameStatic as e:
        message = str(e)
print(message)
filename, lineno, function = re.search(r"at (.+):(\d+) in (\w+)", message).groups()
line = linecache.getline(filename, int(lineno)).strip()
print("the line:", line)
assert function == "forward" and "= 16" in message
assert line.startswith("return h + self.positions")

# %%
# Fix the model
# -------------
#
# Only the positions of the tokens present are added. torch.export now keeps
# both dimensions dynamic and records that the sequence cannot be longer
# than the table of positions (its range constraints).


class AddPositionsFixed(AddPositions):
    def forward(self, x):
        h = self.proj(x)
        return h + self.positions[:, : h.shape[1]]


fixed = AddPositionsFixed().eval()
fixed.load_state_dict(model.state_dict())
ep = torch.export.export(fixed, (x,), dynamic_shapes=dynamic_shapes)
print(ep.range_constraints)
assert any(r.upper == 16 for r in ep.range_constraints.values())

# %%
# Export to ONNX and check it on another shape
# --------------------------------------------

onx = fx2onnx.to_onnx(fixed, (x,), dynamic_shapes={"x": {0: "batch", 1: "seq"}})
shape = [d.dim_param or d.dim_value for d in onx.graph.input[0].type.tensor_type.shape.dim]
print("ONNX input:", shape)
assert shape == ["batch", "seq", 8]
for other in [torch.randn(3, 5, 8), torch.randn(1, 16, 8), torch.randn(4, 2, 8)]:
    report = fx2onnx.validate(onx, fixed, (other,), atol=1e-5)
    print(tuple(other.shape), report)
    assert report.ok, report

# %%
# The ONNX graph: both dimensions keep their names, the positions are sliced to ``seq``.

picture = GraphPicture(onx, title="AddPositionsFixed: batch and seq stay dynamic")
assert "seq" in picture.svg
