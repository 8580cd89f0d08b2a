"""QR, the symmetric eigenproblem and the SVD as ONNX algorithms.

- QR (``linalg_qr``, ``geqrf``, ``linalg_householder_product``): Householder reflections,
  one column per ``Loop`` step, with LAPACK's conventions (``beta = -sign(alpha) ||x||``,
  ``tau = 0`` when the column is already reduced), so ``R``'s signs match torch's.
- ``_linalg_eigh``: cyclic Jacobi rotations (Golub and Van Loan's symmetric Schur
  decomposition), sweeps over every pair ``p < q`` until the off-diagonal part is below the
  rounding of the dtype (at most :data:`MAX_SWEEPS`), eigenvalues ascending. Eigenvectors
  are unique up to sign (and rotation within repeated eigenvalues), as in torch.
- ``_linalg_svd``: one-sided Jacobi (Hestenes) on the columns of ``A`` (of ``A^T`` when it
  has fewer rows than columns), singular values descending; ``U`` comes from a Householder QR
  of ``A V``, so it has orthonormal columns even for zero singular values and its complete
  form (``full_matrices=True``) is exact. ``linalg_pinv`` on top of it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..registry import converter
from ._linalg_common import (
    I64,
    arange,
    band_mask,
    broadcast_batch,
    column,
    diagonal,
    eye,
    fake_dim,
    gather,
    loop,
    mT,
    size,
    sum_last,
    triangle,
    typed,
    unsqueeze,
    zeros,
)

aten = torch.ops.aten
#: the most Jacobi sweeps (each one rotates every pair once); convergence is quadratic,
#: 6 to 10 sweeps for the sizes of a model's small matrices
MAX_SWEEPS = 40


def _dtype(node, index: int = 0) -> torch.dtype:
    return node.args[index].meta["val"].dtype


def _empty(ctx, dtype):
    return ctx.const(np.zeros((0,), dtype=np.float64 if dtype == torch.float64 else np.float32), dtype)


# QR


def householder_qr(ctx, node, a, dtype, want_q: bool = True):
    """``(R_and_v, Q, tau)``: ``R`` above the diagonal and the Householder vectors below it as
    ``geqrf``, ``Q`` (``(..., m, m)``, product of the reflections) and ``tau`` (``(..., min(m, n))``)."""
    m, n = size(ctx, a, -2), size(ctx, a, -1)
    steps = ctx.op.Min(m, n)
    rows, cols, ks = arange(ctx, m), arange(ctx, n), arange(ctx, steps)
    batch = ctx.op.Shape(a, end=-2)
    q0 = broadcast_batch(ctx, eye(ctx, m, m, dtype), a)
    tau0 = zeros(ctx, ctx.op.Concat(batch, ctx.op.Shape(ks), axis=0), dtype)
    zero, one = ctx.const(0, dtype), ctx.const(1, dtype)

    def step(c, j, r, q, taus):
        x = gather(c, r, j, axis=-1)  # (..., m)
        alpha = gather(c, x, j, axis=-1, keep=True)
        below = c.op.Greater(rows, j)
        tail = c.op.Where(below, x, zero)
        tail2 = sum_last(c, c.op.Mul(tail, tail), dtype, keepdims=True)
        norm = c.op.Sqrt(c.op.Add(c.op.Mul(alpha, alpha), tail2))
        beta = c.op.Where(c.op.GreaterOrEqual(alpha, zero), c.op.Neg(norm), norm)
        reduced = c.op.Equal(tail2, zero)
        safe_beta = c.op.Where(reduced, one, beta)
        tau = c.op.Where(reduced, zero, c.op.Div(c.op.Sub(beta, alpha), safe_beta))
        denom = c.op.Where(reduced, one, c.op.Sub(alpha, beta))
        v = c.op.Where(below, c.op.Div(x, denom), c.op.Where(c.op.Equal(rows, j), one, zero))
        tv = c.op.Mul(tau, v)
        w = c.op.MatMul(unsqueeze(c, v, -2), r)  # (..., 1, n)
        w = c.op.Where(c.op.Greater(cols, j), w, zero)  # the reflection acts on the trailing columns
        r = c.op.Sub(r, c.op.Mul(unsqueeze(c, tv, -1), w))
        new_col = c.op.Where(below, v, c.op.Where(c.op.Equal(rows, j), c.op.Where(reduced, alpha, beta), x))
        r = c.op.Where(c.op.Equal(cols, j), unsqueeze(c, new_col, -1), r)
        if want_q:
            qv = c.op.MatMul(q, unsqueeze(c, v, -1))  # (..., m, 1)
            q = c.op.Sub(q, c.op.Mul(qv, unsqueeze(c, tv, -2)))
        taus = c.op.Where(c.op.Equal(ks, j), tau, taus)
        return r, q, taus

    return loop(ctx, node, "householder", steps, [(a, dtype), (q0, dtype), (tau0, dtype)], step)


def _first(ctx, x, count, axis: int):
    return ctx.op.Slice(x, ctx.const([0], I64), ctx.scalar_1d(count), ctx.const([axis], I64))


@converter(aten.linalg_qr.default)
def convert_linalg_qr(ctx, node, a, mode="reduced"):
    dtype = _dtype(node)
    packed, q, _ = householder_qr(ctx, node, a, dtype, want_q=mode != "r")
    r = triangle(ctx, packed, dtype, False)
    if mode == "complete":
        return q, r
    k = ctx.op.Min(size(ctx, a, -2), size(ctx, a, -1))
    r = _first(ctx, r, k, -2)
    if mode == "r":
        return _empty(ctx, dtype), r
    return _first(ctx, q, k, -1), r


@converter(aten.geqrf.default)
def convert_geqrf(ctx, node, a):
    packed, _, tau = householder_qr(ctx, node, a, _dtype(node), want_q=False)
    return packed, tau


def householder_q(ctx, node, a, tau, dtype):
    """``H_1 ... H_k`` ``(..., m, m)``, ``H_j = I - tau_j v_j v_j^T``, ``v_j`` below the diagonal
    of column ``j`` of ``a`` with an implicit 1 on it (LAPACK's packed form)."""
    m = size(ctx, a, -2)
    rows = arange(ctx, m)
    q0 = broadcast_batch(ctx, broadcast_batch(ctx, eye(ctx, m, m, dtype), a), unsqueeze(ctx, tau, -1))
    zero, one = ctx.const(0, dtype), ctx.const(1, dtype)

    def step(c, j, q):
        x = gather(c, a, j, axis=-1)
        v = c.op.Where(c.op.Greater(rows, j), x, c.op.Where(c.op.Equal(rows, j), one, zero))
        tv = c.op.Mul(gather(c, tau, j, axis=-1, keep=True), v)
        qv = c.op.MatMul(q, unsqueeze(c, v, -1))
        return [c.op.Sub(q, c.op.Mul(qv, unsqueeze(c, tv, -2)))]

    return loop(ctx, node, "orgqr", size(ctx, tau, -1), [(q0, dtype)], step)[0]


@converter(aten.linalg_householder_product.default, aten.orgqr.default)
def convert_householder_product(ctx, node, a, tau):
    """The first ``n`` columns of the product of the reflections."""
    q = householder_q(ctx, node, a, tau, _dtype(node))
    return _first(ctx, q, size(ctx, a, -1), -1)


@converter(aten.ormqr.default)
def convert_ormqr(ctx, node, a, tau, other, left=True, transpose=False):
    """``op(Q) C`` or ``C op(Q)``, ``Q`` the product of the reflections of ``geqrf``."""
    q = householder_q(ctx, node, a, tau, _dtype(node))
    if transpose:
        q = mT(ctx, q, max(fake_dim(node.args[0]), fake_dim(node.args[1]) + 1))
    return ctx.op.MatMul(q, other) if left else ctx.op.MatMul(other, q)


# Jacobi rotations


def _pairs(ctx, n):
    """``(ps, qs, count)``: every pair ``p < q`` in row order."""
    upper = band_mask(ctx, n, n, lower=False, diagonal=1)
    pairs = ctx.op.NonZero(upper)  # (2, count)
    ps = ctx.op.Gather(pairs, ctx.const(0, I64), axis=0)
    qs = ctx.op.Gather(pairs, ctx.const(1, I64), axis=0)
    return ps, qs, size(ctx, ps, 0)


def _rotation(c, tau, nonzero, dtype):
    """``(cos, sin)`` of the Jacobi rotation for ``tau = (a_qq - a_pp) / (2 a_pq)``."""
    one = c.const(1, dtype)
    sign = c.op.Where(c.op.GreaterOrEqual(tau, c.const(0, dtype)), one, c.const(-1, dtype))
    t = c.op.Div(sign, c.op.Add(c.op.Abs(tau), c.op.Sqrt(c.op.Add(one, c.op.Mul(tau, tau)))))
    t = c.op.Where(nonzero, t, c.const(0, dtype))
    cos = c.op.Div(one, c.op.Sqrt(c.op.Add(one, c.op.Mul(t, t))))
    return cos, c.op.Mul(t, cos)


def _rotate(c, x, p, q, cos, sin, axis: int, index):
    """Rotates the rows (``axis=-2``) or columns (``axis=-1``) ``p`` and ``q`` of ``x``:
    ``x_p <- cos x_p - sin x_q``, ``x_q <- sin x_p + cos x_q`` (``cos``, ``sin``: ``(..., 1, 1)``)."""
    xp, xq = gather(c, x, p, axis=axis, keep=True), gather(c, x, q, axis=axis, keep=True)
    if axis == -2:
        mask_p, mask_q = column(c, c.op.Equal(index, p)), column(c, c.op.Equal(index, q))
    else:
        mask_p, mask_q = c.op.Equal(index, p), c.op.Equal(index, q)
    new_p = c.op.Sub(c.op.Mul(cos, xp), c.op.Mul(sin, xq))
    new_q = c.op.Add(c.op.Mul(sin, xp), c.op.Mul(cos, xq))
    return c.op.Where(mask_p, new_p, c.op.Where(mask_q, new_q, x))


def _any(c, flags):
    """A 0-d bool: some element of ``flags`` is true (False when empty)."""
    flat = c.op.Reshape(c.cast(flags, I64), c.const([-1], I64))
    return c.cast(c.op.ReduceMax(c.op.Concat(flat, c.const([0], I64), axis=0), keepdims=0), torch.bool)


def _eps(dtype) -> float:
    return float(torch.finfo(dtype).eps)


def _jacobi_start(ctx, a, dtype):
    """What both Jacobi sweeps start from: the size ``n`` of the last axis, ``arange(n)``, the
    pairs (p, q) and their count, the identity and its broadcast over the batch, the squared tolerance."""
    n = size(ctx, a, -1)
    index = arange(ctx, n)
    ps, qs, count = _pairs(ctx, n)
    identity = eye(ctx, n, n, dtype)
    v0 = broadcast_batch(ctx, identity, a)
    return n, index, ps, qs, count, identity, v0, ctx.const(_eps(dtype) ** 2, dtype)


def jacobi_eigh(ctx, node, a, dtype):
    """``(w, V)`` of a symmetric batch ``a``: ``a = V diag(w) V^T``, ``w`` unsorted."""
    n, index, ps, qs, count, identity, v0, tol2 = _jacobi_start(ctx, a, dtype)

    def rotation(c, t, x, v):
        p, q = c.op.Gather(ps, t, axis=0), c.op.Gather(qs, t, axis=0)
        row_p, row_q = gather(c, x, p, axis=-2), gather(c, x, q, axis=-2)
        app, apq = gather(c, row_p, p, axis=-1, keep=True), gather(c, row_p, q, axis=-1, keep=True)
        aqq = gather(c, row_q, q, axis=-1, keep=True)
        nonzero = c.op.Not(c.op.Equal(apq, c.const(0, dtype)))
        safe = c.op.Where(nonzero, apq, c.const(1, dtype))
        tau = c.op.Div(c.op.Sub(aqq, app), c.op.Mul(c.const(2, dtype), safe))
        cos, sin = (unsqueeze(c, r, -1) for r in _rotation(c, tau, nonzero, dtype))  # (..., 1, 1)
        x = _rotate(c, x, p, q, cos, sin, -2, index)
        x = _rotate(c, x, p, q, cos, sin, -1, index)
        return x, _rotate(c, v, p, q, cos, sin, -1, index)

    def sweep(c, _, x, v):
        return loop(c, node, "rotations", count, [(x, dtype), (v, dtype)], rotation)

    def not_converged(c, x, v):
        squares = c.op.Mul(x, x)
        off = sum_last(c, sum_last(c, c.op.Mul(squares, c.op.Sub(c.const(1, dtype), identity)), dtype), dtype)
        total = sum_last(c, sum_last(c, squares, dtype), dtype)
        return _any(c, c.op.Greater(off, c.op.Mul(tol2, total)))

    x, v = loop(ctx, node, "sweeps", ctx.const(MAX_SWEEPS, I64), [(a, dtype), (v0, dtype)], sweep, not_converged)
    return typed(diagonal(ctx, x), dtype), v


def _sort(ctx, values, vectors, n, largest: bool):
    """Sorts ``values`` along the last axis and the columns of ``vectors`` the same way."""
    values, order = ctx.op.TopK(values, ctx.scalar_1d(n), axis=-1, largest=int(largest), sorted=1, _outputs=2)
    if vectors is None:
        return values, None
    order = ctx.op.Expand(unsqueeze(ctx, order, -2), ctx.op.Shape(vectors))
    return values, ctx.op.GatherElements(vectors, order, axis=-1)


def _symmetric(ctx, a, dtype, lower: bool, rank: int):
    """The symmetric matrix of one triangle of ``a`` (as LAPACK reads it)."""
    half = triangle(ctx, a, dtype, lower)
    strict = triangle(ctx, a, dtype, lower, -1 if lower else 1)
    return ctx.op.Add(half, mT(ctx, strict, rank))


@converter(aten._linalg_eigh.default)
def convert_linalg_eigh(ctx, node, a, UPLO="L", compute_v=True):
    dtype, rank = _dtype(node), fake_dim(node.args[0])
    sym = _symmetric(ctx, a, dtype, UPLO.upper() == "L", rank)
    w, v = jacobi_eigh(ctx, node, sym, dtype)
    w, v = _sort(ctx, w, v if compute_v else None, size(ctx, a, -1), largest=False)
    return w, (v if compute_v else _empty(ctx, dtype))


@converter(aten.linalg_eigvalsh.default)
def convert_linalg_eigvalsh(ctx, node, a, UPLO="L"):
    return convert_linalg_eigh(ctx, node, a, UPLO, compute_v=False)[0]


@converter(aten.linalg_eigh.default)
def convert_linalg_eigh_public(ctx, node, a, UPLO="L"):
    return convert_linalg_eigh(ctx, node, a, UPLO, compute_v=True)


# SVD


def jacobi_svd_tall(ctx, node, a, dtype):
    """``(W, V)``: ``A V = W`` with orthogonal columns (``a`` has at least as many rows as columns)."""
    n, index, ps, qs, count, identity, v0, tol2 = _jacobi_start(ctx, a, dtype)

    def rotation(c, t, w, v):
        p, q = c.op.Gather(ps, t, axis=0), c.op.Gather(qs, t, axis=0)
        wp, wq = gather(c, w, p, axis=-1), gather(c, w, q, axis=-1)
        alpha = sum_last(c, c.op.Mul(wp, wp), dtype, keepdims=True)
        beta = sum_last(c, c.op.Mul(wq, wq), dtype, keepdims=True)
        gamma = sum_last(c, c.op.Mul(wp, wq), dtype, keepdims=True)
        nonzero = c.op.Not(c.op.Equal(gamma, c.const(0, dtype)))
        safe = c.op.Where(nonzero, gamma, c.const(1, dtype))
        zeta = c.op.Div(c.op.Sub(beta, alpha), c.op.Mul(c.const(2, dtype), safe))
        cos, sin = _rotation(c, zeta, nonzero, dtype)  # (..., 1)
        cos, sin = unsqueeze(c, cos, -1), unsqueeze(c, sin, -1)
        return _rotate(c, w, p, q, cos, sin, -1, index), _rotate(c, v, p, q, cos, sin, -1, index)

    def sweep(c, _, w, v):
        return loop(c, node, "rotations", count, [(w, dtype), (v, dtype)], rotation)

    def not_converged(c, w, v):
        gram = c.op.MatMul(mT(c, w, fake_dim(node.args[0])), w)
        diag = diagonal(c, gram)
        scale = c.op.Mul(unsqueeze(c, diag, -1), unsqueeze(c, diag, -2))
        off = c.op.Mul(c.op.Mul(gram, gram), c.op.Sub(c.const(1, dtype), identity))
        return _any(c, c.op.Greater(off, c.op.Mul(tol2, scale)))

    return loop(ctx, node, "sweeps", ctx.const(MAX_SWEEPS, I64), [(a, dtype), (v0, dtype)], sweep, not_converged)


def svd(ctx, node, a, dtype, full_matrices: bool, compute_uv: bool):
    """``(U, S, Vh)`` as ``torch.linalg.svd``."""
    fake = node.args[0].meta["val"]
    rank = fake.dim()
    m, n = fake.shape[-2], fake.shape[-1]
    if statically_known_true(m >= n):
        return _svd_oriented(ctx, node, a, dtype, full_matrices, compute_uv, False, rank)
    if statically_known_true(m < n):
        return _svd_oriented(ctx, node, a, dtype, full_matrices, compute_uv, True, rank)
    # unrelated dynamic dimensions: both orientations, chosen at run time
    branches = []
    for wide in (False, True):
        sub = ctx.builder.subgraph(f"{node.name}_{'wide' if wide else 'tall'}")
        body = type(ctx)(sub, ctx.interpreter, node)
        outs = [o for o in _svd_oriented(body, node, a, dtype, full_matrices, compute_uv, wide, rank) if o is not None]
        for o in outs:
            sub.add_output(typed(o, dtype))
        branches.append(sub.to_graph())
    tall = ctx.op.GreaterOrEqual(size(ctx, a, -2), size(ctx, a, -1))
    outs = ctx.op.If(tall, then_branch=branches[0], else_branch=branches[1], _outputs=3 if compute_uv else 1)
    outs = [typed(o, dtype) for o in (outs if isinstance(outs, tuple) else (outs,))]
    return tuple(outs) if compute_uv else (None, outs[0], None)


def _svd_oriented(ctx, node, a, dtype, full_matrices: bool, compute_uv: bool, wide: bool, rank: int):
    """The SVD by one-sided Jacobi on the columns of ``a`` (of ``a^T`` when ``wide``)."""
    x = mT(ctx, a, rank) if wide else a
    k = size(ctx, x, -1)
    w, v = jacobi_svd_tall(ctx, node, x, dtype)
    norms = ctx.op.Sqrt(sum_last(ctx, mT(ctx, ctx.op.Mul(w, w), rank), dtype))
    s, order = ctx.op.TopK(norms, ctx.scalar_1d(k), axis=-1, largest=1, sorted=1, _outputs=2)
    if not compute_uv:
        return None, s, None
    w = ctx.op.GatherElements(w, ctx.op.Expand(unsqueeze(ctx, order, -2), ctx.op.Shape(w)), axis=-1)
    v = ctx.op.GatherElements(v, ctx.op.Expand(unsqueeze(ctx, order, -2), ctx.op.Shape(v)), axis=-1)
    # U: the orthonormal Q of W (its columns are orthogonal: R is diagonal, of the signs to undo)
    packed, q, _ = householder_qr(ctx, node, w, dtype)
    diag = diagonal(ctx, packed)
    sign = ctx.op.Where(ctx.op.Less(diag, ctx.const(0, dtype)), ctx.const(-1, dtype), ctx.const(1, dtype))
    rows = size(ctx, x, -2)
    if full_matrices:
        ones = ctx.op.Expand(ctx.const(1, dtype), ctx.op.Concat(ctx.op.Shape(sign, end=-1), ctx.scalar_1d(ctx.op.Sub(rows, k)), axis=0))
        u = ctx.op.Mul(q, unsqueeze(ctx, ctx.op.Concat(sign, ones, axis=-1), -2))
    else:
        u = ctx.op.Mul(_first(ctx, q, k, -1), unsqueeze(ctx, sign, -2))
    if wide:  # A^T = U S V^T  =>  A = V S U^T
        return v, s, mT(ctx, u, rank)
    return u, s, mT(ctx, v, rank)


@converter(aten._linalg_svd.default)
def convert__linalg_svd(ctx, node, a, full_matrices=False, compute_uv=True, driver=None):
    dtype = _dtype(node)
    u, s, vh = svd(ctx, node, a, dtype, full_matrices, compute_uv)
    if not compute_uv:
        return _empty(ctx, dtype), s, _empty(ctx, dtype)
    return u, s, vh


@converter(aten.linalg_svd.default)
def convert_linalg_svd(ctx, node, a, full_matrices=True, driver=None):
    return svd(ctx, node, a, _dtype(node), full_matrices, True)


@converter(aten.linalg_svdvals.default)
def convert_linalg_svdvals(ctx, node, a, driver=None):
    return svd(ctx, node, a, _dtype(node), False, False)[1]


# pseudo-inverse


def _tolerance(ctx, value, dtype):
    """A 0-d or batched tolerance (Value, Python number or None) as ``(..., 1)`` of ``dtype``, or None."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return ctx.const([float(value)], dtype)
    return unsqueeze(ctx, ctx.cast(value, dtype), -1)


def pinv(ctx, node, a, atol, rtol, hermitian: bool):
    """``linalg.pinv``: the SVD (``eigh`` when ``hermitian``) with the values at most
    ``max(atol, rtol * largest)`` dropped; ``rtol`` defaults to ``eps * max(m, n)`` when
    neither tolerance is given, to 0 when only ``atol`` is."""
    fake = node.args[0].meta["val"]
    dtype, rank = fake.dtype, fake.dim()
    zero = ctx.const(0, dtype)
    if hermitian:
        w, v = jacobi_eigh(ctx, node, _symmetric(ctx, a, dtype, True, rank), dtype)
        magnitude = ctx.op.Abs(w)
    else:
        u, magnitude, vh = svd(ctx, node, a, dtype, False, True)
    atol_v, rtol_v = _tolerance(ctx, atol, dtype), _tolerance(ctx, rtol, dtype)
    if rtol_v is None:
        if atol_v is None:
            largest = ctx.cast(ctx.op.Max(size(ctx, a, -2), size(ctx, a, -1)), dtype)
            rtol_v = ctx.op.Mul(ctx.const(_eps(dtype), dtype), largest)
        else:
            rtol_v = zero
    top = ctx.op.Concat(magnitude, zeros(ctx, ctx.op.Concat(ctx.op.Shape(magnitude, end=-1), ctx.const([1], I64), axis=0), dtype), axis=-1)
    # the largest value (the empty-safe way: a 0 column appended, values are >= 0)
    top = ctx.op.TopK(top, ctx.const([1], I64), axis=-1, largest=1, _outputs=2)[0]
    threshold = ctx.op.Mul(rtol_v, top)
    if atol_v is not None:
        threshold = ctx.op.Max(threshold, atol_v)
    keep = ctx.op.Greater(magnitude, threshold)
    one = ctx.const(1, dtype)
    if hermitian:
        inverse = ctx.op.Where(keep, ctx.op.Div(one, ctx.op.Where(keep, w, one)), zero)
        return ctx.op.MatMul(ctx.op.Mul(v, unsqueeze(ctx, inverse, -2)), mT(ctx, v, rank))
    inverse = ctx.op.Where(keep, ctx.op.Div(one, ctx.op.Where(keep, magnitude, one)), zero)
    return ctx.op.MatMul(ctx.op.Mul(mT(ctx, vh, rank), unsqueeze(ctx, inverse, -2)), mT(ctx, u, rank))


@converter(aten.linalg_pinv.atol_rtol_tensor, aten.linalg_pinv.atol_rtol_float)
def convert_linalg_pinv(ctx, node, a, atol=None, rtol=None, hermitian=False):
    return pinv(ctx, node, a, atol, rtol, hermitian)


@converter(aten.linalg_pinv.default, aten.linalg_pinv.rcond_tensor)
def convert_linalg_pinv_rcond(ctx, node, a, rcond, hermitian=False):
    return pinv(ctx, node, a, 0.0, rcond, hermitian)
