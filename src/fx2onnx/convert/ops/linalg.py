"""Linear algebra as ONNX algorithms: Cholesky, triangular solves, LU, solve and inverse.

ONNX has no factorization operator, so each one is written as the textbook algorithm
in an ONNX ``Loop`` over the columns (see :mod:`._linalg_common`): one graph serves
every matrix size and any number of batch dimensions. Results are computed in the
input's dtype, as torch's LAPACK kernels do.

- Cholesky (``linalg_cholesky(_ex)``, ``cholesky``): left-looking, one column per step
  from the lower triangle (the upper one when ``upper=True``); ``info`` is the order of
  the first leading minor that is not positive definite, 0 otherwise, as LAPACK's.
- triangular solves (``linalg_solve_triangular``, ``triangular_solve``): substitution,
  one row of the solution per step; right-hand and transposed forms by transposition.
- LU (``linalg_lu_factor(_ex)``, ``linalg_lu``): right-looking elimination with partial
  pivoting, the first largest magnitude as pivot (LAPACK's ``getrf``); a zero pivot leaves
  its column unscaled and sets ``info`` as LAPACK does, so singular matrices factor as in
  torch. ``pivots`` are 1-based int32.
- ``linalg_lu_solve``, ``linalg_solve(_ex)``, ``linalg_inv(_ex)``, ``cholesky_solve``,
  ``cholesky_inverse``: the factorizations followed by two triangular solves.

Ops with ``check_errors`` cannot raise in ONNX: a singular or non positive definite input
gives NaN or infinite values where torch raises, and ``info`` in the ``_ex`` variants.
"""

from __future__ import annotations

import numpy as np
import torch

from ..registry import converter
from ._linalg_common import (
    I64,
    arange,
    broadcast_batch,
    column,
    diagonal,
    eye,
    fake_dim,
    first_failure,
    gather,
    loop,
    mT,
    size,
    squeeze,
    sum_last,
    triangle,
    typed,
    unsqueeze,
    zeros,
    zeros_like,
)

aten = torch.ops.aten


def _int32(ctx, x):
    return ctx.cast(typed(x, I64), torch.int32)


def _dtype(node, index: int = 0) -> torch.dtype:
    """The dtype of the index-th argument of ``node`` (the dtype the algorithm runs in)."""
    return node.args[index].meta["val"].dtype


@converter(aten._linalg_check_errors.default)
def convert_linalg_check_errors(ctx, node, info, api_name, is_matrix):
    """torch raises when ``info`` is not 0; ONNX cannot: the results carry NaN or infinities."""
    return None


# Cholesky


def cholesky_lower(ctx, node, a, upper: bool = False):
    """``(L, info)``: ``L L^T = A`` from the lower triangle of ``a`` (its upper one when ``upper``,
    then ``L^T`` is returned); ``info`` int64 of the batch shape."""
    rank, dtype = fake_dim(node.args[0]), _dtype(node)
    if upper:
        a = mT(ctx, a, rank)
    n = size(ctx, a, -1)
    idx = arange(ctx, n)
    info0 = zeros(ctx, ctx.op.Shape(a, end=-2), I64)

    def step(b, k, lower, info):
        row = gather(b, lower, k, axis=-2)  # L[k, :], zeros from column k on
        v = b.op.Sub(gather(b, a, k, axis=-1), squeeze(b, b.op.MatMul(lower, unsqueeze(b, row, -1)), -1))
        d = gather(b, v, k, axis=-1, keep=True)
        col = b.op.Div(v, b.op.Sqrt(d))
        col = b.op.Where(b.op.GreaterOrEqual(idx, k), col, b.const(0, dtype))
        lower = b.op.Where(b.op.Equal(idx, k), unsqueeze(b, col, -1), lower)
        failed = b.op.Not(b.op.Greater(squeeze(b, d, -1), b.const(0, dtype)))
        return lower, first_failure(b, info, failed, k)

    lower, info = loop(ctx, node, "cholesky", n, [(zeros_like(ctx, a, dtype), dtype), (info0, I64)], step)
    return (mT(ctx, lower, rank) if upper else lower), info


@converter(aten.linalg_cholesky_ex.default)
def convert_linalg_cholesky_ex(ctx, node, a, upper=False, check_errors=False):
    factor, info = cholesky_lower(ctx, node, a, upper)
    return factor, _int32(ctx, info)


@converter(aten.linalg_cholesky.default, aten.cholesky.default)
def convert_linalg_cholesky(ctx, node, a, upper=False):
    return cholesky_lower(ctx, node, a, upper)[0]


# triangular solves


def solve_triangular(ctx, node, a, b, dtype, lower: bool, unit: bool = False, name: str = "trsv"):
    """``X`` with ``A X = B`` (left side), ``A`` triangular, batch dimensions broadcast."""
    n = size(ctx, a, -1)
    idx = column(ctx, arange(ctx, n))
    a = triangle(ctx, a, dtype, lower)
    rhs = broadcast_batch(ctx, b, a)

    def step(c, i, x):
        k = i if lower else c.op.Sub(c.op.Sub(n, c.const(1, I64)), i)
        row = gather(c, a, k, axis=-2, keep=True)  # (..., 1, n)
        value = c.op.Sub(gather(c, rhs, k, axis=-2, keep=True), c.op.MatMul(row, x))
        if not unit:
            value = c.op.Div(value, gather(c, row, k, axis=-1, keep=True))
        return [c.op.Where(c.op.Equal(idx, k), value, x)]

    return loop(ctx, node, name, n, [(zeros_like(ctx, rhs, dtype), dtype)], step)[0]


def _solve_triangular_sided(ctx, node, a, b, lower: bool, left: bool, unit: bool):
    ra, rb = fake_dim(node.args[0]), fake_dim(node.args[1])
    rank, dtype = max(ra, rb), _dtype(node)
    if left:
        return solve_triangular(ctx, node, a, b, dtype, lower, unit)
    # X A = B  <=>  A^T X^T = B^T
    x = solve_triangular(ctx, node, mT(ctx, a, ra), mT(ctx, b, rb), dtype, not lower, unit)
    return mT(ctx, x, rank)


@converter(aten.linalg_solve_triangular.default)
def convert_linalg_solve_triangular(ctx, node, a, b, upper, left=True, unitriangular=False):
    return _solve_triangular_sided(ctx, node, a, b, not upper, left, unitriangular)


@converter(aten.triangular_solve.default)
def convert_triangular_solve(ctx, node, b, a, upper=True, transpose=False, unitriangular=False):
    rank_a, dtype = fake_dim(node.args[1]), _dtype(node)
    lower = not upper
    coefficient = a
    if transpose:
        a, lower = mT(ctx, a, rank_a), upper
    x = solve_triangular(ctx, node, a, b, dtype, lower, unitriangular)
    return x, ctx.op.Identity(coefficient)


@converter(aten.cholesky_solve.default)
def convert_cholesky_solve(ctx, node, b, factor, upper=False):
    rank_f, dtype = fake_dim(node.args[1]), _dtype(node)
    lower = mT(ctx, factor, rank_f) if upper else factor
    y = solve_triangular(ctx, node, lower, b, dtype, True, name="forward")
    return solve_triangular(ctx, node, mT(ctx, lower, rank_f), y, dtype, False, name="backward")


@converter(aten.cholesky_inverse.default)
def convert_cholesky_inverse(ctx, node, factor, upper=False):
    rank, dtype = fake_dim(node.args[0]), _dtype(node)
    n = size(ctx, factor, -1)
    identity = broadcast_batch(ctx, eye(ctx, n, n, dtype), factor)
    lower = mT(ctx, factor, rank) if upper else factor
    y = solve_triangular(ctx, node, lower, identity, dtype, True, name="forward")
    return solve_triangular(ctx, node, mT(ctx, triangle(ctx, lower, dtype, True), rank), y, dtype, False, name="backward")


# LU with partial pivoting


def lu_factor(ctx, node, a, dtype, pivot: bool = True):
    """``(LU, perm, pivots, info)`` of ``getrf``: ``perm`` (int64, ``(..., m)``) gives the rows of
    ``A`` in the order of ``L U``; ``pivots`` are 0-based int64, ``info`` int64."""
    m, n = size(ctx, a, -2), size(ctx, a, -1)
    steps = ctx.op.Min(m, n)
    rows, cols, ks = arange(ctx, m), arange(ctx, n), arange(ctx, steps)
    batch = ctx.op.Shape(a, end=-2)
    perm0 = ctx.op.Expand(rows, ctx.op.Concat(batch, ctx.op.Shape(rows), axis=0))
    pivots0 = zeros(ctx, ctx.op.Concat(batch, ctx.op.Shape(ks), axis=0), I64)

    def step(c, k, lu, perm, pivots, info):
        if pivot:
            col = gather(c, lu, k, axis=-1)
            magnitude = c.op.Where(c.op.Less(rows, k), c.const(-1, dtype), c.op.Abs(col))
            p = c.op.ArgMax(magnitude, axis=-1, keepdims=1)  # (..., 1), the first largest
            order = c.op.Where(c.op.Equal(rows, k), p, c.op.Where(c.op.Equal(rows, p), k, rows))
            lu = c.op.GatherElements(lu, c.op.Expand(unsqueeze(c, order, -1), c.op.Shape(lu)), axis=-2)
            perm = c.op.GatherElements(perm, order, axis=-1)
            pivots = c.op.Where(c.op.Equal(ks, k), p, pivots)
        else:
            pivots = c.op.Where(c.op.Equal(ks, k), k, pivots)
        row = gather(c, lu, k, axis=-2)  # (..., n)
        d = gather(c, row, k, axis=-1, keep=True)  # (..., 1)
        nonzero = c.op.Not(c.op.Equal(d, c.const(0, dtype)))
        col = gather(c, lu, k, axis=-1)  # (..., m)
        below = c.op.Greater(rows, k)
        scaled = c.op.Where(nonzero, c.op.Div(col, c.op.Where(nonzero, d, c.const(1, dtype))), col)
        multipliers = c.op.Where(below, scaled, c.const(0, dtype))
        right = c.op.Where(c.op.Greater(cols, k), row, c.const(0, dtype))
        lu = c.op.Sub(lu, c.op.Mul(unsqueeze(c, multipliers, -1), unsqueeze(c, right, -2)))
        lu = c.op.Where(c.op.And(column(c, below), c.op.Equal(cols, k)), unsqueeze(c, scaled, -1), lu)
        info = first_failure(c, info, c.op.Not(squeeze(c, nonzero, -1)), k)
        return lu, perm, pivots, info

    carried = [(a, dtype), (perm0, I64), (pivots0, I64), (zeros(ctx, batch, I64), I64)]
    return loop(ctx, node, "getrf", steps, carried, step)


def permutation_matrix(ctx, perm, dtype):
    """``P`` with ``P[perm[i], i] = 1``: ``A = P L U`` when ``perm`` orders the rows of ``A`` as ``L U``."""
    rows = arange(ctx, size(ctx, perm, -1))
    return ctx.cast(ctx.op.Equal(column(ctx, rows), unsqueeze(ctx, perm, -2)), dtype)


@converter(aten.linalg_lu_factor_ex.default)
def convert_linalg_lu_factor_ex(ctx, node, a, pivot=True, check_errors=False):
    lu, _, pivots, info = lu_factor(ctx, node, a, _dtype(node), pivot)
    return lu, _int32(ctx, ctx.op.Add(pivots, ctx.const(1, I64))), _int32(ctx, info)


@converter(aten.linalg_lu_factor.default)
def convert_linalg_lu_factor(ctx, node, a, pivot=True):
    return convert_linalg_lu_factor_ex(ctx, node, a, pivot)[:2]


def _unpack(ctx, lu, dtype):
    """``(L, U)`` from a packed ``LU`` ``(..., m, n)``: ``L`` unit lower ``(m, k)``, ``U`` upper ``(k, n)``."""
    m, n = size(ctx, lu, -2), size(ctx, lu, -1)
    k = ctx.scalar_1d(ctx.op.Min(m, n))
    zero, last = ctx.const([0], I64), ctx.const([-1], I64)
    lower = ctx.op.Slice(triangle(ctx, lu, dtype, True, -1), zero, k, last)
    lower = ctx.op.Add(lower, eye(ctx, m, ctx.op.Min(m, n), dtype))
    upper = ctx.op.Slice(triangle(ctx, lu, dtype, False), zero, k, ctx.const([-2], I64))
    return lower, upper


@converter(aten.lu_unpack.default)
def convert_lu_unpack(ctx, node, lu, pivots, unpack_data=True, unpack_pivots=True):
    dtype = _dtype(node)
    empty = ctx.const([], dtype)
    lower, upper = _unpack(ctx, lu, dtype) if unpack_data else (empty, empty)
    if not unpack_pivots:
        return empty, lower, upper
    # pivots cover min(m, n) swaps of the m rows
    m = size(ctx, lu, -2)
    perm = _perm_from_pivots(ctx, node, pivots, m)
    return permutation_matrix(ctx, perm, dtype), lower, upper


@converter(aten.linalg_lu.default)
def convert_linalg_lu(ctx, node, a, pivot=True):
    dtype = _dtype(node)
    lu, perm, _, _ = lu_factor(ctx, node, a, dtype, pivot)
    lower, upper = _unpack(ctx, lu, dtype)
    if pivot:
        p = permutation_matrix(ctx, perm, dtype)
    else:
        p = ctx.const([], dtype)
    return p, lower, upper


def _perm_from_pivots(ctx, node, pivots, rows_count=None):
    """The row order ``perm`` (int64, 0-based, ``rows_count`` rows, the number of pivots by default)
    from LAPACK's 1-based sequential row swaps."""
    swaps = ctx.op.Sub(ctx.cast(pivots, I64), ctx.const(1, I64))
    m = size(ctx, swaps, -1) if rows_count is None else rows_count
    rows = arange(ctx, m)
    perm0 = ctx.op.Expand(rows, ctx.op.Concat(ctx.op.Shape(swaps, end=-1), ctx.op.Shape(rows), axis=0))

    def step(c, k, perm):
        p = gather(c, swaps, k, axis=-1, keep=True)
        order = c.op.Where(c.op.Equal(rows, k), p, c.op.Where(c.op.Equal(rows, p), k, rows))
        return [c.op.GatherElements(perm, order, axis=-1)]

    return loop(ctx, node, "swaps", size(ctx, swaps, -1), [(perm0, I64)], step)[0]


def lu_solve(ctx, node, lu, perm, b, rank_lu: int, dtype, adjoint: bool = False):
    """``X`` with ``A X = B`` (``A^T X = B`` when ``adjoint``), ``A = P L U`` given as ``(lu, perm)``."""
    p = permutation_matrix(ctx, perm, dtype)
    if not adjoint:
        # L U X = P^T B
        pb = ctx.op.MatMul(mT(ctx, p, rank_lu), b)
        y = solve_triangular(ctx, node, lu, pb, dtype, True, unit=True, name="forward")
        return solve_triangular(ctx, node, lu, y, dtype, False, name="backward")
    # U^T L^T P^T X = B
    lu_t = mT(ctx, lu, rank_lu)
    y = solve_triangular(ctx, node, lu_t, b, dtype, True, name="forward")
    z = solve_triangular(ctx, node, lu_t, y, dtype, False, unit=True, name="backward")
    return ctx.op.MatMul(p, z)


@converter(aten.linalg_lu_solve.default)
def convert_linalg_lu_solve(ctx, node, lu, pivots, b, left=True, adjoint=False):
    rank_lu, rank_b = fake_dim(node.args[0]), fake_dim(node.args[2])
    rank, dtype = max(rank_lu, rank_b), _dtype(node)
    perm = _perm_from_pivots(ctx, node, pivots)
    if left:
        return lu_solve(ctx, node, lu, perm, b, rank_lu, dtype, adjoint)
    # X A = B  <=>  A^T X^T = B^T
    x = lu_solve(ctx, node, lu, perm, mT(ctx, b, rank_b), rank_lu, dtype, not adjoint)
    return mT(ctx, x, rank)


def _is_vector_rhs(a_fake, b_fake) -> bool:
    """torch's rule: ``B`` is a batch of vectors when 1-D or of the shape of ``A`` less its last dimension."""
    if b_fake.dim() == 1:
        return True
    return b_fake.dim() == a_fake.dim() - 1 and [str(d) for d in b_fake.shape] == [str(d) for d in a_fake.shape[:-1]]


def solve(ctx, node, a, b, left: bool = True):
    """``(X, LU, pivots, info)`` of ``linalg.solve(A, B, left)``."""
    a_fake, b_fake = node.args[0].meta["val"], node.args[1].meta["val"]
    vector = _is_vector_rhs(a_fake, b_fake)
    rank_a = a_fake.dim()
    if vector:
        b = unsqueeze(ctx, b, -1)
    rank, dtype = max(rank_a, b_fake.dim() + int(vector)), a_fake.dtype
    lu, perm, pivots, info = lu_factor(ctx, node, a, dtype)
    if left:
        x = lu_solve(ctx, node, lu, perm, b, rank_a, dtype)
    else:
        x = mT(ctx, lu_solve(ctx, node, lu, perm, mT(ctx, b, b_fake.dim()), rank_a, dtype, adjoint=True), rank)
    if vector:
        x = squeeze(ctx, x, -1)
    return x, lu, _int32(ctx, ctx.op.Add(pivots, ctx.const(1, I64))), _int32(ctx, info)


@converter(aten._linalg_solve_ex.default)
def convert__linalg_solve_ex(ctx, node, a, b, left=True, check_errors=False):
    return solve(ctx, node, a, b, left)


@converter(aten.linalg_solve_ex.default)
def convert_linalg_solve_ex(ctx, node, a, b, left=True, check_errors=False):
    x, _, _, info = solve(ctx, node, a, b, left)
    return x, info


@converter(aten.linalg_solve.default)
def convert_linalg_solve(ctx, node, a, b, left=True):
    return solve(ctx, node, a, b, left)[0]


def inverse(ctx, node, a):
    """``(A^-1, info)`` by LU with partial pivoting."""
    rank, dtype = fake_dim(node.args[0]), _dtype(node)
    n = size(ctx, a, -1)
    identity = broadcast_batch(ctx, eye(ctx, n, n, dtype), a)
    lu, perm, _, info = lu_factor(ctx, node, a, dtype)
    return lu_solve(ctx, node, lu, perm, identity, rank, dtype), _int32(ctx, info)


@converter(aten.linalg_inv_ex.default)
def convert_linalg_inv_ex(ctx, node, a, check_errors=False):
    return inverse(ctx, node, a)


@converter(aten.linalg_inv.default, aten.inverse.default)
def convert_linalg_inv(ctx, node, a):
    return inverse(ctx, node, a)[0]



# determinants


def slogdet(ctx, node, a):
    """``(sign, log|det|, LU, pivots)`` from the LU factorization: the sign of the permutation
    (one flip per pivot that is not its own row) times the signs of ``U``'s diagonal."""
    dtype = _dtype(node)
    lu, _, pivots, _ = lu_factor(ctx, node, a, dtype)
    diag = diagonal(ctx, lu)
    zero = ctx.const(0, dtype)
    swapped = ctx.op.Not(ctx.op.Equal(pivots, arange(ctx, size(ctx, pivots, -1))))
    negatives = ctx.cast(ctx.op.Less(diag, zero), dtype)
    flips = ctx.op.Add(sum_last(ctx, ctx.cast(swapped, dtype), dtype), sum_last(ctx, negatives, dtype))
    parity = ctx.op.Sub(flips, ctx.op.Mul(ctx.const(2, dtype), ctx.op.Floor(ctx.op.Div(flips, ctx.const(2, dtype)))))
    sign = ctx.op.Sub(ctx.const(1, dtype), ctx.op.Mul(ctx.const(2, dtype), parity))
    regular = ctx.op.Less(sum_last(ctx, ctx.cast(ctx.op.Equal(diag, zero), dtype), dtype), ctx.const(0.5, dtype))
    sign = ctx.op.Where(regular, sign, zero)
    logabs = sum_last(ctx, ctx.op.Log(ctx.op.Abs(diag)), dtype)
    return sign, logabs, lu, _int32(ctx, ctx.op.Add(pivots, ctx.const(1, I64)))


@converter(aten._linalg_slogdet.default)
def convert__linalg_slogdet(ctx, node, a):
    return slogdet(ctx, node, a)


@converter(aten.linalg_slogdet.default)
def convert_linalg_slogdet(ctx, node, a):
    return slogdet(ctx, node, a)[:2]


@converter(aten.logdet.default)
def convert_logdet(ctx, node, a):
    """``log(det)``: NaN for a negative determinant, -inf for a singular matrix, as torch."""
    sign, logabs, _, _ = slogdet(ctx, node, a)
    nan = ctx.const(float("nan"), _dtype(node))
    return ctx.op.Where(ctx.op.Less(sign, ctx.const(0, _dtype(node))), nan, logabs)


# matrix exponential

#: Padé [13/13] coefficients and the 1-norm bound of its scaling (Higham, 2005)
_PADE13 = [64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0, 129060195264000.0,
           10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0]  # fmt: skip
_THETA13 = 5.371920351148152


@converter(aten.linalg_matrix_exp.default)
def convert_linalg_matrix_exp(ctx, node, a):
    """Scaling and squaring with a Padé [13/13] approximant: ``A / 2^s`` has a 1-norm below
    5.37, ``s`` per matrix of the batch; the approximant is a solve with ``V - U``."""
    dtype, rank = _dtype(node), fake_dim(node.args[0])
    n = size(ctx, a, -1)
    identity = eye(ctx, n, n, dtype)
    zero = ctx.const(0, dtype)
    column_sums = sum_last(ctx, mT(ctx, ctx.op.Abs(a), rank), dtype)  # (..., n)
    padded = ctx.op.Concat(column_sums, zeros(ctx, ctx.op.Concat(ctx.op.Shape(column_sums, end=-1), ctx.const([1], I64), axis=0), dtype), axis=-1)
    norm = ctx.op.TopK(padded, ctx.const([1], I64), axis=-1, _outputs=2)[0]  # (..., 1)
    log2 = ctx.op.Div(ctx.op.Log(ctx.op.Div(norm, ctx.const(_THETA13, dtype))), ctx.const(float(np.log(2.0)), dtype))
    squarings = ctx.op.Max(ctx.op.Ceil(ctx.op.Where(ctx.op.Greater(norm, zero), log2, zero)), zero)  # (..., 1)
    scale = ctx.op.Pow(ctx.const(2, dtype), squarings)
    x = ctx.op.Div(a, unsqueeze(ctx, scale, -1))
    b = [ctx.const(c, dtype) for c in _PADE13]
    x2 = ctx.op.MatMul(x, x)
    x4 = ctx.op.MatMul(x2, x2)
    x6 = ctx.op.MatMul(x4, x2)

    def combination(*pairs):
        out = None
        for coefficient, power in pairs:
            term = ctx.op.Mul(coefficient, power)
            out = term if out is None else ctx.op.Add(out, term)
        return out

    u_inner = ctx.op.MatMul(x6, combination((b[13], x6), (b[11], x4), (b[9], x2)))
    u = ctx.op.MatMul(x, ctx.op.Add(u_inner, combination((b[7], x6), (b[5], x4), (b[3], x2), (b[1], identity))))
    v_inner = ctx.op.MatMul(x6, combination((b[12], x6), (b[10], x4), (b[8], x2)))
    v = ctx.op.Add(v_inner, combination((b[6], x6), (b[4], x4), (b[2], x2), (b[0], identity)))
    lhs = typed(ctx.op.Sub(v, u), dtype)
    lu, perm, _, _ = lu_factor(ctx, node, lhs, dtype)
    result = lu_solve(ctx, node, lu, perm, ctx.op.Add(v, u), rank, dtype)
    # square s times, each matrix its own s: a Loop to the largest, the others kept once done
    flat = ctx.op.Reshape(ctx.cast(squarings, I64), ctx.const([-1], I64))
    most = ctx.op.ReduceMax(ctx.op.Concat(flat, ctx.const([0], I64), axis=0), keepdims=0)
    steps = unsqueeze(ctx, ctx.cast(squarings, I64), -1)  # (..., 1, 1)

    def square(c, i, e):
        return [c.op.Where(c.op.Less(i, steps), c.op.MatMul(e, e), e)]

    return loop(ctx, node, "squarings", most, [(result, dtype)], square)[0]


def determinant(ctx, node, a):
    """``det`` as the product of ``U``'s diagonal times the sign of the row permutation
    (onnxruntime's ``Det`` has no float64 kernel)."""
    dtype = _dtype(node)
    lu, _, pivots, _ = lu_factor(ctx, node, a, dtype)
    diag = diagonal(ctx, lu)
    swapped = ctx.op.Not(ctx.op.Equal(pivots, arange(ctx, size(ctx, pivots, -1))))
    flips = sum_last(ctx, ctx.cast(swapped, dtype), dtype)
    odd = ctx.op.Sub(flips, ctx.op.Mul(ctx.const(2, dtype), ctx.op.Floor(ctx.op.Div(flips, ctx.const(2, dtype)))))
    sign = ctx.op.Sub(ctx.const(1, dtype), ctx.op.Mul(ctx.const(2, dtype), odd))

    def multiply(c, k, product):
        return [c.op.Mul(product, gather(c, diag, k, axis=-1))]

    return loop(ctx, node, "product", size(ctx, a, -1), [(sign, dtype)], multiply)[0]
