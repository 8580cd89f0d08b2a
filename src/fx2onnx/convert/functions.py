"""Submodules exported as ONNX local functions (``to_onnx(..., export_modules_as_functions=...)``).

torch.export flattens the model into one graph but remembers, on every node, the
stack of module calls it comes from (``node.meta["nn_module_stack"]``). The
nodes of one call of a selected module become one ONNX local function; its
inputs are the tensors the call reads (activations and weights), its outputs
the tensors used after it. Calls producing the same function body (same class,
same signature) share one function: the weights differ, they are inputs.

.. code-block:: python

    import torch, fx2onnx

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    onx = fx2onnx.to_onnx(model, (torch.randn(2, 4),), export_modules_as_functions={torch.nn.Linear})
    print([f.name for f in onx.functions])  # ['Linear']
"""

from __future__ import annotations

import operator
from typing import Any, Iterable

import onnx_ir as ir
import torch

from .builder import GraphBuilder
from .errors import ConversionError

#: domain of the local functions made from modules
FUNCTION_DOMAIN = "fx2onnx.modules"


class ModuleSelector:
    """Decides which module calls become functions.

    :param selection: True (every submodule, nested ones included), or a set of
        module classes (or their qualified names ``"pkg.mod.Class"`` or names ``"Class"``)
    """

    def __init__(self, selection: bool | Iterable[Any]):
        if selection is True:
            self.names: set[str] | None = None
        elif isinstance(selection, (set, list, tuple, frozenset)):
            self.names = set()
            for s in selection:
                if isinstance(s, type) and issubclass(s, torch.nn.Module):
                    self.names.add(f"{s.__module__}.{s.__qualname__}")
                elif isinstance(s, str):
                    self.names.add(s)
                else:
                    raise TypeError(
                        f"export_modules_as_functions expects module classes or their names, got {s!r}."
                    )
        else:
            raise TypeError(
                f"export_modules_as_functions must be True or a set of module classes, got {selection!r}."
            )

    def __call__(self, class_name: str) -> bool:
        if self.names is None:
            return True
        return class_name in self.names or class_name.split(".")[-1] in self.names


def _stack(node: torch.fx.Node) -> list[tuple[str, str, str]]:
    """``[(call key, module path, class name), ...]`` from the outermost module, root excluded."""
    stack = node.meta.get("nn_module_stack") or {}
    items = [(key, str(path), str(cls) if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}") for key, (path, cls) in stack.items()]
    # torch adds a placeholder entry to nodes it creates itself (runtime asserts, sizes)
    return [it for it in items if it[1] not in ("", "L['self']") and not it[1].startswith("_empty_nn_module_stack")]


def _group_of(node: torch.fx.Node, selector: ModuleSelector, parent_key: str | None) -> tuple[str, str, str] | None:
    stack = _stack(node)
    if parent_key is not None:
        keys = [k for k, _, _ in stack]
        if parent_key not in keys:
            return None
        stack = stack[keys.index(parent_key) + 1 :]
    for item in stack:
        if selector(item[2]):
            return item
    return None


def _node_inputs(node: torch.fx.Node) -> list[torch.fx.Node]:
    return list(node.all_input_nodes)


class FunctionConverter:
    """Converts an FX graph, turning the calls of selected modules into local functions."""

    def __init__(self, interpreter: Any, root: GraphBuilder, selector: ModuleSelector):
        self.interpreter = interpreter
        self.root = root
        self.selector = selector
        self.bodies: dict[str, list[tuple[str, str]]] = {}  # class -> [(structure key, function name)]
        self.inlined: list[str] = []

    # main entry
    def run(self, builder: GraphBuilder, graph: torch.fx.Graph, env: dict, owner: Any) -> Any:
        nodes = [n for n in graph.nodes if n.op in ("call_function", "get_attr")]
        self._convert(builder, nodes, env, owner, None)
        output = next(n for n in graph.nodes if n.op == "output")
        return self.interpreter._map_args(output.args[0], env)

    def _convert_plain(self, builder: GraphBuilder, node: torch.fx.Node, env: dict, owner: Any) -> None:
        if node.op == "get_attr":
            env[node] = self.interpreter._get_attr(builder, owner, node)
        else:
            env[node] = self.interpreter.convert_node(builder, node, env)

    def _convert(self, builder: GraphBuilder, nodes: list[torch.fx.Node], env: dict, owner: Any, parent_key: str | None) -> None:
        groups: dict[str, list[torch.fx.Node]] = {}
        info: dict[str, tuple[str, str, str]] = {}
        member: dict[torch.fx.Node, str] = {}
        for node in nodes:
            g = _group_of(node, self.selector, parent_key) if node.op == "call_function" else None
            if g is None and node.target is operator.getitem and node.args and node.args[0] in member:
                g = info[member[node.args[0]]]
            if g is not None:
                groups.setdefault(g[0], []).append(node)
                info[g[0]] = g
                member[node] = g[0]
        last = {key: members[-1] for key, members in groups.items()}
        position = {n: i for i, n in enumerate(nodes)}
        for node in nodes:
            key = member.get(node)
            if key is None:
                self._convert_plain(builder, node, env, owner)
            elif node is last[key]:
                self._emit_group(builder, groups[key], info[key], env, owner, position)

    # one module call
    def _emit_group(self, builder, members, info, env, owner, position) -> None:
        key, path, class_name = info
        inside = set(members)
        end = max(position[n] for n in members)
        outputs = [n for n in members if any(u not in inside for u in n.users)]
        externals: list[torch.fx.Node] = []
        for n in members:
            for i in _node_inputs(n):
                if i not in inside and i not in externals:
                    externals.append(i)
        ok = all(position.get(u, end + 1) > end for o in outputs for u in o.users if u not in inside)
        ok = ok and all(isinstance(env[e], ir.Value) or not _has_value(env[e]) for e in externals)
        if not ok:
            self.inlined.append(path)
            self._convert(builder, members, env, owner, key)  # inline, nested modules may still be functions
            return
        fb = GraphBuilder(class_name.split(".")[-1], builder.opset, parent=self.root)
        fenv: dict[torch.fx.Node, Any] = {}
        call_inputs: list[ir.Value] = []
        for e in externals:
            value = env[e]
            if isinstance(value, ir.Value):
                fenv[e] = fb.add_input(e.name, value.dtype, None if value.shape is None else list(value.shape))
                call_inputs.append(value)
            else:
                fenv[e] = value  # a Python constant (int, GraphModule...) known at export time
        self._convert(fb, members, fenv, owner, key)
        results = [fenv[o] for o in outputs]
        value_outputs = [(o, r) for o, r in zip(outputs, results) if isinstance(r, ir.Value)]
        if not value_outputs or any(not isinstance(r, ir.Value) and _has_value(r) for r in results):
            self.inlined.append(path)  # no tensor (or a list of tensors) leaves the module
            self._convert(builder, members, env, owner, key)  # inline, nested modules may still be functions
            return
        for o, r in zip(outputs, results):
            if not isinstance(r, ir.Value):
                env[o] = r  # a Python constant computed inside the module
        for _, r in value_outputs:
            fb.add_output(r)
        for outer in self._lift_free_values(fb):
            call_inputs.append(outer)
        name = self._register(fb, class_name)
        previous = builder.metadata
        builder.metadata = {"fx_node": members[-1].name, "module": path, "module_class": class_name}
        try:
            outs = builder.make_node(name, call_inputs, num_outputs=len(value_outputs), domain=FUNCTION_DOMAIN)
        finally:
            builder.metadata = previous
        outs = outs if isinstance(outs, tuple) else (outs,)
        for (o, r), v in zip(value_outputs, outs):
            v.dtype, v.shape = r.dtype, r.shape
            self.interpreter._name_and_type(builder, v, o.name, o.meta.get("val"))
            env[o] = v

    def _lift_free_values(self, fb: GraphBuilder) -> list[ir.Value]:
        """Values the body reads from outside (initializers...) become extra function inputs."""
        produced: set[int] = {id(v) for v in fb.inputs}
        free: dict[int, ir.Value] = {}
        uses: list[tuple[ir.Node, int, ir.Value]] = []

        def visit(nodes: Iterable[ir.Node], local: set[int]) -> None:
            for node in nodes:
                for i, v in enumerate(node.inputs):
                    if v is not None and id(v) not in local:
                        free.setdefault(id(v), v)
                        uses.append((node, i, v))
                for attr in node.attributes.values():
                    for g in _subgraphs(attr):
                        visit(g, local | {id(v) for v in g.inputs} | _produced(g))
                local.update(id(o) for o in node.outputs)

        produced |= {id(o) for n in fb.nodes for o in n.outputs}
        visit(fb.nodes, produced)
        replacement = {key: fb.add_input(v.name or "free", v.dtype, None if v.shape is None else list(v.shape)) for key, v in free.items()}
        for node, i, v in uses:
            node.replace_input_with(i, replacement[id(v)])
        return list(free.values())

    def _register(self, fb: GraphBuilder, class_name: str) -> str:
        structure = _structure(fb.inputs, fb.nodes, fb.outputs)
        known = self.bodies.setdefault(class_name, [])
        for s, name in known:
            if s == structure:
                return name
        base = class_name.split(".")[-1]
        name = base if not known else f"{base}_{len(known)}"
        while any(f.name == name for f in self.root.functions.values()):
            name = f"{name}_"
        graph = ir.Graph(fb.inputs, fb.outputs, nodes=fb.nodes, opset_imports=dict(self.root.opset_imports), name=name)
        self.root.functions[(FUNCTION_DOMAIN, name, "")] = ir.Function(FUNCTION_DOMAIN, name, graph=graph, attributes=[])
        self.root.opset_imports.setdefault(FUNCTION_DOMAIN, 1)
        known.append((structure, name))
        return name


def _has_value(x: Any) -> bool:
    """True for values which must flow as ONNX values (lists of Values)."""
    if isinstance(x, ir.Value):
        return True
    if isinstance(x, (list, tuple)):
        return any(_has_value(i) for i in x)
    return False


def _subgraphs(attr: ir.Attr) -> list[ir.Graph]:
    if attr.type == ir.AttributeType.GRAPH:
        return [attr.value]
    if attr.type == ir.AttributeType.GRAPHS:
        return list(attr.value)
    return []


def _produced(graph: ir.Graph) -> set[int]:
    return {id(o) for n in graph for o in n.outputs}


def _structure(inputs: list[ir.Value], nodes: Iterable[ir.Node], outputs: list[ir.Value]) -> str:
    """A canonical text of a function body: same text, same function."""
    ids: dict[int, str] = {}
    for i, v in enumerate(inputs):
        ids[id(v)] = f"i{i}:{v.dtype}:{len(v.shape) if v.shape is not None else '?'}"
    lines: list[str] = []

    def name_of(v: ir.Value | None) -> str:
        if v is None:
            return "-"
        return ids.get(id(v), f"outer:{v.name}")

    def walk(body: Iterable[ir.Node], prefix: str) -> None:
        for node in body:
            attrs = []
            for attr_name, attr in sorted(node.attributes.items()):
                if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
                    for k, g in enumerate(_subgraphs(attr)):
                        for j, gi in enumerate(g.inputs):
                            ids[id(gi)] = f"{prefix}{attr_name}{k}in{j}"
                        walk(g, f"{prefix}{attr_name}{k}.")
                        attrs.append(f"{attr_name}->[{','.join(name_of(o) for o in g.outputs)}]")
                elif attr.type == ir.AttributeType.TENSOR:
                    attrs.append(f"{attr_name}={attr.value.numpy().tobytes().hex()}:{attr.value.dtype}:{list(attr.value.shape)}")
                else:
                    attrs.append(f"{attr_name}={attr.value!r}")
            for k, o in enumerate(node.outputs):
                ids[id(o)] = f"{prefix}n{len(lines)}o{k}"
            lines.append(
                f"{prefix}{node.domain}:{node.op_type}({','.join(name_of(v) for v in node.inputs)}){{{';'.join(attrs)}}}"
            )

    walk(nodes, "")
    lines.append("out:" + ",".join(name_of(o) for o in outputs))
    return "\n".join(lines)


def convert_with_functions(interpreter: Any, builder: GraphBuilder, graph: torch.fx.Graph, env: dict, owner: Any, selection: Any) -> Any:
    """Converts ``graph`` like :meth:`Interpreter.run_nodes`, module calls becoming local functions."""
    converter = FunctionConverter(interpreter, builder, ModuleSelector(selection))
    outputs = converter.run(builder, graph, env, owner)
    if converter.inlined and interpreter.verbose:
        print(f"[to_onnx] modules kept inline (outputs used before the call ends): {converter.inlined}")
    return outputs


__all__ = ["ConversionError", "FUNCTION_DOMAIN", "ModuleSelector", "convert_with_functions"]
