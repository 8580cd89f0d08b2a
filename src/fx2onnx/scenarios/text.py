"""Short text forms of an FX graph and of an ONNX model, one line per node."""

from __future__ import annotations

from typing import Any

import onnx
import torch

_ONNX_TYPES = {v: k for k, v in onnx.TensorProto.DataType.items()}


def _truncate(lines: list[str], max_lines: int) -> str:
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"]
    return "\n".join(lines)


def _fx_value(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        dtype = str(val.dtype).replace("torch.", "")
        return f"{dtype}[{', '.join(str(d) for d in val.shape)}]"
    if isinstance(val, (list, tuple)):
        return "(" + ", ".join(_fx_value(v) for v in val) + ")"
    return repr(val) if val is not None else ""


def _fx_arg(arg: Any) -> str:
    if isinstance(arg, torch.fx.Node):
        return arg.name
    if isinstance(arg, (list, tuple)):
        return "[" + ", ".join(_fx_arg(a) for a in arg) + "]"
    return repr(arg)


def fx_short_text(graph: torch.fx.Graph, max_lines: int = 60) -> str:
    """``name = target(args) -> dtype[shape]`` per node of an FX graph.

    .. code-block:: python

        ep = torch.export.export(torch.nn.ReLU(), (torch.randn(2, 3),))
        print(fx_short_text(ep.graph))
    """
    lines = []
    for node in graph.nodes:
        val = _fx_value(node.meta.get("val"))
        if node.op == "placeholder":
            lines.append(f"input {node.name}: {val}")
        elif node.op == "output":
            lines.append(f"output {_fx_arg(node.args[0])}")
        elif node.op == "get_attr":
            lines.append(f"{node.name} = get_attr {node.target}")
        else:
            target = getattr(node.target, "__name__", str(node.target)) if node.op != "call_function" else str(node.target)
            target = target.replace("aten.", "").replace("torch.ops.", "")
            args = [_fx_arg(a) for a in node.args] + [f"{k}={_fx_arg(v)}" for k, v in node.kwargs.items()]
            lines.append(f"{node.name} = {target}({', '.join(args)})" + (f" -> {val}" if val else ""))
    return _truncate(lines, max_lines)


def _onnx_type(value_info: onnx.ValueInfoProto) -> str:
    t = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        return "?"
    dims = [d.dim_param or str(d.dim_value) if (d.dim_param or d.HasField("dim_value")) else "?" for d in t.shape.dim]
    return f"{_ONNX_TYPES.get(t.elem_type, t.elem_type)}[{', '.join(dims)}]"


def onnx_short_text(model: onnx.ModelProto, max_lines: int = 60) -> str:
    """``outputs = OpType(inputs)`` per node of the main graph of an ONNX model.

    Nodes holding subgraphs (If, Loop, Scan) say so; initializers are only counted.
    """
    graph = model.graph
    lines = [f"input {i.name}: {_onnx_type(i)}" for i in graph.input]
    if graph.initializer:
        lines.append(f"# {len(graph.initializer)} initializer(s)")
    for node in graph.node:
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        subgraphs = [a.name for a in node.attribute if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)]
        extra = f"  # subgraphs: {', '.join(subgraphs)}" if subgraphs else ""
        lines.append(f"{', '.join(node.output)} = {op}({', '.join(node.input)}){extra}")
    lines.extend(f"output {o.name}: {_onnx_type(o)}" for o in graph.output)
    return _truncate(lines, max_lines)
