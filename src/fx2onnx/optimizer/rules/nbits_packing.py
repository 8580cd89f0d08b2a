"""Several ``MatMulNBits`` of one input packed into one ``MatMulNBits`` and a ``Split``.

Once quantized, q, k and v (and gate and up) are ``com.microsoft.MatMulNBits`` nodes reading
the same input. Their codes ``[N, n_blocks, bytes]``, scales ``[N, n_blocks]``, zero points
``[N, bytes]`` and biases ``[N]`` all have the output column ``N`` first: concatenated along
it they are the codes of the concatenated weight, so one node computes every output and a
``Split`` cuts them apart. A pure rearrangement (each column is computed from the same blocks
as before), packed only when ``K``, ``bits``, ``block_size``, ``accuracy_level``, the types and
which of zero points and bias are there agree. Lazy blocks (a checkpoint quantized when
saved) stay lazy: the packed tensor reads its parts when it is saved.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ._graph import attr, initializer, replace, unique_name, users

_INPUTS = ("codes", "scales", "zero_points", "g_idx", "bias")


def pack_matmul_nbits(model: ir.Model, min_count: int = 2, max_width_ratio: float | None = None) -> int:
    """Packs the ``MatMulNBits`` sharing their input; returns the number of nodes removed.

    :param min_count: the fewest nodes a group packs
    :param max_width_ratio: a group whose packed ``N`` is over this many times ``K`` is left
        alone (q, k, v: 1.5 to 4 times ``K``; gate and up: 5 to 8 times)
    """
    graph = model.graph
    groups: dict[tuple, list[ir.Node]] = {}
    for node in graph:
        key = _key(graph, node)
        if key is not None:
            groups.setdefault(key, []).append(node)
    removed = 0
    for nodes in groups.values():
        widths = [int(attr(n, "N")) for n in nodes]
        k = int(attr(nodes[0], "K"))
        if len(nodes) < min_count or (max_width_ratio is not None and sum(widths) > max_width_ratio * k):
            continue
        inputs: list[ir.Value | None] = []
        for i, part in enumerate(_INPUTS, start=1):
            values = [n.inputs[i] if i < len(n.inputs) else None for n in nodes]
            if values[0] is None:
                inputs.append(None)
                continue
            name = unique_name(graph, f"packed_{values[0].name or part}")
            inputs.append(_concatenated(graph, name, [v.const_value for v in values]))
        while inputs[-1] is None:
            inputs.pop()
        attributes = {a.name: a.value for a in nodes[0].attributes.values()}
        attributes["N"] = sum(widths)
        first = min(nodes, key=lambda n: _position(graph, n))
        packed = ir.node("MatMulNBits", [nodes[0].inputs[0], *inputs], attributes, domain="com.microsoft")
        sizes = initializer(graph, unique_name(graph, "packed_nbits_sizes"), np.array(widths, dtype=np.int64))
        split = ir.node("Split", [packed.outputs[0], sizes], {"axis": -1}, num_outputs=len(nodes))
        replace(graph, first, [packed, split], [n.outputs[0] for n in nodes], list(split.outputs), metadata_from=first)
        removed += len(nodes) - 1
    return removed


def _key(graph: ir.Graph, node: ir.Node) -> tuple | None:
    """What two packable nodes share (their input, attributes, the types and shapes past ``N`` of
    their constant inputs); None for a node that cannot be packed."""
    if node.op_type != "MatMulNBits" or node.domain != "com.microsoft" or node.inputs[0] is None:
        return None
    n = attr(node, "N")
    key: list = [id(node.inputs[0])]
    key += [(name, attr(node, name, default)) for name, default in
            (("K", None), ("bits", 4), ("block_size", None), ("accuracy_level", 0))]
    extra = set(node.attributes) - {"K", "N", "bits", "block_size", "accuracy_level"}
    if extra or n is None or key[2][1] is None:
        return None
    for i, part in enumerate(_INPUTS, start=1):
        value = node.inputs[i] if i < len(node.inputs) else None
        if value is None:
            key.append(None)
            continue
        tensor = value.const_value
        if part == "g_idx" or tensor is None or len(users(value)) != 1 or value in graph.outputs:
            return None
        shape = tuple(int(d) for d in tensor.shape)
        if not shape or shape[0] % n or (len(shape) > 1 and shape[0] != n):
            return None  # N first, or a flat tensor of N rows
        key.append((tensor.dtype, len(shape), shape[1:] if len(shape) > 1 else shape[0] // n))
    return tuple(key)


def _concatenated(graph: ir.Graph, name: str, tensors: list[ir.TensorProtocol]) -> ir.Value:
    """An initializer ``name``: ``tensors`` concatenated along their first axis (lazy when one is)."""

    def compute(tensors=tensors) -> ir.Tensor:
        return ir.Tensor(np.concatenate([t.numpy() for t in tensors], axis=0), name=name)

    if not any(isinstance(t, ir.LazyTensor) for t in tensors):
        return initializer(graph, name, compute().numpy())
    shape = [sum(int(t.shape[0]) for t in tensors), *(int(d) for d in tensors[0].shape[1:])]
    lazy = ir.LazyTensor(compute, dtype=tensors[0].dtype, shape=ir.Shape(shape), name=name)
    value = ir.Value(name=name, shape=lazy.shape, type=ir.TensorType(lazy.dtype), const_value=lazy)
    graph.register_initializer(value)
    return value


def _position(graph: ir.Graph, node: ir.Node) -> int:
    for i, n in enumerate(graph):
        if n is node:
            return i
    return -1
