"""Modified Bessel functions of the second kind K0, K1 and their scaled forms ``K(x) exp(x)``.

Three regions, each accurate to a relative 1e-12 against torch in float64:

* ``x <= 2``: the power series ``K0 = -(log(x/2) + gamma) I0 + sum H_k q^k / k!^2`` and
  ``K1 = 1/x + (log(x/2) + gamma) I1 - x/4 sum (H_k + H_{k+1}) q^k / (k! (k+1)!)``
  (``q = x^2/4``, ``H_k`` the harmonic numbers);
* ``2 < x <= 25``: the integral ``K_nu(x) exp(x) = int_0^inf exp(-x (cosh t - 1)) cosh(nu t) dt``
  by the trapezoidal rule (exponentially accurate on such integrands) after ``t = u / sqrt(x)``,
  which gives every ``x`` an integrand of width about 1 in ``u``: a fixed grid of 161 nodes;
* ``x > 25``: the asymptotic expansion ``sqrt(pi / 2x) sum a_k(nu) / x^k``.

``K(0) = inf``, a negative ``x`` gives NaN, as in torch.
"""

from __future__ import annotations

import math

import torch

from ..registry import converter
from ._math import F64, M, horner, power_series, where
from .special import EULER_GAMMA, _factorial_ratio_coefficients, _hankel_coefficients, _modified_bessel_i

aten = torch.ops.aten

_SERIES_END = 2.0
_ASYMPTOTIC_START = 25.0
_STEP = 0.25
_NODES = 161  # u in [0, 40]: beyond, exp(-x (cosh(u / sqrt(x)) - 1)) < 1e-300 for every x >= 2


def _series(s: M, nu: int) -> M:
    """K_nu(s) for 0 < s <= 2."""
    q = s * s / 4.0
    log_term = (s / 2.0).log() + EULER_GAMMA
    if nu == 0:
        harmonic = power_series(q, _factorial_ratio_coefficients(0, alternating=False, harmonic="h"))
        return harmonic - log_term * _modified_bessel_i(s, 0, scaled=False)
    harmonic = power_series(q, _factorial_ratio_coefficients(1, alternating=False, harmonic="h+h"))
    return 1.0 / s + log_term * _modified_bessel_i(s, 1, scaled=False) - harmonic * s / 4.0


def _integral_scaled(s: M, nu: int) -> M:
    """K_nu(s) exp(s) for 2 <= s <= 25 by the trapezoidal rule."""
    ctx = s.ctx
    nodes = ctx.const([k * _STEP for k in range(_NODES)], F64)  # 1-D, broadcast on a new last axis
    axis = ctx.const([-1], torch.int64)
    x = M(ctx, ctx.op.Unsqueeze(s.v, axis))
    width = 1.0 / x.sqrt()
    t = M(ctx, nodes) * width
    cosh = (t.exp() + (-t).exp()) / 2.0
    integrand = (-(x * (cosh - 1.0))).exp()
    if nu == 1:
        integrand = integrand * cosh
    total = M(ctx, ctx.op.ReduceSum(integrand.v, axis, keepdims=0))
    # the trapezoid's half weight at t = 0, where the integrand is 1 for both orders
    return (total - 0.5) * _STEP / s.sqrt()


def _asymptotic_scaled(big: M, nu: int) -> M:
    coefficients = _hankel_coefficients(nu)[:20]
    return horner(1.0 / big, coefficients[::-1]) * (math.pi / (2.0 * big)).sqrt()


def bessel_k(v: M, nu: int, scaled: bool) -> M:
    """K_nu(v) (times exp(v) when ``scaled``) for nu in {0, 1}."""
    # each region evaluated on v clamped into it (the Where below picks the right one)
    small, big = v.minimum(_SERIES_END), v.maximum(_ASYMPTOTIC_START)
    mid = v.maximum(_SERIES_END).minimum(_ASYMPTOTIC_START)
    series = _series(small.maximum(1e-300), nu)
    middle = _integral_scaled(mid, nu)
    asymptotic = _asymptotic_scaled(big, nu)
    if scaled:
        series = series * small.exp()
    else:
        middle = middle * (-mid).exp()
        asymptotic = asymptotic * (-big).exp()
    out = where(v <= _SERIES_END, series, where(v <= _ASYMPTOTIC_START, middle, asymptotic))
    out = where(v.eq(0.0), math.inf, out)
    out = where(v.isinf(negative=False), 0.0, out)
    return where(v < 0.0, math.nan, out)


def _converter(nu: int, scaled: bool):
    def convert_bessel_k(ctx, node, x):
        return bessel_k(M.of(ctx, x), nu, scaled).to(ctx.out_dtype())

    convert_bessel_k.__name__ = f"convert_{'scaled_' if scaled else ''}modified_bessel_k{nu}"
    convert_bessel_k.__doc__ = "Modified Bessel function of the second kind: series, integral, asymptotic expansion."
    return convert_bessel_k


converter(aten.special_modified_bessel_k0.default)(_converter(0, False))
converter(aten.special_modified_bessel_k1.default)(_converter(1, False))
converter(aten.special_scaled_modified_bessel_k0.default)(_converter(0, True))
converter(aten.special_scaled_modified_bessel_k1.default)(_converter(1, True))
