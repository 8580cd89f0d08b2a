"""GELU written with Erf or Tanh (``aten.gelu`` below opset 20) into one node.

* level ``onnxruntime``: ``com.microsoft.Gelu`` (erf) and ``com.microsoft.FastGelu``
  (tanh); then onnxscript's rule folds a bias ``Add`` before ``Gelu`` into ``BiasGelu``;
* level ``opset23``: the standard ``Gelu`` (opset >= 20).

The patterns are the ones the converter emits, operands in any order::

    0.5 * x * (1 + erf(x / sqrt(2)))
    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x * x * x)))
"""

from __future__ import annotations

import math

import onnx_ir as ir

from ._graph import const_scalar, ensure_opset, other_input, producer, replace, users


def _close(value: ir.Value | None, expected: float) -> bool:
    v = const_scalar(value)
    return v is not None and abs(v - expected) <= 1e-5 * max(1.0, abs(expected))


def _binary(node: ir.Node | None, constant: float) -> ir.Value | None:
    """The non-constant operand of a binary node whose other operand is ``constant``."""
    if node is None:
        return None
    for a, b in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        if _close(b, constant):
            return a
    return None


def _tail(core: ir.Node, x: ir.Value) -> ir.Node | None:
    """The last Mul of ``0.5 * x * (1 + core)``."""
    one_plus = [n for n in users(core.outputs[0]) if n.op_type == "Add" and _binary(n, 1.0) is core.outputs[0]]
    if len(one_plus) != 1:
        return None
    s = one_plus[0].outputs[0]
    for mul in users(s):
        if mul.op_type != "Mul":
            continue
        other = other_input(mul, s)
        half = producer(other, "Mul")
        if half is not None and _binary(half, 0.5) is x:  # (0.5 * x) * (1 + core)
            return mul
        if other is x:  # (x * (1 + core)) * 0.5
            final = [n for n in users(mul.outputs[0]) if n.op_type == "Mul" and _binary(n, 0.5) is mul.outputs[0]]
            return final[0] if len(final) == 1 else None
        if _close(other, 0.5):  # x * ((1 + core) * 0.5)
            final = [n for n in users(mul.outputs[0]) if n.op_type == "Mul" and other_input(n, mul.outputs[0]) is x]
            return final[0] if len(final) == 1 else None
    return None


def _erf_input(erf: ir.Node) -> ir.Value | None:
    div = producer(erf.inputs[0], "Div")
    if div is not None and _close(div.inputs[1], math.sqrt(2.0)):
        return div.inputs[0]
    return _binary(producer(erf.inputs[0], "Mul"), 1 / math.sqrt(2.0))


def _tanh_input(tanh: ir.Node) -> ir.Value | None:
    inner = producer(_binary(producer(tanh.inputs[0], "Mul"), math.sqrt(2 / math.pi)), "Add")
    if inner is None:
        return None
    for x, t in ((inner.inputs[0], inner.inputs[1]), (inner.inputs[1], inner.inputs[0])):
        cube = producer(_binary(producer(t, "Mul"), 0.044715), "Mul", "Pow")
        if cube is None:
            continue
        if cube.op_type == "Pow" and cube.inputs[0] is x and _close(cube.inputs[1], 3.0):
            return x
        if cube.op_type == "Mul":
            for a, b in ((cube.inputs[0], cube.inputs[1]), (cube.inputs[1], cube.inputs[0])):
                sq = producer(b, "Mul")
                if a is x and sq is not None and sq.inputs[0] is x and sq.inputs[1] is x:
                    return x
    return None


def fuse_gelu(model: ir.Model, standard: bool = False) -> int:
    """Replaces each GELU pattern; ``standard=True`` needs opset >= 20. Returns the count."""
    graph = model.graph
    if standard and graph.opset_imports.get("", 0) < 20:
        return 0
    count = 0
    for core in [n for n in graph if n.op_type in ("Erf", "Tanh") and n.domain == ""]:
        x = _erf_input(core) if core.op_type == "Erf" else _tanh_input(core)
        last = _tail(core, x) if x is not None else None
        if last is None:
            continue
        approximate = core.op_type == "Tanh"
        if standard:
            fused = ir.node("Gelu", [x], {"approximate": "tanh" if approximate else "none"})
        else:
            fused = ir.node("FastGelu" if approximate else "Gelu", [x], domain="com.microsoft")
        replace(graph, last, [fused], [last.outputs[0]], [fused.outputs[0]])
        count += 1
    if count and not standard:
        ensure_opset(model, "com.microsoft", 1)
    return count


def fuse_bias_gelu(model: ir.Model) -> int:
    """``com.microsoft.Gelu(Add(x, bias))`` into ``BiasGelu`` (onnxscript's rule)."""
    if not any(n.op_type == "Gelu" and n.domain == "com.microsoft" for n in model.graph):
        return 0
    from onnxscript.rewriter.ort_fusions.bias_gelu import fuse_bias_gelu as fuse

    return fuse(model)
