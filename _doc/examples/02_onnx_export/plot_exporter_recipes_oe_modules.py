"""
.. _l-plot-exporter-recipes-onnx-exporter-modules:

torch.onnx.export: submodules, dynamic shapes and the module hierarchy
======================================================================

:epkg:`torch.export` inlines every submodule into one flat graph and
``torch.onnx.export(..., dynamo=True)`` produces a flat ONNX graph as well. The module
hierarchy is not lost: every ONNX node carries metadata naming the module calls it
comes from. This example exports a small network of submodules with two dynamic
dimensions, checks it on other shapes, then reads the hierarchy back from the nodes.

A network of submodules
-----------------------
"""

import ast
import collections

import matplotlib.pyplot as plt
import torch

import fx2onnx


class Block(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.linear = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(torch.nn.functional.gelu(self.linear(x)) + x)


class Pooling(torch.nn.Module):
    def forward(self, x):  # a mean over the sequence, shapes read at runtime
        batch, seq, dim = x.shape
        return x.reshape(batch, seq, dim).sum(dim=1) / seq


class Network(torch.nn.Module):
    def __init__(self, dim: int = 8, n_blocks: int = 2):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(dim) for _ in range(n_blocks)])
        self.pool = Pooling()
        self.head = torch.nn.Linear(dim, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(self.pool(x))


torch.manual_seed(0)
model = Network().eval()
x = torch.randn(2, 5, 8)

# %%
# Export with two dynamic dimensions
# ----------------------------------
#
# Both the batch size and the sequence length are dynamic. The ``Pooling`` module
# reads them from ``x.shape``: they stay symbolic in the ONNX graph.

dynamic_shapes = ({0: "batch", 1: "seq"},)
onx = torch.onnx.export(
    model, (x,), dynamic_shapes=dynamic_shapes, dynamo=True, verbose=False
).model_proto


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


print("input:", dims(onx.graph.input[0]), "output:", dims(onx.graph.output[0]))
assert dims(onx.graph.input[0]) == ["batch", "seq", 8]
assert dims(onx.graph.output[0]) == ["batch", 2]
for shape in [(2, 5), (3, 11), (1, 1)]:
    report = fx2onnx.validate(onx, model, (torch.randn(*shape, 8),), atol=1e-5)
    print(f"batch, seq = {shape}: {report}")
    assert report.ok, report

# %%
# The graph is flat
# -----------------
#
# No ONNX local function: the nodes of the three modules follow each other in the
# main graph. ``export_modules_as_functions`` is accepted but only applies to the
# former TorchScript exporter; with ``dynamo=True`` the graph stays flat.

print(len(onx.graph.node), "nodes:", [n.op_type for n in onx.graph.node])
assert len(onx.functions) == 0
onx_functions = torch.onnx.export(
    model,
    (x,),
    dynamic_shapes=dynamic_shapes,
    dynamo=True,
    export_modules_as_functions={Block},
    verbose=False,
).model_proto
assert len(onx_functions.functions) == 0
assert [n.op_type for n in onx_functions.graph.node] == [n.op_type for n in onx.graph.node]

# %%
# The hierarchy in the metadata
# -----------------------------
#
# Each node has ``metadata_props``: ``pkg.torch.onnx.name_scopes`` lists the module
# paths from the root to the aten call, ``pkg.torch.onnx.class_hierarchy`` the
# module classes, ``pkg.torch.onnx.stack_trace`` the user's source lines.

rows = []
for node in onx.graph.node:
    meta = {p.key: p.value for p in node.metadata_props}
    scopes = ast.literal_eval(meta["pkg.torch.onnx.name_scopes"])
    classes = ast.literal_eval(meta["pkg.torch.onnx.class_hierarchy"])
    module = "<no module>" if scopes[0].startswith("_empty_nn_module_stack") else scopes[-2] or "<root>"
    rows.append((node.op_type, module, classes[-2].split(".")[-1], classes[-1]))
    print(f"{node.op_type:20s} {rows[-1][3]:26s} module={module:16s} class={rows[-1][2]}")

# %%
# Every operator comes from the expected module: the MatMul and Add of each block
# from its ``linear`` (the input has three dimensions), the division of the pooling
# from ``pool``, the last Gemm from ``head``. The first nodes read the sequence
# length (``aten.sym_size.int``) for the division of ``pool``: torch.export inserted
# them itself (``insert_deferred_runtime_asserts``), they belong to no module.

modules = [row[1] for row in rows]
assert {"blocks.0.linear", "blocks.1.linear", "blocks.0.norm", "pool", "head"} <= set(modules), modules
assert rows[-1][:3] == ("Gemm", "head", "Linear")
assert all(row[3] == "aten.sym_size.int" for row in rows if row[1] == "<no module>")
per_top = collections.Counter(module.split(".linear")[0].split(".norm")[0] for module in modules)
print(dict(per_top))
assert per_top["blocks.0"] == per_top["blocks.1"]

# %%
# :func:`fx2onnx.to_onnx` can turn each call of a module class into a call of an
# ONNX local function, see :ref:`l-plot-exporter-recipes-custom-modules`.
#
# Nodes per top-level module
# --------------------------

fig, ax = plt.subplots(figsize=(5, 2.5))
ax.barh(list(per_top), list(per_top.values()))
ax.set_xlabel("number of ONNX nodes")
ax.set_title("nodes per submodule (torch.onnx.export)")
fig.tight_layout()
