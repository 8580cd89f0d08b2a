"""Shape clean-ups (standard ONNX, every level): chains of Transpose or Reshape,
Cast / Reshape / Expand that change nothing. Two symbolic dimensions of the same name
are equal (torch names them, one name per value).

Each function returns the number of nodes it made useless (removed afterwards by the
dead code elimination).
"""

from __future__ import annotations

import onnx_ir as ir

from ._graph import attr, const_ints, producer, replace


def _forward(graph: ir.Graph, node: ir.Node, value: ir.Value) -> bool:
    """Users of node's output use ``value`` instead (not when the output is a graph output)."""
    out = node.outputs[0]
    if out in graph.outputs or value is None:
        return False
    ir.convenience.replace_all_uses_with(out, value)
    return True


def fold_transposes(model: ir.Model) -> int:
    """``Transpose(Transpose(x, p1), p2)`` into one Transpose (or nothing when the
    permutations cancel)."""
    graph = model.graph
    count = 0
    for node in [n for n in graph if n.op_type == "Transpose" and n.domain == ""]:
        inner = producer(node.inputs[0], "Transpose")
        p2, p1 = attr(node, "perm"), attr(inner, "perm") if inner else None
        if inner is None or p1 is None or p2 is None:
            continue
        perm = [p1[i] for i in p2]
        if perm == list(range(len(perm))):
            count += _forward(graph, node, inner.inputs[0])
        else:
            fused = ir.node("Transpose", [inner.inputs[0]], {"perm": perm})
            replace(graph, node, [fused], [node.outputs[0]], [fused.outputs[0]])
            count += 1
    return count


def fold_reshapes(model: ir.Model) -> int:
    """``Reshape(Reshape(x, s1), s2)`` into ``x`` when the result has the shape of ``x``
    (static or named dimensions), into ``Reshape(x, s2)`` when s2 is a constant without 0
    (a 0 copies a dimension of the intermediate shape)."""
    graph = model.graph
    count = 0
    for node in [n for n in graph if n.op_type == "Reshape" and n.domain == ""]:
        inner = producer(node.inputs[0], "Reshape")
        if inner is None:
            continue
        x = inner.inputs[0]
        if _known(x.shape) and x.shape == node.outputs[0].shape:  # back to the shape it had
            count += _forward(graph, node, x)
            continue
        shape = const_ints(node.inputs[1])
        if shape is None or 0 in shape:
            continue
        node.replace_input_with(0, x)
        count += 1
    return count


def _known(shape: ir.Shape | None) -> bool:
    """Every dimension is an int or a named symbolic dimension (names are unique values)."""
    return shape is not None and all(isinstance(d, int) or getattr(d, "value", None) for d in shape)


def remove_identities(model: ir.Model) -> int:
    """Cast to the same type, Reshape / Expand to the same shape (static or named dimensions)."""
    graph = model.graph
    count = 0
    for node in list(graph):
        if node.domain != "" or not node.inputs or node.inputs[0] is None:
            continue
        x, out = node.inputs[0], node.outputs[0]
        same = False
        if node.op_type == "Cast":
            same = x.dtype is not None and x.dtype.value == attr(node, "to")
        elif node.op_type in ("Reshape", "Expand"):
            same = _known(x.shape) and x.shape == out.shape
        if same:
            count += _forward(graph, node, x)
    return count


# elementwise operators broadcasting their inputs (numpy rules): an Expand before them is not needed
# when the other inputs already give the output its shape
_BROADCASTING = frozenset(
    "Add Sub Mul Div Pow Max Min Mod Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Where".split()
)


def _dim_key(d: object) -> object:
    return d if isinstance(d, int) else getattr(d, "value", None)


def _broadcast(*shapes: ir.Shape | None) -> list[object] | None:
    """The broadcast of shapes whose dimensions are ints or named symbolic dimensions, None when unknown."""
    if any(not _known(s) for s in shapes):
        return None
    keys = [[_dim_key(d) for d in s] for s in shapes]  # type: ignore[union-attr]
    out: list[object] = []
    for i in range(1, max((len(k) for k in keys), default=0) + 1):
        dims = {k[-i] for k in keys if len(k) >= i} - {1}
        if len(dims) > 1:
            return None
        out.insert(0, dims.pop() if dims else 1)
    return out


def broadcast_expands(model: ir.Model) -> int:
    """An ``Expand`` feeding a broadcasting elementwise operator:

    * removed when the other inputs already broadcast to the output's shape
      (``Mul(Expand(s, [B, S, D]), x)`` with ``x`` of shape ``[B, S, D]`` is ``Mul(s, x)``);
    * moved after the operator when the other inputs are no larger than the Expand's input
      (``Div(Expand(s, shape), 256)`` is ``Expand(Div(s, 256), shape)``: the division runs on
      ``s``, not on the expanded tensor), where it may meet the first case.

    The backward of a mean or a norm expands a ``[B, S, 1]`` reduction before scaling it:
    every moved or removed Expand is one pass less over the full tensor."""
    graph = model.graph
    count, changed = 0, True
    while changed:
        changed = False
        for node in [n for n in graph if n.op_type in _BROADCASTING and n.domain == ""]:
            out = node.outputs[0]
            if not out.uses() and out not in graph.outputs:  # replaced earlier, removed at the end
                continue
            target = [_dim_key(d) for d in out.shape] if _known(out.shape) else None
            if target is None or any(v is None for v in node.inputs):
                continue
            for i, value in enumerate(node.inputs):
                expand = producer(value, "Expand")
                if expand is None:
                    continue
                source = expand.inputs[0]
                without = _broadcast(source.shape, *[v.shape for j, v in enumerate(node.inputs) if j != i])
                if without == target:
                    node.replace_input_with(i, source)
                    count, changed = count + 1, True
                    break
                movable = len(value.uses()) == 1 and value not in graph.outputs and out not in graph.outputs
                if movable and without is not None and without == [_dim_key(d) for d in source.shape]:
                    inputs = list(node.inputs)
                    inputs[i] = source
                    moved = ir.node(node.op_type, inputs, {name: a.value for name, a in node.attributes.items()})
                    moved.outputs[0].dtype = out.dtype
                    moved.outputs[0].shape = ir.Shape(list(source.shape))
                    new_expand = ir.node("Expand", [moved.outputs[0], expand.inputs[1]])
                    replace(graph, node, [moved, new_expand], [out], [new_expand.outputs[0]])
                    count, changed = count + 1, True
                    break
    return count
