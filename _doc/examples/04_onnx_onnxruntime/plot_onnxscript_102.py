"""
.. _l-plot-onnxscript-102:

Write a model and a local function with onnxscript
==================================================

:epkg:`onnxscript` writes ONNX in Python: a function decorated with ``@script()``
is parsed (not executed) and each operator call ``op.MatMul(...)`` becomes an ONNX
node. A function declared in a custom domain becomes an ONNX **local function**
(a ``FunctionProto``): the model calls it like an operator and stores its body
next to the main graph. This example writes an RMS normalization as a local
function, a small block using it as a model, runs both with :epkg:`onnxruntime` and
checks them against :epkg:`numpy`.

A local function
----------------
"""

import numpy as np
import onnx
import onnx.helper as oh
import onnx.inliner
import onnxruntime
from onnxscript import FLOAT, script
from onnxscript import opset18 as op
from onnxscript.values import Opset

import fx2onnx.inspect.dot

local = Opset("tutorial.local", 1)  # the domain of our functions


@script(local, default_opset=op)
def rms_norm(x, scale, epsilon: float = 1e-6):
    mean_square = op.ReduceMean(x * x, [-1], keepdims=1)
    return x * op.Reciprocal(op.Sqrt(mean_square + op.CastLike(epsilon, x))) * scale


function_proto = rms_norm.to_function_proto()
print(onnx.printer.to_text(function_proto))
assert (function_proto.domain, function_proto.name) == ("tutorial.local", "rms_norm")
assert list(function_proto.input) == ["x", "scale"]
assert [(a.name, round(a.f, 9)) for a in function_proto.attribute_proto] == [("epsilon", 1e-6)]

# %%
# Inputs without type annotations make the function polymorphic: it works for any
# float type. ``epsilon`` is an attribute, a constant given by each call; its
# default value is stored in ``attribute_proto``.
#
# A model calling the function
# ----------------------------
#
# The model has typed inputs and outputs (``FLOAT["batch", 8]``: a dynamic first
# dimension named ``batch``). ``to_model_proto`` adds the functions it calls.


@script()
def block(x: FLOAT["batch", 8], w: FLOAT[8, 8], scale: FLOAT[8]) -> FLOAT["batch", 8]:
    h = rms_norm(x, scale, epsilon=1e-5)
    y = op.MatMul(h, w)
    return x + y * op.Sigmoid(y)


model = block.to_model_proto()
onnx.checker.check_model(model, full_check=True)
print(onnx.printer.to_text(model.graph))
assert [n.op_type for n in model.graph.node] == ["rms_norm", "MatMul", "Sigmoid", "Mul", "Add"]
assert [f.name for f in model.functions] == ["rms_norm"]

# %%
# :func:`fx2onnx.to_dot` draws the local function as a cluster next to the graph calling it.

picture = fx2onnx.inspect.dot.GraphPicture(model, title="a graph calling the local function rms_norm")
assert "rms_norm" in picture.svg

# %%
# Run and check against numpy
# ---------------------------


def rms_norm_numpy(x, scale, epsilon):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + epsilon) * scale


def block_numpy(x, w, scale):
    y = rms_norm_numpy(x, scale, 1e-5) @ w
    return x + y / (1 + np.exp(-y))


rng = np.random.default_rng(0)
w = rng.standard_normal((8, 8)).astype(np.float32)
scale = rng.uniform(0.5, 1.5, 8).astype(np.float32)
session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
for batch in (1, 3, 50):
    x = rng.standard_normal((batch, 8)).astype(np.float32)
    (got,) = session.run(None, {"x": x, "w": w, "scale": scale})
    expected = block_numpy(x, w, scale)
    print(f"batch={batch:2d}: max abs diff with numpy {np.abs(got - expected).max():.2g}")
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)

# %%
# The decorated functions also run eagerly on numpy arrays, each operator being
# evaluated by onnxruntime: a convenient way to debug them step by step.

eager = block(x, w, scale)
np.testing.assert_allclose(eager, got, atol=1e-6)
np.testing.assert_allclose(rms_norm(x, scale, epsilon=1e-5), rms_norm_numpy(x, scale, 1e-5), atol=1e-5)

# %%
# The FunctionProto in a model built by hand
# ------------------------------------------
#
# The same ``FunctionProto`` can be used by any model: here two normalizations with
# different epsilons, built with :mod:`onnx.helper`. The model declares the domain
# of the function in its opsets and stores the function once.

DOUBLE = onnx.TensorProto.DOUBLE
graph = oh.make_graph(
    [
        oh.make_node("rms_norm", ["x", "s1"], ["h"], domain="tutorial.local", epsilon=1e-5),
        oh.make_node("rms_norm", ["h", "s2"], ["y"], domain="tutorial.local", epsilon=1e-2),
    ],
    "two_norms",
    [
        oh.make_tensor_value_info("x", DOUBLE, ["batch", 8]),
        oh.make_tensor_value_info("s1", DOUBLE, [8]),
        oh.make_tensor_value_info("s2", DOUBLE, [8]),
    ],
    [oh.make_tensor_value_info("y", DOUBLE, ["batch", 8])],
)
# ir_version: onnx writes its latest IR version by default, newer than onnxruntime may read
two_norms = oh.make_model(
    graph,
    opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("tutorial.local", 1)],
    functions=[function_proto],
    ir_version=10,
)
onnx.checker.check_model(two_norms, full_check=True)
x64, s1, s2 = (rng.standard_normal(shape) for shape in [(4, 8), (8,), (8,)])
sess2 = onnxruntime.InferenceSession(two_norms.SerializeToString(), providers=["CPUExecutionProvider"])
(got2,) = sess2.run(None, {"x": x64, "s1": s1, "s2": s2})
eps1, eps2 = float(np.float32(1e-5)), float(np.float32(1e-2))  # float attributes are float32
expected2 = rms_norm_numpy(rms_norm_numpy(x64, s1, eps1), s2, eps2)
print("double precision, max abs diff with numpy:", np.abs(got2 - expected2).max())
np.testing.assert_allclose(got2, expected2, atol=1e-12)

# %%
# The function is polymorphic: called here with doubles, written without types.
#
# Inlining
# --------
#
# Some tools do not support local functions. :func:`onnx.inliner.inline_local_functions`
# replaces every call by the body of the function; the results do not change.

inlined = onnx.inliner.inline_local_functions(two_norms)
print(
    len(two_norms.graph.node),
    "nodes and",
    len(two_norms.functions),
    "function ->",
    len(inlined.graph.node),
    "nodes and",
    len(inlined.functions),
    "function",
)
assert len(inlined.functions) == 0 and len(inlined.graph.node) == 2 * len(function_proto.node)
sess3 = onnxruntime.InferenceSession(inlined.SerializeToString(), providers=["CPUExecutionProvider"])
np.testing.assert_allclose(sess3.run(None, {"x": x64, "s1": s1, "s2": s2})[0], got2, atol=1e-12)
