"""Shortcuts a library takes at one size, giving way to its general code at a dynamic size.

A block may skip work when a size is the one it was built for: attention on the whole
map when it is exactly one window, no interpolation of a position table already of the
right size, no crop when nothing was padded. Both branches compute the same at that size;
exported at such a size, the graph holds the shortcut only and other sizes are refused
(the condition is recorded) or fail in onnxruntime. A rewritten function takes the general
branch when a size its condition reads is symbolic; eager calls and static sizes keep the
shortcut. Each library lists its conditions with the reason both branches agree
(``SHORTCUTS`` in :mod:`fx2onnx.patches.timm_fixes`, :mod:`fx2onnx.patches.diffusers_fixes`).
"""

from __future__ import annotations

import ast
import sys
from typing import Any, Callable, Sequence

import torch

from .registry import Patch, source_guard
from .rewrite import RewrittenFunction, transform_function

_SYMBOLIC = "_fx2onnx_any_symbolic"


def any_symbolic(*values: Any) -> bool:
    """Whether one of ``values`` is a symbolic integer or boolean (a dynamic size being traced)."""
    return any(isinstance(v, (torch.SymInt, torch.SymBool)) for v in values)


_INT = "_fx2onnx_int_of_size"


def int_of_size(value: Any) -> Any:
    """A symbolic integer as it is (``int()`` would make it the example's constant), ``int(value)`` otherwise."""
    return value if isinstance(value, torch.SymInt) else int(value)


def calls_builtin(node: ast.AST, name: str) -> bool:
    """Whether ``node`` is ``name(x)``: a call of the builtin ``name`` on one argument, no keyword."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
            and len(node.args) == 1 and not node.keywords)


class _Shortcuts(ast.NodeTransformer):
    """Each ``<condition>`` becomes ``(<value> if any_symbolic(<the names it reads>) else (<condition>))``;
    ``int(x)`` becomes ``int_of_size(x)``: a size computed before the condition stays symbolic."""

    def __init__(self, conditions: dict[str, bool]) -> None:
        self.values = {ast.dump(ast.parse(c, mode="eval").body): v for c, v in conditions.items()}
        self.lines: list[int] = []

    def visit(self, node: ast.AST) -> ast.AST:
        value = self.values.get(ast.dump(node)) if isinstance(node, ast.expr) else None
        if value is None:
            node = self.generic_visit(node)
            if calls_builtin(node, "int"):
                node.func = ast.Name(id=_INT, ctx=ast.Load())
            return node
        names = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)})
        symbolic = ast.Call(func=ast.Name(id=_SYMBOLIC, ctx=ast.Load()),
                            args=[ast.Name(id=n, ctx=ast.Load()) for n in names], keywords=[])
        self.lines.append(node.lineno)
        return ast.copy_location(ast.IfExp(test=symbolic, body=ast.Constant(value), orelse=node), node)


def rewrite_shortcuts(function: Callable[..., Any], conditions: dict[str, bool]) -> RewrittenFunction:
    """``function`` where each condition (its source) is the given value when a size it reads is
    symbolic: a shortcut taken at one size gives way to the general code, which computes the same
    at that size.

    .. code-block:: python

        import torch
        from fx2onnx.patches.shortcuts import rewrite_shortcuts

        def rows(x):
            n = x.shape[0]
            return x if n == 1 else x.sum(0, keepdim=True)

        g = rewrite_shortcuts(rows, {"n == 1": False}).function
        torch.testing.assert_close(g(torch.ones(1, 3)), rows(torch.ones(1, 3)))
    """
    shortcuts = _Shortcuts(conditions)
    helpers = {_SYMBOLIC: any_symbolic, _INT: int_of_size}
    return transform_function(function, shortcuts.visit, helpers, lambda: shortcuts.lines)


def shortcut_patches(library: str, shortcuts: Sequence[tuple[str, str, str, bool, str]]) -> list[Patch]:
    """One patch per rewritten function of ``shortcuts`` (``(module, function, condition, value at a
    dynamic size, why)``) whose module is already imported, of kind ``library``."""
    targets: dict[tuple[str, str], tuple[dict[str, bool], list[str]]] = {}
    for module, function, condition, value, reason in shortcuts:
        conditions, reasons = targets.setdefault((module, function), ({}, []))
        conditions[condition] = value
        reasons.append(f"{condition!r} is {value} at a dynamic size: {reason}")
    patches = []
    for (module, function), (conditions, reasons) in targets.items():
        if module not in sys.modules:
            continue
        patches.append(Patch(
            name=f"{library}_{function.split('.')[0].strip('_')}_general_branch",
            kind=library,
            target=f"{module}.{function}",
            make=lambda original, conditions=conditions: rewrite_shortcuts(original, conditions).function,
            guard=source_guard(function.split(".")[-1], *conditions, absent="a shortcut's condition is not in the source"),
            doc="; ".join(reasons),
        ))
    return patches
