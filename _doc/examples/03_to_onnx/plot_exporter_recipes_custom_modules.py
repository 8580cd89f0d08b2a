"""
.. _l-plot-exporter-recipes-custom-modules:

to_onnx: submodules exported as ONNX local functions
====================================================

:epkg:`torch.export` inlines every submodule into one flat graph. The structure is
still there: each node remembers the module calls it comes from
(``node.meta["nn_module_stack"]``). With ``export_modules_as_functions``,
:func:`fx2onnx.to_onnx` turns every call of the chosen module classes into a call of an
ONNX local function: one function per class and signature, shared by every instance,
the weights being inputs of the function. The graph reads like the model, and a
runtime or a tool can treat each block as a unit.

The model: three identical blocks
---------------------------------
"""

import matplotlib.pyplot as plt
import onnx
import torch

import fx2onnx
from fx2onnx.validation import validate


class Block(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.linear = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(torch.nn.functional.gelu(self.linear(x)) + x)


class Network(torch.nn.Module):
    def __init__(self, dim: int = 8, n_blocks: int = 3):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(dim) for _ in range(n_blocks)])
        self.head = torch.nn.Linear(dim, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


torch.manual_seed(0)
model = Network().eval()
x = torch.randn(4, 8)
dynamic_shapes = ({0: "batch"},)

# %%
# One function for the three blocks
# ---------------------------------

onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic_shapes, export_modules_as_functions={Block})
onnx.checker.check_model(onx)
print("main graph:", [n.op_type for n in onx.graph.node])
for f in onx.functions:
    print(f"function {f.domain}.{f.name}({', '.join(f.input)}): {[n.op_type for n in f.node]}")

for batch in (4, 13):
    report = validate(onx, model, (torch.randn(batch, 8),), atol=1e-5)
    print(f"batch={batch}: {report}")
    assert report.ok, report
assert [f.name for f in onx.functions] == ["Block"]

# %%
# Nested functions
# ----------------
#
# With ``True``, every submodule becomes a function: ``Block`` calls ``Linear`` and
# ``LayerNorm``. The head is a ``Linear`` too, with other weight shapes: the body and
# the input types and ranks are the same, so it calls the same function. A module
# whose body differs (a Linear without bias) would get a second function.

onx_all = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic_shapes, export_modules_as_functions=True)
for f in onx_all.functions:
    print(f"function {f.name}: {[n.op_type for n in f.node]}")
report = validate(onx_all, model, (torch.randn(9, 8),), atol=1e-5)
print(report)
assert report.ok, report

# %%
# A tiny Llama
# ------------
#
# The same option on a :epkg:`transformers` model (random weights, two layers):
# each decoder layer becomes a call of the function ``LlamaDecoderLayer``.

from fx2onnx.zoo import get_tiny_model  # noqa: E402

tiny = get_tiny_model("llama", num_hidden_layers=2)
tiny.model.config.use_cache = False
layer_class = type(tiny.model.model.layers[0])
onx_llama = fx2onnx.to_onnx(
    tiny.model,
    (),
    tiny.inputs,
    dynamic_shapes=tiny.dynamic_shapes,
    export_modules_as_functions={layer_class},
)
calls = [n.op_type for n in onx_llama.graph.node if n.domain == "fx2onnx.modules"]
print(f"main graph: {len(onx_llama.graph.node)} nodes (mask, embeddings, head), function calls {calls}")
report = validate(onx_llama, tiny.model, (), tiny.inputs2, atol=1e-4)
print("second input set, other batch and sequence lengths:", report)
assert report.ok, report

# %%
# The official exporter
# ---------------------
#
# ``torch.onnx.export(..., dynamo=True)`` accepts ``export_modules_as_functions`` but
# ignores it (it only applies to the former TorchScript exporter): the graph is flat,
# see :ref:`l-plot-exporter-recipes-onnx-exporter-modules`.

official = torch.onnx.export(
    model,
    (x,),
    dynamic_shapes=dynamic_shapes,
    dynamo=True,
    export_modules_as_functions={Block},
    verbose=False,
).model_proto
print(
    f"torch.onnx.export: {len(official.graph.node)} nodes, functions "
    f"{[f.name for f in official.functions]}"
)
assert len(official.functions) == 0
report = validate(official, model, (torch.randn(9, 8),), atol=1e-5)
print(report)
assert report.ok, report

# %%
# Size of the main graph with and without functions.

flat = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic_shapes)
counts = {
    "flat": len(flat.graph.node),
    "functions={Block}": len(onx.graph.node),
    "functions=True": len(onx_all.graph.node),
}
print(counts)
fig, ax = plt.subplots(figsize=(5, 3))
ax.bar(list(counts), list(counts.values()))
ax.set_ylabel("nodes in the main graph")
ax.set_title("the same model, with local functions or not")
fig.tight_layout()
