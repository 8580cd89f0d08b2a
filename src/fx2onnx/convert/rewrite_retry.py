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

from .errors import ExportError


class RewrittenControlFlowWarning(UserWarning):
    """:func:`fx2onnx.to_onnx` rewrote ``if`` statements on tensor values into ``torch.cond`` to capture the model."""


def _failed_on_data(error: BaseException) -> bool:
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, GuardOnDataDependentSymNode):
            return True
        error = error.__cause__ or error.__context__
    return False


def _found(function: Callable[..., Any]) -> list[tuple[int, str]]:
    """The ``if`` tests and the ``int()`` / ``float()`` reads of tensor values in ``function``, by line."""
    from ..patches.rewrite import find_ifs_to_rewrite, find_scalar_reads

    try:
        return sorted(find_ifs_to_rewrite(function) + find_scalar_reads(function))
    except (ValueError, SyntaxError, OSError, TypeError):  # no readable source
        return []


def _rewritable_forwards(model: Any) -> list[tuple[type, Callable[..., Any]]]:
    """``(class, forward)`` for every module class of the model whose ``forward`` holds something to rewrite."""
    if not isinstance(model, torch.nn.Module):
        return []
    found: list[tuple[type, Callable[..., Any]]] = []
    for module in model.modules():
        cls = type(module)
        forward = cls.__dict__.get("forward")
        if forward is not None and all(c is not cls for c, _ in found) and _found(forward):
            found.append((cls, forward))
    return found


@contextlib.contextmanager
def _rewritten(forwards: list[tuple[type, Callable[..., Any]]]) -> Iterator[None]:
    """The classes' ``forward`` replaced by their rewritten code, restored on exit (a class defined
    inside a function is patched too: no dotted path to resolve)."""
    from ..patches.rewrite import rewrite_function

    new = [rewrite_function(forward, scalar_reads=True).function for _, forward in forwards]
    try:
        for (cls, _), function in zip(forwards, new):
            cls.forward = function
        yield
    finally:
        for cls, forward in forwards:
            cls.forward = forward


def capture_rewriting_if_needed(run_capture: Callable[[], Any], model: Any, patches: Any) -> Any:
    """``run_capture()``; on an :class:`ExportError` caused by a data-dependent guard, once more with the
    ``if`` statements on tensors of the model's ``forward`` methods rewritten (unless ``patches`` is False)."""
    try:
        return run_capture()
    except ExportError as error:
        forwards = _rewritable_forwards(model) if patches is not False and _failed_on_data(error) else []
        if not forwards:
            raise
        where = "; ".join(
            f"{f.__qualname__} (line {', '.join(str(line) for line in sorted({line for line, _ in _found(f)}))})"
            for _, f in forwards
        )
        try:
            with _rewritten(forwards):
                result = run_capture()
        except Exception as retry_error:  # noqa: BLE001 - the first error is the one to show
            from .specializations import data_dependent_line

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
