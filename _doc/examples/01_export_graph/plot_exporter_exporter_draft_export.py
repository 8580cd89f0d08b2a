"""
.. _l-plot-exporter-exporter-draft_export:

torch.export.draft_export: a graph and a report when export refuses
===================================================================

:func:`torch.export.export` stops at the first problem it cannot solve.
:func:`torch.export.draft_export` always returns a program: where export would
fail, it takes the value the example inputs give, inserts a runtime assertion
checking that assumption, and writes what it did in a report. The report
tells what to fix; the program is only correct for inputs which follow the
same path.

A model torch.export refuses
----------------------------

The number of rows kept comes from a tensor (``n.item()``), torch.export
handles it with an unbacked symbol. The test ``if y.sum() > 0`` depends on the
data: torch.export cannot choose a branch.
"""

import re

import torch

import fx2onnx
from fx2onnx.inspect.dot import GraphPicture


class Model(torch.nn.Module):
    def forward(self, x, n):
        y = x[: n.item()]
        if y.sum() > 0:
            y = y * 2
        return y + 1


torch.manual_seed(0)
model = Model()
x, n = -torch.rand(5, 3), torch.tensor(3)

try:
    torch.export.export(model, (x, n))
    raise AssertionError("torch.export.export should fail")
except torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode as e:
    print(str(e).splitlines()[0])
    assert "Could not guard on data-dependent expression" in str(e)

# %%
# draft_export and its report
# ---------------------------
#
# The program comes with its report (``ep._report``): one failure, a
# data-dependent error, the expression torch could not decide, the value it
# took (``False``: the sum of ``x`` is negative), and the user's line.

ep = torch.export.draft_export(model, (x, n))
report = ep._report
print(re.sub(r"\x1b\[\d+m", "", str(report)))  # without the terminal colors
assert not report.successful()
assert len(report.failures) == 1
failure = report.failures[0]
print(failure.failure_type.name, failure.data["expr"], "->", failure.data["result"])
print("user line:", failure.data["user_stack"][-1])
assert failure.failure_type.name == "DATA_DEPENDENT_ERROR"
assert str(failure.data["result"]) == "False" and failure.data["occurrences"] == 1
assert failure.data["user_stack"][-1]["loc"] == "if y.sum() > 0:"

# %%
# The graph keeps the branch taken and asserts the assumption.

print(ep.graph_module.code)
asserts = [node for node in ep.graph.nodes if node.target == torch.ops.aten._assert_scalar.default]
assert any("Ne(u2, 1)" in str(node.args[1]) for node in asserts)

# %%
# It gives the right result for inputs taking the same branch, and fails at
# runtime for the others: the assumption is checked, not silently wrong.

torch.testing.assert_close(ep.module()(x, n), model(x, n))
other = (-torch.rand(5, 3), torch.tensor(2))
torch.testing.assert_close(ep.module()(*other), model(*other))
try:
    ep.module()(torch.rand(5, 3), n)
    raise AssertionError("the other branch should fail the assertion")
except RuntimeError as e:
    print(e)
    assert "Runtime assertion failed for expression Ne(u2, 1)" in str(e)

# %%
# Fix the model as the report says
# --------------------------------
#
# The test on data becomes :func:`torch.where` (:func:`torch.cond` for
# branches with different computations). ``draft_export`` reports nothing
# left, ``export`` works, and so does the conversion to ONNX, checked on inputs
# of both signs and another number of rows.


class ModelFixed(torch.nn.Module):
    def forward(self, x, n):
        y = x[: n.item()]
        return torch.where(y.sum() > 0, y * 2, y) + 1


fixed = ModelFixed()
assert torch.export.draft_export(fixed, (x, n))._report.successful()
onx = fx2onnx.to_onnx(fixed, (x, n))
picture = GraphPicture(onx, title="ModelFixed in ONNX: the slice length is an input")
for inputs in [(x, n), (torch.rand(5, 3), n), (-torch.rand(5, 3), torch.tensor(4))]:
    check = fx2onnx.validate(onx, fixed, inputs, atol=1e-6)
    print(f"sum {float(inputs[0][: int(inputs[1])].sum()):+.2f}, n={int(inputs[1])}: {check}")
    assert check.ok, check
