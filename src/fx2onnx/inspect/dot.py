"""Graphs as pictures: ONNX models and FX graphs written in the DOT language.

:func:`to_dot` draws a model the way Netron does: one box per node with its
operator, the inputs and outputs with their types and shapes, the weights
listed inside the node using them instead of one box each, and every subgraph
(the branches of ``If``, the bodies of ``Scan`` and ``Loop``, the local
functions, the submodules of ``torch.cond``...) as a cluster. :func:`render_dot`
turns the text into SVG or PNG with the ``dot`` program of the pip package
``graphviz-pure`` (or a Graphviz ``dot`` found on the ``PATH``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

import onnx

# node colours by operator family, as a reader expects them from Netron
_FAMILIES = {
    "#cfe2f3": {"Conv", "ConvTranspose", "Gemm", "MatMul", "MatMulNBits", "Einsum", "linear", "mm", "addmm",
                "matmul", "bmm", "conv2d", "conv1d", "convolution"},
    "#f4cccc": {"Relu", "Sigmoid", "Tanh", "Gelu", "Softmax", "LogSoftmax", "Erf", "LeakyRelu", "HardSigmoid",
                "relu", "sigmoid", "tanh", "gelu", "softmax", "silu", "_softmax"},
    "#d9ead3": {"Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "Squeeze",
                "Unsqueeze", "Expand", "Shape", "Flatten", "ScatterND", "ScatterElements", "view", "reshape",
                "transpose", "permute", "cat", "slice", "select", "unsqueeze", "squeeze", "expand", "getitem",
                "sym_size"},
    "#fff2cc": {"LayerNormalization", "BatchNormalization", "InstanceNormalization", "RMSNormalization",
                "SimplifiedLayerNormalization", "GroupNormalization", "layer_norm", "batch_norm", "rms_norm",
                "native_layer_norm", "group_norm"},
    "#ead1dc": {"If", "Loop", "Scan", "cond", "scan", "while_loop", "map_impl", "wrap_with_set_grad_enabled"},
}
_COLOR = {op: color for color, ops in _FAMILIES.items() for op in ops}
_DEFAULT_COLOR = "#eeeeee"
_FUNCTION_COLOR = "#d9d2e9"
_IO_STYLE = 'shape=box, style="rounded,filled", fillcolor="#444444", fontcolor="white"'
_HEADER = [
    '    graph [rankdir=TB, compound=true, fontname="Helvetica", fontsize=10];',
    '    node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, fillcolor="#eeeeee"];',
    '    edge [fontname="Helvetica", fontsize=10, fontcolor="#222222", color="#555555"];',
]
_MAX_WEIGHTS_IN_LABEL = 4


def _quote(text: str) -> str:
    """A DOT double-quoted string, new lines kept as ``\\n``."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class _Dot:
    """Accumulates DOT lines, gives every drawn object a unique identifier."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        # edges leaving a cluster are written last, at the top level: an edge written inside
        # a cluster would pull its source node into that cluster
        self.top_edges: list[str] = []
        self.count = 0
        self.indent = 1

    def new_id(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def add(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def node(self, ident: str, label: str, attrs: str = "") -> None:
        self.add(f"{ident} [label={_quote(label)}{', ' + attrs if attrs else ''}];")

    def edge(self, src: str, dst: str, label: str = "", attrs: str = "", top: bool = False) -> None:
        extra = [f"label={_quote(label)}"] if label else []
        if attrs:
            extra.append(attrs)
        line = f"{src} -> {dst}{' [' + ', '.join(extra) + ']' if extra else ''};"
        if top:
            self.top_edges.append("    " + line)
        else:
            self.add(line)

    def open_cluster(self, label: str, color: str = "#888888") -> str:
        ident = self.new_id("cluster_")
        self.add(f"subgraph {ident} {{")
        self.indent += 1
        self.add(f'label={_quote(label)}; style="rounded,dashed"; color="{color}"; fontsize=10;')
        return ident

    def close_cluster(self) -> None:
        self.indent -= 1
        self.add("}")

    def text(self, title: str) -> str:
        head = [f"digraph {_quote(title)} {{", *_HEADER]
        return "\n".join(head + self.lines + self.top_edges + ["}"]) + "\n"


def _weights_text(weights: list[str]) -> str:
    if len(weights) > _MAX_WEIGHTS_IN_LABEL:
        weights = weights[:_MAX_WEIGHTS_IN_LABEL] + [f"... {len(weights) - _MAX_WEIGHTS_IN_LABEL} more"]
    return "\n".join(weights)


# --- ONNX --------------------------------------------------------------------------------


def _onnx_type(type_proto: onnx.TypeProto) -> str:
    if type_proto.HasField("tensor_type"):
        tensor = type_proto.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else "?"
        if not tensor.HasField("shape"):
            return dtype
        dims = [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?") for d in tensor.shape.dim]
        return f"{dtype}[{','.join(dims)}]"
    if type_proto.HasField("sequence_type"):
        return f"seq({_onnx_type(type_proto.sequence_type.elem_type)})"
    if type_proto.HasField("optional_type"):
        return f"optional({_onnx_type(type_proto.optional_type.elem_type)})"
    return "?"


def _initializer_text(init: onnx.TensorProto) -> str:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name
    return f"{init.name} <{dtype}[{'x'.join(map(str, init.dims))}]>"


def _subgraphs(node: onnx.NodeProto) -> Iterable[tuple[str, onnx.GraphProto]]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for i, graph in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", graph


class _OnnxDrawer:
    def __init__(self, dot: _Dot, functions: dict[tuple[str, str], onnx.FunctionProto], types: dict[str, str]):
        self.dot = dot
        self.functions = functions
        self.types = types
        self.drawn_functions: dict[tuple[str, str], str] = {}

    def draw_scope(
        self, inputs: list[str], outputs: list[str], nodes, initializers, scopes: list[dict[str, str]],
        outer_weights: dict[str, str] | None = None,
    ):
        """Draws one graph or function body; returns the identifier of one of its nodes."""
        dot = self.dot
        producers: dict[str, str] = {}
        # a subgraph may use the initializers of the graphs around it
        weights = {**(outer_weights or {}), **{init.name: _initializer_text(init) for init in initializers}}
        first = None
        for name in inputs:
            if name in weights:  # old models list initializers among the inputs
                continue
            ident = dot.new_id("i")
            first = first or ident
            dot.node(ident, f"{name}\n{self.types.get(name, '')}".strip(), _IO_STYLE)
            producers[name] = ident
        # subgraphs see the values of every enclosing scope
        stack = [*scopes, producers]
        clusters: list[tuple[str, str, onnx.GraphProto]] = []
        for node in nodes:
            ident = dot.new_id("n")
            first = first or ident
            key = (node.domain, node.op_type)
            in_weights = [weights[name] for name in node.input if name in weights]
            title = node.op_type if not node.domain or node.domain == "ai.onnx" else f"{node.domain}.{node.op_type}"
            label = "\n".join([title] + ([_weights_text(in_weights)] if in_weights else []))
            color = _FUNCTION_COLOR if key in self.functions else _COLOR.get(node.op_type, _DEFAULT_COLOR)
            dot.node(ident, label, f'fillcolor="{color}"')
            for name in node.input:
                if not name or name in weights:
                    continue
                src = next((scope[name] for scope in reversed(stack) if name in scope), None)
                if src is not None:
                    inner = name in producers
                    dot.edge(src, ident, self.types.get(name, ""), "" if inner else "style=dotted", top=not inner)
            for name in node.output:
                if name:
                    producers[name] = ident
            for attr_name, graph in _subgraphs(node):
                clusters.append((ident, f"{node.op_type} {node.name}: {attr_name}".replace("  ", " "), graph))
            if key in self.functions and key not in self.drawn_functions:
                self.drawn_functions[key] = ident
        for name in outputs:
            ident = dot.new_id("o")
            dot.node(ident, f"{name}\n{self.types.get(name, '')}".strip(), _IO_STYLE)
            if name in producers:
                dot.edge(producers[name], ident)
        for owner, label, graph in clusters:
            cluster = dot.open_cluster(label)
            inner = self.draw_scope(
                [v.name for v in graph.input], [v.name for v in graph.output], graph.node, graph.initializer, stack,
                weights,
            )
            dot.close_cluster()
            dot.edge(owner, inner, attrs=f'lhead={cluster}, style=dashed, color="#888888"', top=True)
        return first

    def draw_functions(self) -> None:
        for key, caller in self.drawn_functions.items():
            function = self.functions[key]
            cluster = self.dot.open_cluster(f"function {function.domain}.{function.name}", "#8e7cc3")
            inner = self.draw_scope(list(function.input), list(function.output), function.node, [], [])
            self.dot.close_cluster()
            self.dot.edge(caller, inner, attrs=f'lhead={cluster}, style=dashed, color="#8e7cc3"', top=True)


def _onnx_types(model: onnx.ModelProto) -> tuple[dict[str, str], str]:
    """Type and shape of every named value (shape inference fills the intermediate ones)."""
    note = ""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception as e:  # a custom domain the inference does not know: shapes from the model only
        inferred, note = model, f"shape inference failed: {type(e).__name__}"
    types: dict[str, str] = {}

    def collect(graph: onnx.GraphProto) -> None:
        for value in [*graph.input, *graph.output, *graph.value_info]:
            types[value.name] = _onnx_type(value.type)
        for node in graph.node:
            for _, sub in _subgraphs(node):
                collect(sub)

    collect(inferred.graph)
    for function in inferred.functions:
        for value in function.value_info:
            types[value.name] = _onnx_type(value.type)
    return types, note


def _onnx_to_dot(model: onnx.ModelProto, title: str) -> str:
    dot = _Dot()
    types, note = _onnx_types(model)
    functions = {(f.domain, f.name): f for f in model.functions}
    drawer = _OnnxDrawer(dot, functions, types)
    graph = model.graph
    inputs = [v.name for v in graph.input]
    drawer.draw_scope(inputs, [v.name for v in graph.output], graph.node, graph.initializer, [])
    drawer.draw_functions()
    summary = f"{title}: {len(graph.node)} nodes, {len(graph.initializer)} initializers"
    if model.functions:
        summary += f", {len(model.functions)} local functions"
    dot.add(f"label={_quote(summary + (' (' + note + ')' if note else ''))}; labelloc=t;")
    return dot.text(title)


# --- FX ----------------------------------------------------------------------------------


def _fx_value(val: Any) -> str:
    import torch

    if isinstance(val, torch.Tensor):
        return f"{str(val.dtype).replace('torch.', '')}[{','.join(str(d) for d in val.shape)}]"
    if isinstance(val, (list, tuple)):
        return "(" + ", ".join(_fx_value(v) for v in val) + ")"
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
        return str(val)
    return ""


def _fx_target(node) -> str:
    import torch

    target = node.target
    if node.op == "call_module":
        return str(target)
    if node.op == "call_method":
        return f".{target}"
    if isinstance(target, torch._ops.OpOverload):
        name = f"{target.namespace}.{target._schema.name.split('::')[-1]}"
        return name if target._overloadname == "default" else f"{name}.{target._overloadname}"
    return getattr(target, "__name__", None) or str(target)


def _fx_family(node) -> str:
    target = _fx_target(node).split(".")
    return target[1] if len(target) > 1 and target[0] in ("aten", "prims") else target[-1]


class _FxDrawer:
    def __init__(self, dot: _Dot, root):
        self.dot = dot
        self.root = root  # the module owning the submodules named by get_attr nodes

    def draw_graph(self, gm, weights_of: dict[str, str], scopes: list[dict[str, str]]) -> str | None:
        import torch

        dot = self.dot
        producers: dict[Any, str] = {}
        weights: dict[Any, str] = {}
        submodules: dict[Any, Any] = {}
        clusters: list[tuple[str, str, Any]] = []
        first = None
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if node.op == "placeholder" and node.name in weights_of:
                weights[node] = f"{weights_of[node.name]} <{_fx_value(val)}>"
                continue
            if node.op == "get_attr":
                attr = gm
                for part in str(node.target).split("."):
                    attr = getattr(attr, part)
                if isinstance(attr, torch.fx.GraphModule):
                    submodules[node] = attr
                else:
                    weights[node] = f"{node.target} <{_fx_value(attr) if isinstance(attr, torch.Tensor) else ''}>"
                continue
            if node.op == "output":
                outputs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
                for i, out in enumerate(outputs):
                    ident = dot.new_id("o")
                    value = _fx_value(out.meta.get("val")) if isinstance(out, torch.fx.Node) else repr(out)
                    dot.node(ident, f"output_{i}\n{value}".strip(), _IO_STYLE)
                    if out in producers:
                        dot.edge(producers[out], ident)
                continue
            ident = dot.new_id("n")
            first = first or ident
            producers[node] = ident
            if node.op == "placeholder":
                dot.node(ident, f"{node.name}\n{_fx_value(val)}".strip(), _IO_STYLE)
                continue
            in_weights = [weights[arg] for arg in node.all_input_nodes if arg in weights]
            label = "\n".join([_fx_target(node)] + ([_weights_text(in_weights)] if in_weights else []))
            dot.node(ident, label, f'fillcolor="{_COLOR.get(_fx_family(node), _DEFAULT_COLOR)}"')
            for arg in node.all_input_nodes:
                if arg in producers:
                    dot.edge(producers[arg], ident, _fx_value(arg.meta.get("val")))
                elif arg in submodules:
                    clusters.append((ident, f"{_fx_target(node)}: {arg.target}", submodules[arg]))
        for owner, label, sub in clusters:
            cluster = dot.open_cluster(label)
            inner = self.draw_graph(sub, {}, [*scopes, producers])
            dot.close_cluster()
            if inner is not None:
                dot.edge(owner, inner, attrs=f'lhead={cluster}, style=dashed, color="#888888"', top=True)
        return first


def _fx_to_dot(gm, weights_of: dict[str, str], title: str) -> str:
    dot = _Dot()
    _FxDrawer(dot, gm).draw_graph(gm, weights_of, [])
    n_nodes = sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_module", "call_method"))
    dot.add(f"label={_quote(f'{title}: {n_nodes} nodes, {len(weights_of)} weights')}; labelloc=t;")
    return dot.text(title)


# --- public functions --------------------------------------------------------------------


def to_dot(model: Any, title: str | None = None) -> str:
    """Returns the graph of ``model`` in the DOT language, drawn as Netron would.

    :param model: an :class:`onnx.ModelProto`, the path of an ONNX file, a
        :class:`torch.fx.GraphModule` or a :class:`torch.export.ExportedProgram`
    :param title: the name of the graph (default: the graph's own name or the class)
    :return: DOT text, to render with :func:`render_dot` or ``sphinx.ext.graphviz``

    Nodes are boxes named after their operator (ATen operators for an FX graph),
    coloured by family; inputs and outputs are dark boxes with their type and
    shape, edges carry the type and shape of the value going through them.
    Weights (initializers, parameters, buffers) are listed inside the node using
    them. Subgraphs (``If`` branches, ``Scan``/``Loop`` bodies, the submodules
    of ``torch.cond``/``scan``) and the local functions of an ONNX model are
    clusters linked to their node by a dashed edge; a dotted edge brings a value
    of an enclosing graph into a subgraph.
    """
    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model), load_external_data=False)
    if isinstance(model, onnx.ModelProto):  # no need to import torch
        return _onnx_to_dot(model, title or model.graph.name or "model")
    import torch

    if isinstance(model, torch.export.ExportedProgram):
        sig = model.graph_signature
        weights_of = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
        return _fx_to_dot(model.graph_module, weights_of, title or "ExportedProgram")
    if isinstance(model, torch.fx.GraphModule):
        return _fx_to_dot(model, {}, title or type(model).__name__)
    raise TypeError(
        f"to_dot does not draw a {type(model).__name__}: give an onnx.ModelProto, the path of an ONNX "
        "file, a torch.fx.GraphModule or a torch.export.ExportedProgram (torch.export.export(model, args))."
    )


def find_dot() -> str:
    """The ``dot`` program: ``$FX2ONNX_DOT``, then ``graphviz-pure`` next to the Python
    interpreter or on the ``PATH``, then Graphviz's ``dot`` on the ``PATH``."""
    candidates = [os.environ.get("FX2ONNX_DOT", ""), str(Path(sys.executable).parent / "graphviz-pure")]
    candidates += [shutil.which("graphviz-pure") or "", shutil.which("dot") or ""]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(
        "No dot program found: install the pip package graphviz-pure (pip install graphviz-pure, pinned "
        "in requirements-docs.txt), install Graphviz, or set FX2ONNX_DOT to the path of a dot program."
    )


def render_dot(dot: str, fmt: str = "svg", filename: str | os.PathLike | None = None) -> bytes:
    """Renders DOT text with :func:`find_dot`'s program; ``fmt`` is ``svg`` or ``png``.

    Returns the bytes of the image and also writes them into ``filename`` if given.
    """
    result = subprocess.run([find_dot(), f"-T{fmt}"], input=dot.encode("utf-8"), capture_output=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"dot failed (exit code {result.returncode}): {result.stderr.decode(errors='replace')}")
    if filename is not None:
        Path(filename).write_bytes(result.stdout)
    return result.stdout


def _as_dot(model_or_dot: Any, title: str | None = None) -> str:
    if isinstance(model_or_dot, str) and model_or_dot.lstrip().startswith("digraph"):
        return model_or_dot
    return to_dot(model_or_dot, title=title)


class GraphPicture:
    """A graph drawn by :func:`to_dot` and rendered as SVG: text stays sharp at any size.

    :param model_or_dot: anything :func:`to_dot` takes, or DOT text
    :param title: the caption of the picture (also the graph's name)

    ``picture.svg`` holds the SVG text, ``picture.save(filename)`` writes it. A notebook
    displays the picture (``_repr_html_``). In the gallery of this site, every picture a code
    cell creates is shown below the cell, linked to its full-size file (the image scraper
    ``_doc/gallery_scrapers.py``); keep it in a variable so that the scraper sees it.
    """

    def __init__(self, model_or_dot: Any, title: str | None = None):
        self.title = title
        self.dot = _as_dot(model_or_dot, title)
        self.svg = render_dot(self.dot, "svg").decode("utf-8")
        #: set by the gallery's scraper once the picture is on the page
        self.shown = False

    def save(self, filename: str | os.PathLike) -> Path:
        """Writes the SVG file, returns its path."""
        path = Path(filename)
        path.write_text(self.svg, encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        start = self.svg.find("<svg")
        return f'<div style="max-width:100%;overflow:auto">{self.svg[start:]}</div>'

    def __repr__(self) -> str:
        return f"GraphPicture(title={self.title!r}, {len(self.svg)} characters of SVG)"


def plot_dot(model_or_dot: Any, ax: Any = None, title: str | None = None, dpi: int = 96) -> Any:
    """Draws a model (anything :func:`to_dot` takes) or DOT text on a matplotlib axis.

    The graph is rendered to PNG with :func:`render_dot` and shown with ``imshow``;
    the labels of a large graph become small: :class:`GraphPicture` keeps them sharp (SVG).
    Returns the axis.
    """
    import io

    import matplotlib.image
    import matplotlib.pyplot as plt

    dot = _as_dot(model_or_dot)
    dot = dot.replace("    graph [", f"    graph [dpi={dpi}, ", 1)
    image = matplotlib.image.imread(io.BytesIO(render_dot(dot, "png")), format="png")
    if ax is None:
        height, width = image.shape[:2]
        _, ax = plt.subplots(figsize=(max(width / dpi, 3), max(height / dpi, 2)))
    ax.imshow(image)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax
