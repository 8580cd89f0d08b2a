"""
.. _l-plot-exporter-nn_modules_inputs:

A torch.nn.Module given as an input
===================================

:func:`torch.export.export` only accepts inputs it can flatten into tensors
and constants (pytree nodes). A :class:`torch.nn.Module` passed to ``forward``
is none of them: ``strict=True`` refuses it, ``strict=False`` flattens it on
the fly and its weights become inputs of the graph, which is rarely what one
wants in an ONNX model. The fix: make it a submodule, or pass its tensors.

The model
---------
"""

import onnxruntime
import torch

import fx2onnx
from fx2onnx.inspect.dot import GraphPicture


class ApplyLayer(torch.nn.Module):
    def forward(self, x, layer):
        return layer(x).relu()


torch.manual_seed(0)
x = torch.randn(2, 4)
layer = torch.nn.Linear(4, 3)
print("eager:", ApplyLayer()(x, layer).shape)

# %%
# strict=True fails
# -----------------
#
# The error names the type of the input and the ways to register a custom class.

try:
    torch.export.export(ApplyLayer(), (x, layer), strict=True)
    raise AssertionError("strict=True should fail")
except torch._dynamo.exc.UserError as e:
    message = str(e)
print(message.split("Exported graphs")[0])
assert "<class 'torch.nn.modules.linear.Linear'>` is not supported or pytree-flattenable" in message

# %%
# Registering the class does not help in strict mode: dynamo refuses to trace
# the unflatten function torch builds for it.

torch._export.utils.register_module_as_pytree_input_node(torch.nn.Linear)
try:
    torch.export.export(ApplyLayer(), (x, layer), strict=True)
    raise AssertionError("strict=True should fail")
except torch._dynamo.exc.Unsupported as e:
    print(str(e).splitlines()[0])
    assert "Attempted to call function marked as skipped" in str(e)
finally:
    torch._export.utils.deregister_module_as_pytree_input_node(torch.nn.Linear)

# %%
# strict=False: the weights become inputs
# ---------------------------------------
#
# In non-strict mode, torch registers the module classes found in the inputs
# for the duration of the export. The exported program takes the weight and the
# bias as user inputs, and the ONNX model too.

ep = torch.export.export(ApplyLayer(), (x, layer), strict=False)
user_inputs = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
print(ep.graph)
assert user_inputs == ["x", "layer_weight", "layer_bias"]
other = torch.nn.Linear(4, 3)
torch.testing.assert_close(ep.module()(x, other), ApplyLayer()(x, other))

onx = fx2onnx.to_onnx(ApplyLayer(), (x, layer))
print("ONNX inputs:", [i.name for i in onx.graph.input], "initializers:", len(onx.graph.initializer))
assert [i.name for i in onx.graph.input] == ["x", "layer_weight", "layer_bias"]
assert len(onx.graph.initializer) == 0

# %%
# Outside the export the module is not a pytree node any more: the inputs
# cannot be given the way eager takes them, the caller has to feed the weights.

try:
    fx2onnx.validate(onx, ApplyLayer(), (x, layer))
    raise AssertionError("the module cannot be flattened outside the export")
except ValueError as e:
    print(e)
    assert "expects 3 inputs ['x', 'layer_weight', 'layer_bias']" in str(e)
session = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
feeds = {
    "x": x.numpy(),
    "layer_weight": layer.weight.detach().numpy(),
    "layer_bias": layer.bias.detach().numpy(),
}
torch.testing.assert_close(
    torch.from_numpy(session.run(None, feeds)[0]), ApplyLayer()(x, layer).detach()
)

# %%
# Fix 1: the module becomes a submodule
# -------------------------------------
#
# The layer is given to the constructor. Its weights are parameters of the
# model: initializers in ONNX. Both strict modes work.


class ApplyOwnLayer(torch.nn.Module):
    def __init__(self, layer: torch.nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x).relu()


fixed = ApplyOwnLayer(layer)
for strict in (True, False):
    onx = fx2onnx.to_onnx(fixed, (x,), dynamic_shapes=({0: "batch"},), strict=strict)
    report = fx2onnx.validate(onx, fixed, (torch.randn(5, 4),), atol=1e-5)
    print(
        f"strict={strict}: inputs {[i.name for i in onx.graph.input]}, {len(onx.graph.initializer)} "
        f"initializers, {report}"
    )
    assert report.ok and [i.name for i in onx.graph.input] == ["x"] and len(onx.graph.initializer) == 2
picture = GraphPicture(onx, title="ApplyOwnLayer: the layer's weights are initializers")
assert "Gemm" in picture.svg or "MatMul" in picture.svg

# %%
# Fix 2: the tensors are the inputs
# ---------------------------------
#
# When the weights must stay inputs (they change from a call to the next), the
# model takes them explicitly, which every exporter and runtime understands.


class ApplyWeights(torch.nn.Module):
    def forward(self, x, weight, bias):
        return torch.nn.functional.linear(x, weight, bias).relu()


weights = (layer.weight.detach(), layer.bias.detach())
onx = fx2onnx.to_onnx(
    ApplyWeights(), (x, *weights), dynamic_shapes=({0: "batch"}, None, None), strict=True
)
report = fx2onnx.validate(onx, ApplyWeights(), (torch.randn(7, 4), *weights), atol=1e-5)
print("tensors as inputs:", [i.name for i in onx.graph.input], report)
assert report.ok, report
