"""Shared test helpers for the converter families: export, run on onnxruntime, compare.

Test modules in this folder import them with ``from helpers import check_export``
(pytest puts the folder of a test file without ``__init__.py`` on ``sys.path``).
Besides :func:`check_export`: :class:`Fn` / :class:`Fn2` wrap a function of one or
two inputs into a module (:func:`make` picks one from the inputs), :func:`seeded_randn`
and :func:`r` make random inputs, :func:`sweep` keeps a few cases of a sweep in the fast tier.
"""

from __future__ import annotations

import copy
from typing import Any

import onnx
import pytest
import torch

import fx2onnx
from fx2onnx.convert.builder import onnx_dtype
from fx2onnx.convert.capture import prepare_dynamic_shapes
from fx2onnx.convert.complex_values import pair_dtype
from fx2onnx.validation import flatten_outputs, validate


class Fn(torch.nn.Module):
    """Wraps a function of one input into a module."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Fn2(Fn):
    """Wraps a function of two inputs into a module."""

    def forward(self, x, y):
        return self.fn(x, y)


def make(fn, inputs: tuple) -> Fn:
    """Wraps ``fn`` into :class:`Fn` or :class:`Fn2` depending on the number of inputs."""
    return (Fn if len(inputs) == 1 else Fn2)(fn)


def sweep(values, fast) -> list:
    """``values`` as the parameters of a sweep: those in ``fast`` run in the fast tier (``make test``),
    the others are marked ``slow`` (``make test-all`` runs every one); the ids do not change."""
    return [value if value in fast else pytest.param(value, marks=pytest.mark.slow) for value in values]


def seeded_randn(*shape: int, seed: int = 0) -> torch.Tensor:
    """Standard normal tensor drawn from its own generator seeded with ``seed``."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def r(*shape: int) -> torch.Tensor:
    """Standard normal tensor drawn from the global generator."""
    return torch.randn(*shape)


def _expected_dtypes(model: Any, args: tuple, kwargs: dict) -> list[torch.dtype]:
    eager_args, eager_kwargs = copy.deepcopy((tuple(args), dict(kwargs)))
    with torch.no_grad():
        # a complex output is exported as its real pair (torch.view_as_real): float32 for complex64
        return [pair_dtype(t.dtype) for t in flatten_outputs(model(*eager_args, **eager_kwargs))]


def _check_one(
    onx: onnx.ModelProto, model: Any, args: tuple, kwargs: dict, atol: float, rtol: float, label: str
) -> None:
    report = validate(onx, model, args, kwargs, atol=atol, rtol=rtol)
    assert report.ok, f"{label}: {report}\n{report.details}"
    expected = [int(onnx_dtype(d)) for d in _expected_dtypes(model, args, kwargs)]
    got = [o.type.tensor_type.elem_type for o in onx.graph.output]
    assert got == expected, f"{label}: output dtypes {got} != eager dtypes {expected} (onnx enum values)"


def check_export(
    model: Any,
    args: tuple,
    kwargs: dict | None = None,
    dynamic_shapes: Any = None,
    inputs2: tuple[tuple, dict | None] | None = None,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    decompositions: dict | str | None = None,
    **to_onnx_kwargs: Any,
) -> onnx.ModelProto:
    """Exports ``model`` with :func:`fx2onnx.to_onnx` and checks it against eager.

    The ONNX model is checked with :func:`onnx.checker.check_model`, run on
    onnxruntime with ``(args, kwargs)`` and, when given, with ``inputs2``
    (``(args2, kwargs2)``, inputs of other shapes for dynamic dimensions);
    outputs must match eager within ``atol``/``rtol`` and have the same dtypes.

    ``decompositions`` exports the model first and converts the ExportedProgram
    after ``run_decompositions``: ``{}`` functionalizes only (the lower-level
    ops torch gives then), ``"core"`` decomposes into core ATen.

    :return: the ONNX model
    """
    kwargs = dict(kwargs or {})
    if isinstance(model, torch.nn.Module):
        model.eval()
    exported: Any = model
    if decompositions is not None:
        ds, _ = prepare_dynamic_shapes(model, tuple(args), kwargs, dynamic_shapes)
        ep = torch.export.export(model, tuple(args), kwargs=kwargs, dynamic_shapes=ds)
        exported = ep.run_decompositions() if decompositions == "core" else ep.run_decompositions(decompositions)
    onx = fx2onnx.to_onnx(exported, args, kwargs, dynamic_shapes=dynamic_shapes, **to_onnx_kwargs)
    onnx.checker.check_model(onx)
    _check_one(onx, model, tuple(args), kwargs, atol, rtol, "first inputs")
    if inputs2 is not None:
        args2, kwargs2 = inputs2
        _check_one(onx, model, tuple(args2), dict(kwargs2 or {}), atol, rtol, "second inputs")
    return onx
