"""
.. _l-plot-torch-export-101:

torch.export.export 101: first steps
====================================

:func:`torch.export.export` runs a model once with symbolic tensors and
records every operator it calls into a graph: a
:class:`torch.export.ExportedProgram`. Every exporter to ONNX starts there.
This page exports a few small models and looks at what comes out: the
program, its graph nodes, the signature, the range of the dynamic
dimensions, and ``ep.module()``, a module running the graph, checked against
the original model.

A linear layer
--------------
"""

import torch
from torch.export import Dim

torch.manual_seed(0)


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.linear(x).relu()


model = Linear()
x = torch.randn(3, 4)
ep = torch.export.export(model, (x,))
print(ep)

# %%
# The graph is a list of nodes: placeholders (the weights first, then the
# inputs), calls to ATen operators, and the output.

for node in ep.graph.nodes:
    print(f"{node.op:14} {node.name:10} {node.target}")
assert [n.op for n in ep.graph.nodes] == ["placeholder"] * 3 + ["call_function"] * 2 + ["output"]
assert [str(n.target) for n in ep.graph.nodes if n.op == "call_function"] == [
    "aten.linear.default",
    "aten.relu.default",
]
print(ep.graph_signature)
assert [s.kind.name for s in ep.graph_signature.input_specs] == ["PARAMETER", "PARAMETER", "USER_INPUT"]

# %%
# The same graph drawn by :func:`fx2onnx.to_dot`: the weights are listed inside the node
# using them, the edges carry shapes and dtypes.

from fx2onnx.inspect.dot import GraphPicture  # noqa: E402

picture = GraphPicture(ep, title="torch.export.export(Linear)")
assert "linear" in picture.svg and "relu" in picture.svg

# %%
# ``ep.module()`` runs the graph; it gives the same results as the model.
# Shapes are static: another batch size is refused.

torch.testing.assert_close(ep.module()(x), model(x))
try:
    ep.module()(torch.randn(5, 4))
    raise AssertionError("the shape is static")
except AssertionError as e:
    print(e)
    assert "Guard failed: x.size()[0] == 3" in str(e)

# %%
# Dynamic dimensions
# ------------------
#
# ``dynamic_shapes`` says which dimensions may change. The program records the
# range of each one (``range_constraints``); the dimension named ``batch``
# becomes the symbol ``s..`` with the range ``[0, inf]`` given by ``Dim``.

batch = Dim("batch")
ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
print(ep.range_constraints)
placeholder = next(n for n in ep.graph.nodes if n.name == "x")
print("x:", placeholder.meta["val"].shape)
assert isinstance(placeholder.meta["val"].shape[0], torch.SymInt)
assert [(r.lower, str(r.upper)) for r in ep.range_constraints.values()] == [(0, "int_oo")]
for n in (1, 5, 17):
    other = torch.randn(n, 4)
    torch.testing.assert_close(ep.module()(other), model(other))

# %%
# A keyword argument
# ------------------
#
# Inputs given by keyword keep their names. A float is not a tensor: it
# keeps a placeholder but nothing uses it, its value is written in the graph.


class Scaled(torch.nn.Module):
    def forward(self, x, bias=None, scale: float = 1.0):
        return (x + bias) * scale if bias is not None else x * scale


ep = torch.export.export(Scaled(), (x,), kwargs={"bias": torch.ones(4), "scale": 2.0})
print(ep.graph_module.code)
assert [n.name for n in ep.graph.nodes if n.op == "placeholder"] == ["x", "bias", "scale"]
assert len(ep.graph.find_nodes(op="placeholder", target="scale")[0].users) == 0
assert ep.graph.find_nodes(op="call_function", target=torch.ops.aten.mul.Tensor)[0].args[1] == 2.0
torch.testing.assert_close(
    ep.module()(x, bias=torch.ones(4), scale=2.0), Scaled()(x, torch.ones(4), 2.0)
)

# %%
# A list of tensors
# -----------------
#
# Lists, tuples and dictionaries are flattened: each tensor becomes one
# placeholder; ``dynamic_shapes`` follows the same structure. The named
# ``Dim`` starts at 0, ``Dim.DYNAMIC`` at 2 (sizes 0 and 1 are special cases
# torch.export does not generalize from).


class SumList(torch.nn.Module):
    def forward(self, xs: list[torch.Tensor]):
        return torch.stack([t.sum(dim=1) for t in xs], dim=1)


xs = [torch.randn(3, 4), torch.randn(3, 6)]
ep = torch.export.export(
    SumList(), (xs,), dynamic_shapes={"xs": [{0: batch, 1: Dim.DYNAMIC}, {0: batch, 1: Dim.DYNAMIC}]}
)
print(ep.graph)
print(ep.range_constraints)
assert len([n for n in ep.graph.nodes if n.op == "placeholder"]) == 2
assert len(ep.range_constraints) == 3  # batch shared by both tensors + one per second dimension
other = [torch.randn(5, 2), torch.randn(5, 9)]
torch.testing.assert_close(ep.module()(other), SumList()(other))
