"""Several MatMuls of one input by constant weights into one MatMul and a Split.

Attention projections (q, k, v) and the gated MLP (gate, up) multiply the same input by
several weights: one ``MatMul(x, Concat(W1, W2, ...))`` followed by ``Split`` reads ``x``
once and runs one kernel instead of several (it pays in decoding, where each MatMul
is small). The weights must be constant 2D initializers used nowhere else. When each MatMul's
output only gets a constant bias added (Qwen2's q, k, v), the biases are packed too: one ``Add``
before the ``Split``, which quantization then folds into ``MatMulNBits``. A weight read
from a checkpoint on demand (``onnx_ir.LazyTensor``) stays so: the packed weight is a lazy
concatenation, computed when it is saved or quantized.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ._graph import initializer, replace, unique_name, users


def pack_matmuls(model: ir.Model, min_count: int = 2, max_width_ratio: float | None = None,
                 min_rows: int = 0) -> int:
    """Packs the MatMuls sharing their first input; returns the number of MatMuls removed.

    :param min_count: the fewest MatMuls a group packs
    :param max_width_ratio: a group whose packed weight has more columns than this many times its
        rows (the input's width) is left alone: q, k, v packed (1.5 to 4 times the width) make one
        kernel of three small ones, gate and up (6 to 8 times) are large enough apart
    :param min_rows: groups of narrower inputs are left alone (at a width of 512 the packed
        MatMul and its Split were 3 % slower than the separate ones, in float32)
    """
    graph = model.graph
    groups: dict[int, list[ir.Node]] = {}
    for node in graph:
        if node.op_type != "MatMul" or node.domain != "":
            continue
        w = node.inputs[1]
        tensor = w.const_value if w is not None else None
        if tensor is None or len(tensor.shape) != 2 or len(users(w)) != 1 or w in graph.outputs:
            continue
        groups.setdefault(id(node.inputs[0]), []).append(node)
    removed = 0
    for nodes in groups.values():
        tensors = [n.inputs[1].const_value for n in nodes]
        if len(nodes) < min_count or len({(t.shape[0], t.dtype) for t in tensors}) != 1:
            continue
        rows, width = int(tensors[0].shape[0]), sum(int(t.shape[1]) for t in tensors)
        if rows < min_rows or (max_width_ratio is not None and width > max_width_ratio * rows):
            continue
        x = nodes[0].inputs[0]
        name = unique_name(graph, "packed_" + (nodes[0].inputs[1].name or "weight"))
        columns = [int(t.shape[1]) for t in tensors]
        if any(isinstance(t, ir.LazyTensor) for t in tensors):
            def concatenated(tensors=tensors) -> ir.Tensor:
                return ir.Tensor(np.concatenate([t.numpy() for t in tensors], axis=1))

            lazy = ir.LazyTensor(concatenated, dtype=tensors[0].dtype,
                                 shape=ir.Shape([int(tensors[0].shape[0]), sum(columns)]), name=name)
            weight = ir.Value(name=name, shape=lazy.shape, type=ir.TensorType(lazy.dtype), const_value=lazy)
            graph.register_initializer(weight)
        else:
            weight = initializer(graph, name, np.concatenate([t.numpy() for t in tensors], axis=1))
        sizes = initializer(graph, unique_name(graph, "packed_sizes"), np.array(columns, dtype=np.int64))
        # insert before the first of them: x and the weights exist there
        first = min(nodes, key=lambda n: _position(graph, n))
        matmul = ir.node("MatMul", [x, weight])
        packed, replaced = [matmul], [n.outputs[0] for n in nodes]
        biases = [_bias_add(graph, n, c) for n, c in zip(nodes, columns)]
        if all(b is not None for b in biases):  # q, k, v biases (Qwen2): one Add before the Split, then folded
            bias = initializer(graph, unique_name(graph, name + "_bias"),
                               np.concatenate([value.const_value.numpy() for _, value in biases]))
            packed.append(ir.node("Add", [matmul.outputs[0], bias]))
            replaced = [add.outputs[0] for add, _ in biases]
        split = ir.node("Split", [packed[-1].outputs[0], sizes], {"axis": -1}, num_outputs=len(nodes))
        replace(graph, first, [*packed, split], replaced, list(split.outputs))
        removed += len(nodes) - 1
    return removed


def _bias_add(graph: ir.Graph, node: ir.Node, columns: int) -> tuple[ir.Node, ir.Value] | None:
    """``(Add, bias)`` when the only reader of the MatMul's output adds a constant vector of its
    ``columns`` values (the output itself read nowhere else)."""
    out = node.outputs[0]
    readers = users(out)
    if len(readers) != 1 or out in graph.outputs or readers[0].op_type != "Add" or readers[0].domain not in ("", "ai.onnx"):
        return None
    add = readers[0]
    other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
    tensor = other.const_value if other is not None else None
    if tensor is None or tuple(tensor.shape) != (columns,) or len(users(other)) != 1 or other in graph.outputs:
        return None
    return add, other


def pack_projections(model: ir.Model) -> int:
    """The q, k, v projections of inputs of width >= 1024 packed (:func:`pack_matmuls` with a
    packed width at most 4 times the input's): on by default at the level ``onnxruntime``."""
    return pack_matmuls(model, max_width_ratio=4.0, min_rows=1024)


def _position(graph: ir.Graph, node: ir.Node) -> int:
    for i, n in enumerate(graph):
        if n is node:
            return i
    return -1
