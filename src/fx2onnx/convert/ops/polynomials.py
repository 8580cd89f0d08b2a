"""Orthogonal polynomials of ``torch.special``: Chebyshev (T, U, V, W and shifted), Hermite
(physicists' H and probabilists' He), Laguerre and Legendre, of a tensor degree ``n``.

Each one is its three-term recurrence ``P(k) = step(x, P(k-2), P(k-1), k)`` run by an ONNX
``Loop`` up to the largest degree of ``n`` (a data-dependent count), every element keeping
the value at its own degree. As in torch, the degree is ``n`` truncated to an integer and a
negative degree gives 0; the computation is in float64, cast to the output dtype.

torch evaluates the Chebyshev polynomials of degree above 6 (T) or 8 (U, V, W) inside
``(-1, 1)`` with trigonometric formulas; the recurrence agrees with them to a relative
1e-12 up to degree 100 in float64 (measured by the tests). Outside ``[-1, 1]`` the
values grow like ``|x|^n`` and overflow as in torch.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..registry import converter
from ._math import F64, M, where

aten = torch.ops.aten

#: name -> (P1(x), step(x, P(k-2), P(k-1), k) giving P(k)); shifted Chebyshev use 2x - 1
_Step = Callable[[M, M, M, M], M]
RECURRENCES: dict[str, tuple[Callable[[M], M], _Step]] = {
    "chebyshev_polynomial_t": (lambda x: x, lambda x, p, q, k: 2 * x * q - p),
    "chebyshev_polynomial_u": (lambda x: 2 * x, lambda x, p, q, k: 2 * x * q - p),
    "chebyshev_polynomial_v": (lambda x: 2 * x - 1, lambda x, p, q, k: 2 * x * q - p),
    "chebyshev_polynomial_w": (lambda x: 2 * x + 1, lambda x, p, q, k: 2 * x * q - p),
    "hermite_polynomial_h": (lambda x: 2 * x, lambda x, p, q, k: 2 * x * q - 2 * (k - 1) * p),
    "hermite_polynomial_he": (lambda x: x, lambda x, p, q, k: x * q - (k - 1) * p),
    "laguerre_polynomial_l": (lambda x: 1 - x, lambda x, p, q, k: ((2 * k - 1 - x) * q - (k - 1) * p) / k),
    "legendre_polynomial_p": (lambda x: x, lambda x, p, q, k: ((2 * k - 1) * x * q - (k - 1) * p) / k),
}


def _broadcast(ctx, x, n) -> tuple[M, M, M, object]:
    """x in float64, n truncated to an integer (float64) and ones (P0), all broadcast to their
    common shape; and n before broadcasting."""
    x = ctx.as_value(x, F64)
    degree = ctx.cast(ctx.cast(ctx.as_value(n, F64), torch.int64), F64)
    shape = ctx.op.Shape(ctx.op.Add(x, degree))
    ones = ctx.op.Expand(ctx.const(1.0, F64), shape)  # not x * 0 + 1: NaN at an infinite x
    return M(ctx, ctx.op.Expand(x, shape)), M(ctx, ctx.op.Expand(degree, shape)), M(ctx, ones), degree


def orthogonal_polynomial(ctx, node, name: str, x, n, shifted: bool = False):
    """The value of polynomial ``name`` of degree ``n`` at ``x`` (see the module's docstring)."""
    first, step = RECURRENCES[name]
    x, degree, one, raw_degree = _broadcast(ctx, x, n)
    if shifted:
        x = 2 * x - 1
    p1 = first(x)
    start = where(degree.eq(0), one, where(degree.eq(1), p1, 0.0))
    # degrees 2 .. max(n): max(max(n) - 1, 0) iterations
    top = ctx.op.ReduceMax(ctx.cast(raw_degree, torch.int64), keepdims=0)
    trips = ctx.op.Max(ctx.op.Sub(top, ctx.const(1, torch.int64)), ctx.const(0, torch.int64))

    sub = ctx.builder.subgraph(f"{node.name}_recurrence")
    iteration = sub.add_input(f"{node.name}_k", torch.int64, [])
    sub.add_input(f"{node.name}_cond", torch.bool, [])
    carried = [sub.add_input(f"{node.name}_{v}", F64, None) for v in ("p", "q", "value")]
    body = type(ctx)(sub, ctx.interpreter, node)
    p, q, value = (M(body, v) for v in carried)
    k = M(body, body.cast(iteration, F64)) + 2
    bx, bdegree = M(body, x.v), M(body, degree.v)
    r = step(bx, p, q, k)
    value = where(bdegree.eq(k), r, value)
    for out in (body.const(True, torch.bool), q.v, r.v, value.v):
        sub.add_output(out)
    outs = ctx.op.Loop(trips, ctx.const(True, torch.bool), one.v, p1.v, start.v, body=sub.to_graph(), _outputs=3)
    return ctx.cast(outs[2], ctx.out_dtype())


def _register(name: str, shifted: bool) -> None:
    packet = getattr(aten, f"special_{'shifted_' if shifted else ''}{name}")

    def convert(ctx, node, x, n):
        return orthogonal_polynomial(ctx, node, name, x, n, shifted=shifted)

    convert.__doc__ = f"``torch.special.{'shifted_' if shifted else ''}{name}``: a recurrence in an ONNX Loop."
    converter(packet.default, packet.x_scalar, packet.n_scalar)(convert)


for _name in RECURRENCES:
    _register(_name, shifted=False)
    if _name.startswith("chebyshev"):
        _register(_name, shifted=True)
