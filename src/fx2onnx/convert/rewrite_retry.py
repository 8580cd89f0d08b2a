"""A capture that failed on tensor values, tried again with the model's code rewritten.

``if x.sum() > 0:`` or ``x[:, : int(lengths.max())]`` in a ``forward`` stops
:func:`torch.export.export` (``Could not guard on data-dependent expression``), and
:func:`torch.onnx.export` with it. The rewriting of :mod:`fx2onnx.patches.rewrite` turns such a
test into :func:`torch.cond` (both branches in the graph, ONNX ``If``) and ``int(t)`` /
``float(t)`` of a tensor into ``t.item()`` (a symbolic number torch.export keeps), but a user must
know to ask for it (``torch_export_patches(rewrite=model)``). :func:`fx2onnx.to_onnx` asks by
itself: when the capture fails on a data-dependent guard and the ``forward`` of a module class of
the model holds such code, the capture runs again with it rewritten, and a
:class:`RewrittenControlFlowWarning` names the functions and the lines. ``patches=False`` turns
this off; when the second capture fails too, the first error is raised with a line telling what
was tried.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Iterator

import torch

from ..patches.rewrite import find_ifs_to_rewrite, find_scalar_reads, rewrite_function
from .errors import ExportError
from .specializations import data_dependent_cause, data_dependent_line


class RewrittenControlFlowWarning(UserWarning):
    """:func:`fx2onnx.to_onnx` rewrote ``if`` statements on tensor values into ``torch.cond`` to capture the model."""


def _lines_to_rewrite(function: Callable[..., Any]) -> list[int]:
    """The lines of ``function`` with an ``if`` test or an ``int()`` / ``float()`` read of tensor values."""

    try:
        return sorted({line for line, _ in find_ifs_to_rewrite(function) + find_scalar_reads(function)})
    except (ValueError, SyntaxError, OSError, TypeError):  # no readable source
        return []


def _rewritable_forwards(model: Any) -> dict[type, tuple[Callable[..., Any], list[int]]]:
    """``{class: (forward, lines to rewrite)}`` for every module class of the model whose ``forward`` holds
    something to rewrite."""
    if not isinstance(model, torch.nn.Module):
        return {}
    found: dict[type, tuple[Callable[..., Any], list[int]]] = {}
    for module in model.modules():
        cls = type(module)
        forward = cls.__dict__.get("forward")
        if forward is not None and cls not in found and (lines := _lines_to_rewrite(forward)):
            found[cls] = (forward, lines)
    return found


@contextlib.contextmanager
def _rewritten(forwards: dict[type, tuple[Callable[..., Any], list[int]]]) -> Iterator[None]:
    """The classes' ``forward`` replaced by their rewritten code, restored on exit (a class defined
    inside a function is patched too: no dotted path to resolve)."""

    new = {cls: rewrite_function(forward, scalar_reads=True).function for cls, (forward, _) in forwards.items()}
    try:
        for cls, function in new.items():
            cls.forward = function
        yield
    finally:
        for cls, (forward, _) in forwards.items():
            cls.forward = forward


def capture_rewriting_if_needed(run_capture: Callable[[], Any], model: Any, patches: Any) -> Any:
    """``run_capture()``; on an :class:`ExportError` caused by a data-dependent guard, once more with the
    ``if`` statements on tensors of the model's ``forward`` methods rewritten (unless ``patches`` is False)."""
    try:
        return run_capture()
    except ExportError as error:
        forwards = _rewritable_forwards(model) if patches is not False and data_dependent_cause(error) else {}
        if not forwards:
            raise
        where = "; ".join(
            f"{forward.__qualname__} (line {', '.join(map(str, lines))})" for forward, lines in forwards.values()
        )
        try:
            with _rewritten(forwards):
                result = run_capture()
        except Exception as retry_error:  # noqa: BLE001 - the first error is the one to show
            line = data_dependent_line(retry_error)
            first = str(retry_error).strip().splitlines()[0] if str(retry_error).strip() else ""
            error.args = (
                f"{error.args[0]}\nfx2onnx also tried with the `if` statements on tensor values of {where} "
                f"rewritten into torch.cond (and int() / float() of tensors into .item()); that capture failed too"
                f"{f' at {line}' if line else ''}: {type(retry_error).__name__}: {first}",
            )
            raise error
        warnings.warn(
            f"torch.export cannot capture an `if` on tensor values nor int() / float() of a tensor: to_onnx "
            f"rewrote those of {where} (an `if` into torch.cond: both branches in the graph, an ONNX If; int(t) / "
            f"float(t) into t.item(): a symbolic number). Pass patches=False to refuse this, or write it so yourself.",
            RewrittenControlFlowWarning,
            stacklevel=3,
        )
        return result
