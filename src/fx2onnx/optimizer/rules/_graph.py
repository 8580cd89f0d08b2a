"""Small helpers the rules share to walk and edit an :class:`onnx_ir.Graph`."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import onnx_ir as ir


def producer(value: ir.Value | None, *op_types: str, domain: str = "") -> ir.Node | None:
    """The node producing ``value`` if its type is one of ``op_types`` (any type when empty)."""
    if value is None:
        return None
    node = value.producer()
    if node is None or node.domain not in (domain, "ai.onnx" if domain == "" else domain):
        return None
    if op_types and node.op_type not in op_types:
        return None
    return node


def const_array(value: ir.Value | None) -> np.ndarray | None:
    """The constant value of an initializer (or a folded value), None otherwise."""
    if value is None or value.const_value is None:
        return None
    return value.const_value.numpy()


def const_scalar(value: ir.Value | None) -> float | None:
    """A constant holding a single number (any rank), None otherwise."""
    array = const_array(value)
    if array is None or array.size != 1:
        return None
    return float(array.reshape(-1)[0])


def const_ints(value: ir.Value | None) -> list[int] | None:
    array = const_array(value)
    if array is None or array.dtype.kind not in "iu":
        return None
    return [int(v) for v in array.reshape(-1)]


def attr(node: ir.Node, name: str, default: Any = None) -> Any:
    a = node.attributes.get(name)
    if a is None:
        return default
    return list(a.value) if isinstance(a.value, tuple) else a.value


def other_input(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """For a binary node one of whose inputs is ``value``: the other input."""
    a, b = node.inputs[0], node.inputs[1]
    if a is value:
        return b
    if b is value:
        return a
    return None


def users(value: ir.Value) -> list[ir.Node]:
    return [node for node, _ in value.uses()]


def rank(value: ir.Value | None) -> int | None:
    if value is None or value.shape is None:
        return None
    return len(value.shape)


def static_dim(value: ir.Value, axis: int) -> int | None:
    if value.shape is None:
        return None
    dim = value.shape[axis]
    return dim if isinstance(dim, int) else None


def normalize_axis(axis: int, r: int | None) -> int | None:
    if axis >= 0:
        return axis
    return None if r is None else axis + r


def is_float(value: ir.Value | None) -> bool:
    return value is not None and value.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


def initializer(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    """Adds (or reuses, same name) an initializer."""
    if name in graph.initializers:
        return graph.initializers[name]
    value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(ir.DataType.from_numpy(array.dtype)))
    value.const_value = ir.tensor(array, name=name)
    graph.register_initializer(value)
    return value


def unique_name(graph: ir.Graph, base: str) -> str:
    """A name no value of ``graph`` has yet (initializers and node outputs)."""
    taken = _names(graph)
    if base not in taken:
        return base
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    return f"{base}_{i}"


def _names(graph: ir.Graph) -> set[str]:
    names = set(graph.initializers)
    names.update(v.name for v in graph.inputs if v.name)
    for node in graph:
        names.update(o.name for o in node.outputs if o.name)
    return names


def replace(
    graph: ir.Graph,
    anchor: ir.Node,
    new_nodes: Sequence[ir.Node],
    old_values: Sequence[ir.Value],
    new_values: Sequence[ir.Value],
    metadata_from: ir.Node | None = None,
) -> None:
    """Inserts ``new_nodes`` before ``anchor`` and makes every user of ``old_values``
    (graph outputs included) use ``new_values``. The old nodes become unused and are
    removed by the final dead code elimination. The new values take the names, types
    and shapes of the old ones; the new nodes take the metadata of ``metadata_from``."""
    graph.insert_before(anchor, list(new_nodes))
    source = metadata_from or anchor
    for node in new_nodes:
        for key, val in source.metadata_props.items():
            node.metadata_props.setdefault(key, val)
    for old, new in zip(old_values, new_values):
        if new.type is None:
            new.type = old.type
        if new.shape is None and old.shape is not None:
            new.shape = old.shape
        name = old.name
        old.name = None if name is None else f"{name}__replaced"
        new.name = name
    ir.convenience.replace_all_uses_with(list(old_values), list(new_values), replace_graph_outputs=True)


def remove_unused(model: ir.Model) -> None:
    from onnx_ir.passes import common

    common.RemoveUnusedNodesPass()(model)


def nodes_of(graph: ir.Graph, op_type: str, domain: str = "") -> Iterable[ir.Node]:
    """Snapshot of the nodes of one type (safe to edit the graph while iterating)."""
    return [n for n in graph if n.op_type == op_type and n.domain in (domain, "ai.onnx" if domain == "" else domain)]


def ensure_opset(model: ir.Model, domain: str, version: int) -> None:
    if domain not in model.opset_imports:
        model.opset_imports[domain] = version
    if domain not in model.graph.opset_imports:
        model.graph.opset_imports[domain] = version
