"""Elementwise functions accurate near 0 and runnable by onnxruntime in every float dtype.

* ``log1p`` and ``expm1``: ``log(1 + x)`` and ``exp(x) - 1`` lose every digit for a tiny
  ``x`` (``log1p(1e-10)`` gave 0 in float32). Both are computed in float64 with the
  classical corrections:
  ``log1p(x) = log(u) * x / (u - 1)`` with ``u = 1 + x`` (``x`` itself when ``u == 1``) and
  ``expm1(x) = (u - 1) * x / log(u)`` with ``u = exp(x)``.
* trigonometric and hyperbolic functions in float64: onnxruntime has no double kernel for
  ``Tan``, ``Asin``, ``Acos``, ``Atan``, ``Sinh``, ``Cosh``, ``Asinh``, ``Acosh``, ``Atanh``
  (measured with onnxruntime 1.23: the session refuses the model). In float64 they are
  written with ``Exp``, ``Log``, ``Sqrt``, ``Sin``, ``Cos`` and a Newton-refined ``atan2``;
  other dtypes keep the ONNX operator.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..registry import converter
from ._math import F64, M, horner, where
from .complex import atan2

aten = torch.ops.aten

#: beyond this, x * x overflows in float64: asinh and acosh use log(2x)
_LARGE = 1e150


def log1p(x: M) -> M:
    """log(1 + x), accurate for a tiny x; inf, -1 and x < -1 as torch."""
    u = x + 1.0
    out = where(u.eq(1.0), x, u.log() * x / (u - 1.0))
    return where(x.isinf(negative=False), x, out)


def expm1(x: M) -> M:
    """exp(x) - 1, accurate for a tiny x."""
    u = x.exp()
    out = where(u.eq(1.0), x, (u - 1.0) * x / u.log())
    out = where((u - 1.0).eq(-1.0), -1.0, out)
    return where(u.isinf(negative=False), u, out)


def _sinh(x: M) -> M:
    # Taylor series below 1 (x + x^3/3! + ... + x^19/19!, next term < 3e-20), exponentials above
    series = x * horner(x * x, [1.0 / math.factorial(2 * k + 1) for k in range(9, -1, -1)])
    return where(x.abs() < 1.0, series, (x.exp() - (-x).exp()) / 2.0)


def _asinh(x: M) -> M:
    s = x.abs()
    small = log1p(s + s * s / (1.0 + (s * s + 1.0).sqrt()))
    return where(s > _LARGE, s.log() + math.log(2.0), small) * x.sign()


def _acosh(x: M) -> M:
    small = log1p((x - 1.0) + ((x - 1.0) * (x + 1.0)).sqrt())
    return where(x > _LARGE, x.log() + math.log(2.0), small)


def _root_one_minus_square(x: M) -> M:
    return ((1.0 - x) * (1.0 + x)).sqrt()


def _atan2(y: M, x: M) -> M:
    return M(y.ctx, atan2(y.ctx, y.v, x.v, F64))


DOUBLE_FORMULAS: dict[str, Callable[[M], M]] = {
    "Tan": lambda x: x.sin() / x.cos(),
    "Asin": lambda x: _atan2(x, _root_one_minus_square(x)),
    "Acos": lambda x: _atan2(_root_one_minus_square(x), x),
    "Atan": lambda x: where(x.isinf(), x.sign() * (math.pi / 2), _atan2(x, M.of(x.ctx, 1.0))),
    "Sinh": _sinh,
    "Cosh": lambda x: (x.exp() + (-x).exp()) / 2.0,
    "Asinh": _asinh,
    "Acosh": _acosh,
    "Atanh": lambda x: log1p(2.0 * x / (1.0 - x)) * 0.5,
}


def _unary(op_type: str):
    def convert(ctx, node, x):
        dtype = ctx.out_dtype()
        x = ctx.cast(x, dtype)
        if dtype == torch.float64:
            return DOUBLE_FORMULAS[op_type](M(ctx, x)).v
        return getattr(ctx.op, op_type)(x)

    convert.__name__ = f"convert_{op_type.lower()}"
    convert.__doc__ = f"``{op_type}``; in float64 written with operators onnxruntime runs in double."
    return convert


for _op_type in DOUBLE_FORMULAS:
    converter(getattr(aten, _op_type.lower()).default)(_unary(_op_type))


def _accurate(formula: Callable[[M], M]):
    def convert(ctx, node, x):
        # computed in float64 (the corrections need the exact u - 1), cast back
        return formula(M.of(ctx, x)).to(ctx.out_dtype())

    return convert


converter(aten.log1p.default)(_accurate(log1p))
converter(aten.expm1.default)(_accurate(expm1))
