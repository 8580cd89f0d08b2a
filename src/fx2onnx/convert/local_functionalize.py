"""In-place operators on intermediate tensors made out-of-place, without re-tracing the program.

:func:`torch.export.export` keeps the in-place operators of the model (``x[mask] = v`` is
``aten.index_put_``); ONNX has none. :meth:`torch.export.ExportedProgram.run_decompositions`
functionalizes them by tracing the whole program again, which costs as much as the capture on a
large model with symbolic sizes (Longformer-base: one ``index_put_`` doubled the capture time).

Most of these mutations write into a tensor the model computed itself and read only through that
tensor afterwards. :func:`functionalize_intermediates` replaces each such operator by its
out-of-place variant (``index_put_`` by ``index_put``) and makes the later readers of the tensor
read the new value. It leaves a mutation alone (``run_decompositions`` handles it as before) when
anything else could observe it:

* the tensor is, or is a view of, an input, a parameter, a buffer or a constant;
* another view of the same storage (a base, a sibling view) is read after the mutation, unless the write goes
  through ``select`` and ``slice`` views of a tensor the model computed (``boxes[:, 0] = w``, ``grid[..., 0] /= w``):
  the new value is then scattered back into that tensor (``select_scatter``, ``slice_scatter``) and the later
  readers read views of the result;
* a node whose aliasing is unknown (a higher-order operator, a Python function) reads any of them;
* the tensor is a mutated buffer or input of the program's signature;
* the out-of-place variant does not exist, or its result differs in dtype or shape from the
  tensor's (an in-place add keeps the tensor's dtype, ``add`` promotes).

.. code-block:: python

    import torch
    from fx2onnx.convert.local_functionalize import functionalize_intermediates

    class M(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            y[y > 1] = 0.0
            return y + 1

    ep = torch.export.export(M(), (torch.rand(3, 4),))
    print(functionalize_intermediates(ep))  # ['aten.index_put_.default']
"""

from __future__ import annotations

import operator
from typing import Any

import torch

#: operators returning a view of their input whose schema does not say so
_UNDECLARED_VIEWS = frozenset({"aten::_unsafe_view", "aten::alias", "aten::lift_fresh"})


def _schema(target: Any) -> Any:
    return getattr(target, "_schema", None) if isinstance(target, torch._ops.OpOverload) else None


def _written_arguments(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The nodes an operator writes into (None: it writes nothing)."""
    schema = _schema(node.target)
    if schema is None or not schema.is_mutable:
        return None
    written: list[torch.fx.Node] = []
    for index, argument in enumerate(schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
        if isinstance(value, torch.fx.Node):
            written.append(value)
        elif value is not None:
            return []  # a list of tensors written: not handled
    return written


def _aliased_inputs(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The input nodes ``node``'s output may share storage with; None when unknown."""
    if node.op != "call_function":
        return []
    if node.target is operator.getitem:
        return [node.args[0]] if isinstance(node.args[0], torch.fx.Node) else []
    schema = _schema(node.target)
    if schema is None:
        return None
    returns_alias = any(r.alias_info is not None for r in schema.returns) or schema.name in _UNDECLARED_VIEWS
    if not returns_alias and "Tensor(" not in str(schema).split("->", 1)[-1]:
        return []
    inputs: list[torch.fx.Node] = []
    for index, argument in enumerate(schema.arguments):
        if argument.alias_info is None and not (schema.name in _UNDECLARED_VIEWS and index == 0):
            continue
        value = node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
        if isinstance(value, torch.fx.Node):
            inputs.append(value)
    return inputs


class _AliasGroups:
    """Nodes grouped by the storage they may share (union-find over the views and mutations)."""

    def __init__(self, graph: torch.fx.Graph):
        self.parent: dict[torch.fx.Node, torch.fx.Node] = {}
        # read by a node of unknown aliasing, or computed by one
        self.unknown: set[torch.fx.Node] = set()
        for node in graph.nodes:
            self.parent.setdefault(node, node)
            inputs = _aliased_inputs(node)
            if inputs is None:
                self.unknown.add(node)
                self.unknown.update(node.all_input_nodes)
                continue
            for value in inputs:
                self._union(node, value)

    def find(self, node: torch.fx.Node) -> torch.fx.Node:
        root = node
        while self.parent.setdefault(root, root) is not root:
            root = self.parent[root]
        while self.parent[node] is not root:
            self.parent[node], node = root, self.parent[node]
        return root

    def _union(self, a: torch.fx.Node, b: torch.fx.Node) -> None:
        self.parent[self.find(a)] = self.find(b)

    def members(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        root = self.find(node)
        return [n for n in self.parent if self.find(n) is root]


def _out_of_place(target: Any) -> Any:
    """``aten.index_put_.default`` -> ``aten.index_put.default`` (None when there is none or it differs)."""
    schema = target._schema
    namespace, name = schema.name.split("::", 1)
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(getattr(torch.ops, namespace), name[:-1], None)
    overload = getattr(packet, target._overloadname, None) if packet is not None else None
    other = _schema(overload)
    if other is None or other.is_mutable:
        return None
    if [a.name for a in other.arguments] != [a.name for a in schema.arguments]:
        return None
    return overload


def _same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return a.dim() == b.dim() and all(statically_known_true(x == y) for x, y in zip(a.shape, b.shape))


def _replace(ep: torch.export.ExportedProgram, groups: _AliasGroups, node: torch.fx.Node, order: dict) -> bool:
    graph = ep.graph_module.graph
    written = _written_arguments(node)
    if not written or len(written) != 1:
        return False
    tensor = written[0]
    members = groups.members(tensor)
    if any(m.op in ("placeholder", "get_attr") for m in members) or any(m in groups.unknown for m in members):
        return False
    names = {m.name for m in members}
    for spec in ep.graph_signature.output_specs:
        if spec.kind != torch.export.graph_signature.OutputKind.USER_OUTPUT and getattr(spec.arg, "name", None) in names:
            return False
    # the views taken after the write from the written tensor read the new value once rewired
    fresh = {tensor, node}
    for member in sorted(members, key=order.__getitem__):
        if order[member] > order[node] and set(_aliased_inputs(member) or [None]) <= fresh:
            fresh.add(member)
    later_readers: list[torch.fx.Node] = []
    for member in members:
        for user in member.users:
            if user is node or order[user] < order[node]:
                continue
            if member not in fresh:
                return False
            later_readers.append(user)
    replacement = _out_of_place(node.target)
    value = tensor.meta.get("val")
    if replacement is None or not isinstance(value, torch.Tensor):
        return False
    fake_args = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    try:
        with value.fake_mode if hasattr(value, "fake_mode") else torch._subclasses.FakeTensorMode():
            result = replacement(*fake_args[0], **fake_args[1])
    except Exception:
        return False
    if not isinstance(result, torch.Tensor) or result.dtype != value.dtype or not _same_shape(result, value):
        return False
    with graph.inserting_before(node):
        new = graph.call_function(replacement, node.args, node.kwargs)
    new.meta.update(node.meta)
    new.meta["val"] = result
    for reader in later_readers:
        if tensor in reader.all_input_nodes:
            reader.replace_input_with(tensor, new)
    node.replace_all_uses_with(new)
    renamed = {tensor.name, node.name}
    for spec in ep.graph_signature.output_specs:  # a user output naming the tensor now names the new value
        if getattr(spec.arg, "name", None) in renamed:
            spec.arg = type(spec.arg)(name=new.name)
    graph.erase_node(node)
    return True


#: a view whose write goes back into its base through an out-of-place scatter
_SCATTERS = {torch.ops.aten.select.int: torch.ops.aten.select_scatter.default,
             torch.ops.aten.slice.Tensor: torch.ops.aten.slice_scatter.default}


def _view_path(node: torch.fx.Node, members: set[torch.fx.Node]) -> list[torch.fx.Node] | None:
    """The views from the group's base to ``node`` (``[]``: ``node`` is the base, a fresh tensor; a write's
    result stands for the tensor it wrote); None when a step is not a view of its first argument."""
    path: list[torch.fx.Node] = []
    while True:
        written = _written_arguments(node)
        if written:
            if len(written) != 1:
                return None
            node = written[0]
            continue
        inputs = _aliased_inputs(node)
        if inputs == []:
            return path[::-1]
        if inputs is None or len(inputs) != 1 or not node.args or node.args[0] is not inputs[0] \
                or node.target is operator.getitem or inputs[0] not in members:
            return None
        path.append(node)
        node = inputs[0]


def _call(graph: torch.fx.Graph, target: Any, args: tuple, kwargs: dict, like: torch.fx.Node) -> torch.fx.Node:
    """``target(*args, **kwargs)`` inserted in ``graph`` with its fake value (raises when it has none)."""
    fake = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
    value = like.meta["val"]
    with value.fake_mode if hasattr(value, "fake_mode") else torch._subclasses.FakeTensorMode():
        result = target(*fake[0], **fake[1])
    node = graph.call_function(target, args, kwargs)
    node.meta.update({k: v for k, v in like.meta.items() if k != "val"})
    node.meta["val"] = result
    return node


def _replace_through_views(ep: torch.export.ExportedProgram, groups: _AliasGroups, node: torch.fx.Node,
                           order: dict) -> bool:
    """Replaces ``node``, a write into a view of a tensor the model computed (``y[level, 0] = h``, ``y[..., 0] /= w``),
    by its out-of-place variant scattered back into the base (``select_scatter``, ``slice_scatter``); the nodes read
    after the write then read views of the new base. Only the first write of its group, the group a tree of views of
    one fresh tensor: its earlier views hold the values the write sees."""
    graph = ep.graph_module.graph
    written = _written_arguments(node)
    if not written or len(written) != 1:
        return False
    members = groups.members(written[0])
    member_set = set(members)
    if any(m.op in ("placeholder", "get_attr") or m in groups.unknown for m in members):
        return False
    names = {m.name for m in members}
    user = torch.export.graph_signature.OutputKind.USER_OUTPUT
    if any(spec.kind != user and getattr(spec.arg, "name", None) in names for spec in ep.graph_signature.output_specs):
        return False
    if any(order[m] < order[node] and _written_arguments(m) for m in members):
        return False  # an earlier write of the group was left to torch
    path = _view_path(written[0], member_set)
    replacement = _out_of_place(node.target)
    value = written[0].meta.get("val")
    if path is None or replacement is None or not isinstance(value, torch.Tensor) \
            or any(step.target not in _SCATTERS for step in path):
        return False
    # the nodes read after the write: each member computed before it, and the write itself
    earlier = [m for m in members if order[m] < order[node] and any(order[u] > order[node] for u in m.users)]
    paths = {m: _view_path(m, member_set) for m in earlier + [node]}
    if any(p is None for p in paths.values()):
        return False
    try:
        with graph.inserting_before(node):
            new = _call(graph, replacement, node.args, node.kwargs, node)
            if new.meta["val"].dtype != value.dtype or not _same_shape(new.meta["val"], value):
                raise ValueError("the out-of-place result differs in dtype or shape")
            for step in reversed(path):
                new = _call(graph, _SCATTERS[step.target], (step.args[0], new, *step.args[1:]), step.kwargs, step)
            views: dict[torch.fx.Node, torch.fx.Node] = {}
            for member, steps in paths.items():
                view = new
                for step in steps:
                    view = _call(graph, step.target, (view, *step.args[1:]), step.kwargs, step)
                views[member] = view
    except Exception:  # noqa: BLE001 - a value torch cannot compute here: left to run_decompositions
        for n in reversed(list(graph.nodes)):
            if n.op == "call_function" and not n.users and order.get(n) is None:
                graph.erase_node(n)
        return False
    renamed: dict[str, str] = {}
    for member in earlier:
        for user in list(member.users):
            if order.get(user, -1) > order[node]:
                user.replace_input_with(member, views[member])
                if user.op == "output":
                    renamed[member.name] = views[member].name
    for user in list(node.users):
        if user.op == "output":
            renamed[node.name] = views[node].name
    node.replace_all_uses_with(views[node])
    for spec in ep.graph_signature.output_specs:
        if getattr(spec.arg, "name", None) in renamed:
            spec.arg = type(spec.arg)(name=renamed[spec.arg.name])
    graph.erase_node(node)
    return True


def functionalize_intermediates(ep: torch.export.ExportedProgram) -> list[str]:
    """Replaces, in place, the in-place operators on intermediate tensors of ``ep``'s graph (see the
    module's docstring); returns the names of the replaced operators, one per replacement."""
    graph = ep.graph_module.graph
    replaced: list[str] = []
    while True:
        order = {n: i for i, n in enumerate(graph.nodes)}
        groups = _AliasGroups(graph)
        for node in list(graph.nodes):
            if node.op == "call_function" and _written_arguments(node):
                name = str(node.target)
                if _replace(ep, groups, node, order) or _replace_through_views(ep, groups, node, order):
                    replaced.append(name)
                    break
        else:
            break
    if replaced:
        graph.lint()
        ep.graph_module.recompile()
    return replaced
