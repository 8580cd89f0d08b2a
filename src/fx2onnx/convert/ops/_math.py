"""A small expression helper to write special functions as formulas over ONNX values.

``M(ctx, x)`` wraps a value computed in float64 (onnxruntime has float64 kernels for
the arithmetic, Exp, Log, Sqrt, Sin, Cos but not for Erf, Tan, Atan: the helpers
below avoid those). Python numbers become constants of the same dtype.

.. code-block:: python

    x = M.of(ctx, value)          # cast to float64
    y = (x * x + 1).log() / 2
    return y.to(ctx.out_dtype())
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import onnx_ir as ir
import torch

F64 = torch.float64


class M:
    """An ONNX value of dtype float64 with arithmetic operators creating nodes."""

    def __init__(self, ctx, value: ir.Value):
        self.ctx = ctx
        self.v = value

    @classmethod
    def of(cls, ctx, value: Any) -> "M":
        return cls(ctx, ctx.as_value(value, F64) if isinstance(value, ir.Value) else ctx.const(float(value), F64))

    def _o(self, other: Any) -> ir.Value:
        return other.v if isinstance(other, M) else self.ctx.const(float(other), F64)

    def _w(self, value: ir.Value) -> "M":
        return M(self.ctx, value)

    # arithmetic
    def __add__(self, o):
        return self._w(self.ctx.op.Add(self.v, self._o(o)))

    def __radd__(self, o):
        return self._w(self.ctx.op.Add(self._o(o), self.v))

    def __sub__(self, o):
        return self._w(self.ctx.op.Sub(self.v, self._o(o)))

    def __rsub__(self, o):
        return self._w(self.ctx.op.Sub(self._o(o), self.v))

    def __mul__(self, o):
        return self._w(self.ctx.op.Mul(self.v, self._o(o)))

    def __rmul__(self, o):
        return self._w(self.ctx.op.Mul(self._o(o), self.v))

    def __truediv__(self, o):
        return self._w(self.ctx.op.Div(self.v, self._o(o)))

    def __rtruediv__(self, o):
        return self._w(self.ctx.op.Div(self._o(o), self.v))

    def __neg__(self):
        return self._w(self.ctx.op.Neg(self.v))

    def __pow__(self, o):
        return self._w(self.ctx.op.Pow(self.v, self._o(o)))

    # comparisons give boolean values (ir.Value)
    def __lt__(self, o):
        return self.ctx.op.Less(self.v, self._o(o))

    def __le__(self, o):
        return self.ctx.op.LessOrEqual(self.v, self._o(o))

    def __gt__(self, o):
        return self.ctx.op.Greater(self.v, self._o(o))

    def __ge__(self, o):
        return self.ctx.op.GreaterOrEqual(self.v, self._o(o))

    def eq(self, o):
        return self.ctx.op.Equal(self.v, self._o(o))

    # unary functions
    def exp(self):
        return self._w(self.ctx.op.Exp(self.v))

    def log(self):
        return self._w(self.ctx.op.Log(self.v))

    def sqrt(self):
        return self._w(self.ctx.op.Sqrt(self.v))

    def abs(self):
        return self._w(self.ctx.op.Abs(self.v))

    def sin(self):
        return self._w(self.ctx.op.Sin(self.v))

    def cos(self):
        return self._w(self.ctx.op.Cos(self.v))

    def floor(self):
        return self._w(self.ctx.op.Floor(self.v))

    def round(self):
        return self._w(self.ctx.op.Round(self.v))

    def sign(self):
        return self._w(self.ctx.op.Sign(self.v))

    def isnan(self):
        return self.ctx.op.IsNaN(self.v)

    def isinf(self, positive: bool = True, negative: bool = True):
        return self.ctx.op.IsInf(self.v, detect_positive=int(positive), detect_negative=int(negative))

    def maximum(self, o):
        return self._w(self.ctx.op.Max(self.v, self._o(o)))

    def minimum(self, o):
        return self._w(self.ctx.op.Min(self.v, self._o(o)))

    def to(self, dtype: torch.dtype) -> ir.Value:
        return self.ctx.cast(self.v, dtype)


def where(cond: ir.Value, a: Any, b: Any) -> M:
    """Elementwise choice between two expressions (one may be a Python number)."""
    base = a if isinstance(a, M) else b
    ctx = base.ctx
    return M(ctx, ctx.op.Where(cond, base._o(a), base._o(b)))


def both(ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    return ctx.op.And(a, b)


def horner(x: M, coefficients: Sequence[float]) -> M:
    """c[0] * x^(n-1) + ... + c[n-1] (highest degree first)."""
    result = M.of(x.ctx, coefficients[0])
    for c in coefficients[1:]:
        result = result * x + c
    return result


def power_series(q: M, coefficients: Sequence[float]) -> M:
    """sum_k c[k] q^k (lowest degree first) nested on the ratios c[k] / c[k-1].

    The coefficients of a long series get tiny (1e-160); onnxscript's rewriter treats
    ``x + c`` with ``|c| < 1e-8`` as ``x`` (its no-op rule matches constants with a
    tolerance), so the series is written with ratios that stay far from 0 and 1.
    """
    first = next(k for k, c in enumerate(coefficients) if c != 0)
    tail = list(coefficients[first:])
    total = M.of(q.ctx, 1.0)
    for k in range(len(tail) - 1, 0, -1):
        total = 1.0 + q * (tail[k] / tail[k - 1]) * total
    total = total * tail[0]
    for _ in range(first):
        total = total * q
    return total


def sin_pi(x: M) -> M:
    """sin(pi x) = (-1)^n sin(pi (x - n)) with n = round(x): x - n is exact, zeros at integers are exact."""
    n = x.round()
    parity = n - (n / 2.0).floor() * 2.0
    return ((x - n) * math.pi).sin() * (1.0 - parity * 2.0)


def cot_pi(x: M) -> M:
    """cos(pi x) / sin(pi x) (period 1: computed on x - round(x))."""
    r = (x - x.round()) * math.pi
    return r.cos() / r.sin()


# erf / erfc / erfcx in float64 without onnxruntime's Erf (float32 only)
_ERF_SERIES_TERMS = 40
_ERFC_FRACTION_TERMS = 60
ERF_SWITCH = 2.0


def erf_series(x: M) -> M:
    """erf(x) = 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)), accurate for |x| < 2.5."""
    x2 = x * x
    term = x * 1.0
    total = x * 1.0
    for n in range(1, _ERF_SERIES_TERMS):
        term = term * x2 * (-1.0 / n)
        total = total + term * (1.0 / (2 * n + 1))
    return total * (2.0 / math.sqrt(math.pi))


def erfcx_fraction(x: M) -> M:
    """exp(x^2) erfc(x) by Laplace's continued fraction, for x >= 2."""
    k = x * 1.0
    for n in range(_ERFC_FRACTION_TERMS, 0, -1):
        k = x + (n / 2.0) / k
    return 1.0 / (k * math.sqrt(math.pi))


def erfc_nonneg(x: M) -> M:
    """erfc(x) for x >= 0 with a relative accuracy kept in the tail."""
    small = x.minimum(ERF_SWITCH)
    large = x.maximum(ERF_SWITCH)
    return where(x < ERF_SWITCH, 1.0 - erf_series(small), (-(large * large)).exp() * erfcx_fraction(large))


def erfcx(x: M) -> M:
    """exp(x^2) erfc(x) for every x (inf when x^2 overflows for negative x, as torch)."""
    a = x.abs()
    small = a.minimum(ERF_SWITCH)
    large = a.maximum(ERF_SWITCH)
    erf_small = erf_series(small)
    positive = where(a < ERF_SWITCH, (small * small).exp() * (1.0 - erf_small), erfcx_fraction(large))
    negative = where(a < ERF_SWITCH, (small * small).exp() * (1.0 + erf_small), (a * a).exp() * 2.0 - erfcx_fraction(large))
    return where(x < 0, negative, positive)


def erf_value(ctx, x, dtype: torch.dtype):
    """erf(x) as a value of ``dtype``: ONNX Erf, or the float64 formula (onnxruntime has no float64 Erf)."""
    if dtype != F64:
        return ctx.op.Erf(ctx.cast(x, dtype))
    v = M.of(ctx, x)
    a = v.abs()
    tail = (1.0 - erfc_nonneg(a.maximum(ERF_SWITCH))) * v.sign()
    return where(a < ERF_SWITCH, erf_series(v.minimum(ERF_SWITCH).maximum(-ERF_SWITCH)), tail).v


def erfc_value(ctx, x, dtype: torch.dtype):
    """erfc(x) as a value of ``dtype``, computed in float64 (relative accuracy kept in the upper tail)."""
    v = M.of(ctx, x)
    a = v.abs()
    upper = erfc_nonneg(a)
    return where(v < 0.0, 2.0 - upper, upper).to(dtype)


def atan2_value(ctx, y, x, dtype: torch.dtype):
    """atan2(y, x) with the quadrants and the axes (x == 0, y == 0 gives 0) as torch computes it."""
    zero, pi = ctx.const(0.0, dtype), ctx.const(math.pi, dtype)
    x_zero = ctx.op.Equal(x, zero)
    safe_x = ctx.op.Where(x_zero, ctx.const(1.0, dtype), x)
    atan = ctx.op.Atan(ctx.op.Div(y, safe_x))
    half_pi = ctx.op.Where(ctx.op.Less(y, zero), ctx.const(-math.pi / 2, dtype), ctx.const(math.pi / 2, dtype))
    on_axis = ctx.op.Where(ctx.op.Equal(y, zero), zero, half_pi)
    corr = ctx.op.Where(ctx.op.Less(y, zero), ctx.op.Neg(pi), pi)
    left = ctx.op.Add(atan, corr)
    return ctx.op.Where(x_zero, on_axis, ctx.op.Where(ctx.op.Less(x, zero), left, atan))
