"""Several MatMuls of one input by constant weights into one MatMul and a Split.

Attention projections (q, k, v) and the gated MLP (gate, up) multiply the same input by
several weights: one ``MatMul(x, Concat(W1, W2, ...))`` followed by ``Split`` reads ``x``
once and runs one kernel instead of several (it pays in decoding, where each MatMul
is small). The weights must be constant 2D initializers used nowhere else.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ._graph import const_array, initializer, replace, unique_name, users


def pack_matmuls(model: ir.Model, min_count: int = 2) -> int:
    """Packs the MatMuls sharing their first input; returns the number of MatMuls removed."""
    graph = model.graph
    groups: dict[int, list[ir.Node]] = {}
    for node in graph:
        if node.op_type != "MatMul" or node.domain != "":
            continue
        w = node.inputs[1]
        array = const_array(w)
        if array is None or array.ndim != 2 or len(users(w)) != 1 or w in graph.outputs:
            continue
        groups.setdefault(id(node.inputs[0]), []).append(node)
    removed = 0
    for nodes in groups.values():
        arrays = [const_array(n.inputs[1]) for n in nodes]
        if len(nodes) < min_count or len({(a.shape[0], a.dtype) for a in arrays}) != 1:
            continue
        x = nodes[0].inputs[0]
        packed = np.concatenate(arrays, axis=1)
        weight = initializer(graph, unique_name(graph, "packed_" + (nodes[0].inputs[1].name or "weight")), packed)
        sizes = initializer(
            graph, unique_name(graph, "packed_sizes"), np.array([a.shape[1] for a in arrays], dtype=np.int64)
        )
        # insert before the first of them: x and the weights exist there
        first = min(nodes, key=lambda n: _position(graph, n))
        matmul = ir.node("MatMul", [x, weight])
        split = ir.node("Split", [matmul.outputs[0], sizes], {"axis": -1}, num_outputs=len(nodes))
        replace(graph, first, [matmul, split], [n.outputs[0] for n in nodes], list(split.outputs))
        removed += len(nodes) - 1
    return removed


def _position(graph: ir.Graph, node: ir.Node) -> int:
    for i, n in enumerate(graph):
        if n is node:
            return i
    return -1
