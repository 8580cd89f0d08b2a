"""Errors raised by :func:`fx2onnx.to_onnx`, each pointing back to the user's code."""

from __future__ import annotations

import os
from typing import Any

FREQUENT_ERRORS_PAGE = "tutorial/frequent_exceptions (Frequent exceptions in the documentation)"


def _torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__) + os.sep


def node_source_line(node: Any) -> str:
    """Returns the last user frame of an FX node's stack trace, or ``""``.

    Frames inside torch itself (``torch/nn/modules/linear.py``) are skipped when
    the trace has another one: the line which matters is the one calling torch.
    """
    trace = getattr(node, "meta", {}).get("stack_trace") or ""
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    # the stack trace alternates 'File "...", line N, in f' and the code line
    frames = []
    for i, line in enumerate(lines):
        if line.startswith("File "):
            # code compiled without a file name (exec of a string) is shown as Python names it
            line = line.replace('File ""', 'File "<string>"', 1)
            code = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith("File ") else ""
            frames.append((line, f"{line}: {code}".strip(": ")))
    if not frames:
        return ""
    torch_dir = _torch_dir()
    outside = [text for line, text in frames if torch_dir not in line]
    return outside[-1] if outside else frames[-1][1]


def node_module_path(node: Any) -> str:
    """Returns the module path (``layers.0.self_attn``) an FX node comes from, or ``""``."""
    stack = getattr(node, "meta", {}).get("nn_module_stack") or {}
    if not stack:
        return ""
    path, _cls = list(stack.values())[-1]
    # torch.export writes paths like "L['self'].layers[0]" or "layers.0"
    return str(path).replace("L['self'].", "").replace("L['self']", "")


def describe_node(node: Any) -> str:
    """A short multi-line description of an FX node for error messages."""
    parts = [f"  FX node: {node.format_node() if hasattr(node, 'format_node') else node}"]
    module = node_module_path(node)
    if module:
        parts.append(f"  module: {module}")
    source = node_source_line(node)
    if source:
        parts.append(f"  source: {source}")
    return "\n".join(parts)


class ExportError(RuntimeError):
    """``torch.export.export`` failed: the model could not be captured as a graph."""


class ConversionError(RuntimeError):
    """A converter failed on a node (bad arguments, shapes or dtypes it cannot handle)."""

    def __init__(self, message: str, node: Any = None):
        self.node = node
        if node is not None:
            message = f"{message}\n{describe_node(node)}"
        super().__init__(message)


class UnsupportedOpError(ConversionError):
    """No converter is registered for an aten (or custom) operator.

    The message names the op, the FX node, the user's source line and shows
    how to give a converter through :class:`fx2onnx.Dispatcher`.
    """

    def __init__(self, target: Any, node: Any = None):
        self.target = target
        name = target_name(target)
        message = (
            f"No converter for operator {name!r}.\n{_patch_hint(name)}"
            f"Register one through the dispatcher, for example:\n\n"
            f"    def convert_op(ctx, node, *args, **kwargs):\n"
            f"        x = args[0]\n"
            f"        return ctx.op.Identity(x)   # build the ONNX nodes here\n\n"
            f"    onx = fx2onnx.to_onnx(model, args, dispatcher=fx2onnx.Dispatcher({{{name!r}: convert_op}}))"
        )
        super().__init__(message, node)


def _patch_hint(name: str) -> str:
    """For a custom operator of transformers, the patch which replaces it."""
    if not name.startswith("transformers::"):
        return ""
    return (
        f"{name!r} is a custom operator of transformers: fx2onnx's transformers patches replace it with "
        f"standard operators. Export with fx2onnx.to_onnx(..., patches='auto') (the default for a model "
        f"containing a transformers module) or patches=True, or inside "
        f"`with fx2onnx.torch_export_patches(patch_transformers=True):`. Otherwise:\n"
    )


def target_name(target: Any) -> str:
    """Readable name of an FX call target (``aten::add.Tensor``, ``operator.mul``)."""
    if hasattr(target, "_schema") and hasattr(target, "_overloadname"):
        overload = target._overloadname
        base = target._schema.name
        return f"{base}.{overload}" if overload and overload != "default" else base
    if hasattr(target, "_qualified_op_name"):
        return target._qualified_op_name
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None) or str(target)
    if module in ("_operator", "operator"):
        module = "operator"
    return f"{module}.{name}" if module else name
