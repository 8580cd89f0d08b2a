"""RMS normalization: ``x * 1/sqrt(mean(x*x) + eps) * weight`` into one node.

The converter emits it for ``aten.rms_norm`` below opset 23 and transformers writes it
by hand (``LlamaRMSNorm``): ``Mul(x, x)`` (or ``Pow(x, 2)``), ``ReduceMean`` over the
last axis, ``Add(eps)``, ``Sqrt``, ``Reciprocal``, ``Mul(x, .)`` and ``Mul(weight, .)``.

* level ``onnxruntime``: ``SimplifiedLayerNormalization`` (onnxruntime's kernel,
  registered in the main domain), then ``SkipSimplifiedLayerNormalization`` absorbs the
  residual ``Add`` before it (onnxscript's rule);
* level ``opset23``: the standard ``RMSNormalization``.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ._graph import (
    attr,
    const_array,
    const_ints,
    const_scalar,
    initializer,
    other_input,
    producer,
    rank,
    replace,
    users,
)


def _match(recip: ir.Node):
    """Returns (x, eps, axis, normalized_mul) for a Reciprocal ending an RMS, or None."""
    sqrt = producer(recip.inputs[0], "Sqrt")
    add = producer(sqrt.inputs[0] if sqrt else None, "Add")
    if add is None:
        return None
    for mean_value, eps_value in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        eps = const_scalar(eps_value)
        mean = producer(mean_value, "ReduceMean")
        if eps is not None and mean is not None:
            break
    else:
        return None
    if attr(mean, "keepdims", 1) != 1 or len(mean.inputs) < 2:
        return None
    axes = const_ints(mean.inputs[1])
    square = producer(mean.inputs[0], "Mul", "Pow")
    if square is None or axes is None or len(axes) != 1:
        return None
    x = square.inputs[0]
    if square.op_type == "Mul" and square.inputs[1] is not x:
        return None
    if square.op_type == "Pow" and const_scalar(square.inputs[1]) != 2.0:
        return None
    r = rank(x)
    if r is None or axes[0] not in (-1, r - 1) or x.dtype != ir.DataType.FLOAT:
        return None
    norm = [n for n in users(recip.outputs[0]) if n.op_type == "Mul" and other_input(n, recip.outputs[0]) is x]
    if len(norm) != 1:
        return None
    return x, eps, norm[0]


def fuse_rms_normalization(model: ir.Model, op_type: str = "SimplifiedLayerNormalization") -> int:
    """Replaces every RMS normalization by ``op_type`` (``SimplifiedLayerNormalization``
    or ``RMSNormalization``); returns the number of replacements."""
    graph = model.graph
    count = 0
    for recip in [n for n in graph if n.op_type == "Reciprocal" and n.domain == ""]:
        found = _match(recip)
        if found is None:
            continue
        x, eps, norm = found
        normalized = norm.outputs[0]
        scaled = [n for n in users(normalized) if n.op_type == "Mul"]
        weight = None
        last = norm
        if len(users(normalized)) == 1 and len(scaled) == 1 and normalized not in graph.outputs:
            w = other_input(scaled[0], normalized)
            w_array = const_array(w)
            if w_array is not None and w_array.ndim == 1 and w_array.shape[0] == x.shape[-1] and w.dtype == x.dtype:
                weight, last = w, scaled[0]
        if weight is None:
            dim = x.shape[-1]
            if not isinstance(dim, int):
                continue
            weight = initializer(graph, f"rms_ones_{dim}", np.ones((dim,), dtype=np.float32))
        attrs = {"axis": -1, "epsilon": float(eps)}
        if op_type == "SimplifiedLayerNormalization":
            attrs["stash_type"] = 1
        fused = ir.node(op_type, [x, weight], attrs, name=f"{op_type}_{count}")
        replace(graph, last, [fused], [last.outputs[0]], [fused.outputs[0]])
        count += 1
    return count


def fuse_skip_rms_normalization(model: ir.Model) -> int:
    """``SimplifiedLayerNormalization(Add(a, b))`` into ``SkipSimplifiedLayerNormalization``
    (onnxscript's rule; the sum stays available as its fourth output)."""
    from onnxscript.rewriter.ort_fusions.skip_normalization import fuse_skip_rms_normalization as fuse

    return fuse(model)
