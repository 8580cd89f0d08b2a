"""LDL^T factorization with Bunch-Kaufman pivoting (``linalg_ldl_factor(_ex)``), as LAPACK's ``sytf2``.

Each step takes a 1x1 or a 2x2 pivot depending on the values, so every matrix of a batch has
its own position: the batch is flattened and scanned (ONNX ``Scan``), and in each matrix a
``Loop`` runs while its position is below ``n``. A step computes the pivot choice of
``sytf2`` (``alpha = (1 + sqrt(17)) / 8``), the symmetric interchange of the trailing block and
both updates, then keeps the one the choice asks for. ``LD`` holds ``L`` below the diagonal and
``D`` on it (and below it for 2x2 blocks), the upper triangle zeroed; ``pivots`` are LAPACK's
(1-based, negative for 2x2 blocks); ``info`` is the first zero pivot column (1-based), 0 if none.
Only the lower triangle of the input is read, as torch.
"""

from __future__ import annotations

import math

import onnx_ir as ir
import torch

from ..registry import converter
from ._linalg_common import I64, arange, column, loop, typed, unsqueeze

aten = torch.ops.aten
ALPHA = (1.0 + math.sqrt(17.0)) / 8.0


def _at(c, x, i, j):
    """``x[i, j]`` (0-d) for 0-d indices."""
    return c.op.Gather(c.op.Gather(x, i, axis=0), j, axis=0)


def _max(c, x):
    return c.op.ReduceMax(x, keepdims=0)


def _ldl_one(ctx, node, a, dtype):
    """``(LD, pivots, info)`` of one ``(n, n)`` matrix (a Scan body)."""
    n = ctx.dim_size(a, 0)
    idx = arange(ctx, n)
    rows, cols = column(ctx, idx), unsqueeze(ctx, idx, 0)
    zero, one, minus = ctx.const(0, dtype), ctx.const(1, dtype), ctx.const(-1, dtype)
    alpha = ctx.const(ALPHA, dtype)
    one_i, two_i = ctx.const(1, I64), ctx.const(2, I64)
    lower = ctx.op.Where(ctx.op.GreaterOrEqual(rows, cols), a, zero)

    def step(c, _, x, pivots, k, info):
        col = c.op.Abs(c.op.Gather(x, k, axis=1))
        absakk = c.op.Gather(col, k, axis=0)
        below = c.op.Where(c.op.Greater(idx, k), col, minus)
        imax = c.op.ArgMax(below, axis=0, keepdims=0)
        colmax = c.op.Max(_max(c, below), zero)
        zero_column = c.op.Or(c.op.Equal(c.op.Max(absakk, colmax), zero), c.op.IsNaN(absakk))
        # largest off-diagonal magnitude in row / column imax of the trailing block
        row_imax = c.op.Abs(c.op.Gather(x, imax, axis=0))
        in_row = c.op.And(c.op.GreaterOrEqual(idx, k), c.op.Less(idx, imax))
        col_imax = c.op.Abs(c.op.Gather(x, imax, axis=1))
        rowmax = c.op.Max(_max(c, c.op.Where(in_row, row_imax, minus)), _max(c, c.op.Where(c.op.Greater(idx, imax), col_imax, minus)))
        safe_rowmax = c.op.Where(c.op.Greater(rowmax, zero), rowmax, one)
        keep_k = c.op.Or(
            c.op.GreaterOrEqual(absakk, c.op.Mul(alpha, colmax)),
            c.op.GreaterOrEqual(absakk, c.op.Mul(c.op.Mul(alpha, colmax), c.op.Div(colmax, safe_rowmax))),
        )
        keep_k = c.op.Or(keep_k, zero_column)
        one_by_one = c.op.Or(keep_k, c.op.GreaterOrEqual(c.op.Abs(_at(c, x, imax, imax)), c.op.Mul(alpha, rowmax)))
        kp = c.op.Where(keep_k, k, imax)
        kstep = c.op.Where(one_by_one, one_i, two_i)
        kk = c.op.Sub(c.op.Add(k, kstep), one_i)
        # symmetric interchange of kk and kp in the trailing block (its lower triangle)
        full = c.op.Add(x, c.op.Transpose(c.op.Where(c.op.Greater(rows, cols), x, zero), perm=[1, 0]))
        order = c.op.Where(c.op.Equal(idx, kk), kp, c.op.Where(c.op.Equal(idx, kp), kk, idx))
        swapped = c.op.Gather(c.op.Gather(full, order, axis=0), order, axis=1)
        block = c.op.And(c.op.And(c.op.GreaterOrEqual(rows, k), c.op.GreaterOrEqual(cols, k)), c.op.GreaterOrEqual(rows, cols))
        x = c.op.Where(block, swapped, x)
        # 1x1 pivot: L's column k = x[k+1:, k] / d, trailing block minus x x^T / d
        ck = c.op.Gather(x, k, axis=1)
        d11 = c.op.Div(one, c.op.Where(zero_column, one, c.op.Gather(ck, k, axis=0)))
        ck_below = c.op.Where(c.op.Greater(idx, k), ck, zero)
        trailing1 = c.op.And(c.op.And(c.op.Greater(rows, k), c.op.Greater(cols, k)), c.op.GreaterOrEqual(rows, cols))
        outer1 = c.op.Mul(c.op.Mul(column(c, ck_below), unsqueeze(c, ck_below, 0)), d11)
        x1 = c.op.Where(trailing1, c.op.Sub(x, outer1), x)
        x1 = c.op.Where(c.op.And(c.op.Greater(rows, k), c.op.Equal(cols, k)), column(c, c.op.Mul(ck, d11)), x1)
        x1 = c.op.Where(zero_column, x, x1)
        # 2x2 pivot on rows / columns k, k + 1
        k1 = c.op.Add(k, one_i)
        k1c = c.op.Min(k1, c.op.Sub(n, one_i))  # a valid index when the 2x2 branch is not taken
        ck1 = c.op.Gather(x, k1c, axis=1)
        d21 = c.op.Gather(ck, k1c, axis=0)
        d21 = c.op.Where(c.op.Equal(d21, zero), one, d21)
        e11 = c.op.Div(c.op.Gather(ck1, k1c, axis=0), d21)
        e22 = c.op.Div(c.op.Gather(ck, k, axis=0), d21)
        t = c.op.Div(one, c.op.Sub(c.op.Mul(e11, e22), one))
        f21 = c.op.Div(t, d21)
        far = c.op.Greater(idx, k1)
        wk = c.op.Where(far, c.op.Mul(f21, c.op.Sub(c.op.Mul(e11, ck), ck1)), zero)
        wk1 = c.op.Where(far, c.op.Mul(f21, c.op.Sub(c.op.Mul(e22, ck1), ck)), zero)
        ck_far, ck1_far = c.op.Where(far, ck, zero), c.op.Where(far, ck1, zero)
        outer2 = c.op.Add(c.op.Mul(column(c, ck_far), unsqueeze(c, wk, 0)), c.op.Mul(column(c, ck1_far), unsqueeze(c, wk1, 0)))
        trailing2 = c.op.And(c.op.And(c.op.Greater(rows, k1), c.op.Greater(cols, k1)), c.op.GreaterOrEqual(rows, cols))
        x2 = c.op.Where(trailing2, c.op.Sub(x, outer2), x)
        x2 = c.op.Where(c.op.And(unsqueeze(c, far, 1), c.op.Equal(cols, k)), column(c, wk), x2)
        x2 = c.op.Where(c.op.And(unsqueeze(c, far, 1), c.op.Equal(cols, k1)), column(c, wk1), x2)
        x = c.op.Where(one_by_one, x1, x2)
        # pivots (1-based; both rows of a 2x2 block get -(kp + 1)), info, next position
        kp1 = c.op.Add(kp, one_i)
        pivots = c.op.Where(one_by_one, c.op.Where(c.op.Equal(idx, k), kp1, pivots),
                            c.op.Where(c.op.Or(c.op.Equal(idx, k), c.op.Equal(idx, k1)), c.op.Neg(kp1), pivots))
        info = c.op.Where(c.op.And(zero_column, c.op.Equal(info, ctx.const(0, I64))), kp1, info)
        return x, pivots, c.op.Add(k, kstep), info

    def running(c, x, pivots, k, info):
        return c.op.Less(k, n)

    carried = [(lower, dtype), (ctx.op.Expand(ctx.const(0, I64), ctx.op.Shape(idx)), I64), (ctx.const(0, I64), I64), (ctx.const(0, I64), I64)]
    x, pivots, _, info = loop(ctx, node, "sytf2", n, carried, step, running)
    return x, pivots, info


def _flat(ctx, x, batch, tail):
    """``x`` as ``(prod(batch), *tail)``, empty sizes included (no -1: ambiguous with a 0)."""
    count = ctx.op.ReduceProd(ctx.op.Concat(batch, ctx.const([1], I64), axis=0), keepdims=1)
    return ctx.op.Reshape(x, ctx.op.Concat(count, tail, axis=0), allowzero=1)


def _drop_first(ctx, x):
    return ctx.op.Slice(x, ctx.const([1], I64), ctx.const([2**62], I64), ctx.const([0], I64))


def ldl_factor(ctx, node, a):
    """``(LD, pivots int32, info int32)`` of a batch, each matrix scanned."""
    fake = node.args[0].meta["val"]
    dtype = fake.dtype
    square = ctx.op.Shape(a, start=-2)
    batch = ctx.op.Shape(a, end=-2)
    flat = _flat(ctx, a, batch, square)
    # onnxruntime's Scan refuses an empty scan axis (an empty batch): one zero matrix goes first
    flat = ctx.op.Concat(ctx.op.Expand(ctx.const(0, dtype), ctx.op.Concat(ctx.const([1], I64), square, axis=0)), flat, axis=0)
    sub = ctx.builder.subgraph(f"{node.name}_scan")
    matrix = sub.add_input(f"{node.name}_matrix", dtype, None)
    body = type(ctx)(sub, ctx.interpreter, node)
    for value, t, rank in zip(_ldl_one(body, node, matrix, dtype), (dtype, I64, I64), (2, 1, 0)):
        out = sub.add_output(typed(value, t))
        out.dtype = value.dtype
        out.shape = ir.Shape([None] * rank)  # onnxruntime's Scan needs the rank of its outputs
    ld, pivots, info = ctx.op.Scan(flat, body=sub.to_graph(), num_scan_inputs=1, _outputs=3)
    ld, pivots, info = (typed(_drop_first(ctx, typed(v, t)), t) for v, t in ((ld, dtype), (pivots, I64), (info, I64)))
    ld = ctx.op.Reshape(ld, ctx.op.Concat(batch, square, axis=0), allowzero=1)
    pivots = ctx.op.Reshape(pivots, ctx.op.Concat(batch, ctx.op.Shape(a, start=-1), axis=0), allowzero=1)
    info = ctx.op.Reshape(info, batch, allowzero=1)
    return ld, ctx.cast(typed(pivots, I64), torch.int32), ctx.cast(typed(info, I64), torch.int32)


@converter(aten.linalg_ldl_factor_ex.default)
def convert_linalg_ldl_factor_ex(ctx, node, a, hermitian=False, check_errors=False):
    return ldl_factor(ctx, node, a)


@converter(aten.linalg_ldl_factor.default)
def convert_linalg_ldl_factor(ctx, node, a, hermitian=False):
    return ldl_factor(ctx, node, a)[:2]


def _swap_rows(c, b, i, j, idx):
    order = c.op.Where(c.op.Equal(idx, i), j, c.op.Where(c.op.Equal(idx, j), i, idx))
    return c.op.Gather(b, order, axis=0)


def _row(c, x, i):
    return c.op.Gather(x, c.op.Unsqueeze(i, c.const([0], I64)), axis=0)  # (1, r)


def _ldl_solve_one(ctx, node, ld, pivots, b, dtype):
    """``X`` with ``A X = B`` from one factorization (LAPACK's ``sytrs``, lower)."""
    n = ctx.dim_size(ld, 0)
    idx = arange(ctx, n)
    col_idx = column(ctx, idx)
    one_i, two_i, zero = ctx.const(1, I64), ctx.const(2, I64), ctx.const(0, dtype)
    last = ctx.op.Sub(n, one_i)

    def lcol(c, j, start):
        """Column ``j`` of ``L`` below row ``start`` (zeros elsewhere), as ``(n, 1)``."""
        return column(c, c.op.Where(c.op.Greater(idx, start), c.op.Gather(ld, j, axis=1), zero))

    def forward(c, _, x, k):
        p = c.op.Gather(pivots, k, axis=0)
        two = c.op.Less(p, c.const(0, I64))
        kp = c.op.Sub(c.op.Abs(p), one_i)
        k1 = c.op.Min(c.op.Add(k, one_i), last)
        # 1x1
        x1 = _swap_rows(c, x, k, kp, idx)
        bk = _row(c, x1, k)
        x1 = c.op.Sub(x1, c.op.Mul(lcol(c, k, k), bk))
        x1 = c.op.Where(c.op.Equal(col_idx, k), c.op.Div(bk, _at(c, ld, k, k)), x1)
        # 2x2
        x2 = _swap_rows(c, x, k1, kp, idx)
        bk, bk1 = _row(c, x2, k), _row(c, x2, k1)
        x2 = c.op.Sub(x2, c.op.Add(c.op.Mul(lcol(c, k, k1), bk), c.op.Mul(lcol(c, k1, k1), bk1)))
        off = _at(c, ld, k1, k)
        off = c.op.Where(c.op.Equal(off, zero), c.const(1, dtype), off)
        akm1, ak = c.op.Div(_at(c, ld, k, k), off), c.op.Div(_at(c, ld, k1, k1), off)
        denom = c.op.Sub(c.op.Mul(akm1, ak), c.const(1, dtype))
        bkm1, bk = c.op.Div(bk, off), c.op.Div(bk1, off)
        new_k = c.op.Div(c.op.Sub(c.op.Mul(ak, bkm1), bk), denom)
        new_k1 = c.op.Div(c.op.Sub(c.op.Mul(akm1, bk), bkm1), denom)
        x2 = c.op.Where(c.op.Equal(col_idx, k), new_k, c.op.Where(c.op.Equal(col_idx, k1), new_k1, x2))
        return c.op.Where(two, x2, x1), c.op.Add(k, c.op.Where(two, two_i, one_i))

    def backward(c, _, x, k):
        p = c.op.Gather(pivots, k, axis=0)
        two = c.op.Less(p, c.const(0, I64))
        kp = c.op.Sub(c.op.Abs(p), one_i)
        km1 = c.op.Max(c.op.Sub(k, one_i), c.const(0, I64))
        lk = lcol(c, k, k)
        new_k = c.op.Sub(_row(c, x, k), c.op.MatMul(c.op.Transpose(lk, perm=[1, 0]), x))
        new_km1 = c.op.Sub(_row(c, x, km1), c.op.MatMul(c.op.Transpose(lcol(c, km1, k), perm=[1, 0]), x))
        x1 = c.op.Where(c.op.Equal(col_idx, k), new_k, x)
        x2 = c.op.Where(c.op.Equal(col_idx, km1), new_km1, x1)
        x = _swap_rows(c, c.op.Where(two, x2, x1), k, kp, idx)
        return x, c.op.Sub(k, c.op.Where(two, two_i, one_i))

    x, _ = loop(ctx, node, "sytrs_l", n, [(b, dtype), (ctx.const(0, I64), I64)], forward, lambda c, x, k: c.op.Less(k, n))
    x, _ = loop(ctx, node, "sytrs_lt", n, [(x, dtype), (last, I64)], backward,
                lambda c, x, k: c.op.GreaterOrEqual(k, c.const(0, I64)))
    return x


@converter(aten.linalg_ldl_solve.default)
def convert_linalg_ldl_solve(ctx, node, ld, pivots, b, hermitian=False):
    dtype = node.args[0].meta["val"].dtype
    ones = ctx.const([1, 1], I64)
    # one batch shape for the three inputs
    batch = ctx.op.Shape(ctx.op.Add(ctx.op.Expand(ctx.const(0, dtype), ctx.op.Concat(ctx.op.Shape(ld, end=-2), ones, axis=0)),
                                    ctx.op.Expand(ctx.const(0, dtype), ctx.op.Concat(ctx.op.Shape(b, end=-2), ones, axis=0))), end=-2)
    sq, rhs = ctx.op.Shape(ld, start=-2), ctx.op.Shape(b, start=-2)
    side = ctx.op.Shape(ld, start=-1)
    flats = [
        _flat(ctx, ctx.op.Expand(ld, ctx.op.Concat(batch, sq, axis=0)), batch, sq),
        _flat(ctx, ctx.op.Expand(ctx.cast(pivots, I64), ctx.op.Concat(batch, side, axis=0)), batch, side),
        _flat(ctx, ctx.op.Expand(b, ctx.op.Concat(batch, rhs, axis=0)), batch, rhs),
    ]
    # onnxruntime's Scan refuses an empty scan axis: an identity factorization goes first
    n = ctx.op.Shape(ld, start=-1)
    first_ld = ctx.op.Unsqueeze(ctx.cast(ctx.op.EyeLike(ctx.op.Expand(ctx.const(0, dtype), sq)), dtype), ctx.const([0], I64))
    first_piv = ctx.op.Unsqueeze(ctx.op.Add(ctx.op.Range(ctx.const(0, I64), ctx.op.Squeeze(n, ctx.const([0], I64)), ctx.const(1, I64)), ctx.const(1, I64)), ctx.const([0], I64))
    first_b = ctx.op.Expand(ctx.const(0, dtype), ctx.op.Concat(ctx.const([1], I64), rhs, axis=0))
    flats = [ctx.op.Concat(f, first, axis=0) for f, first in zip(flats, (first_ld, first_piv, first_b))]
    sub = ctx.builder.subgraph(f"{node.name}_scan")
    inputs = [sub.add_input(f"{node.name}_{name}", t, None) for name, t in (("ld", dtype), ("pivots", I64), ("b", dtype))]
    body = type(ctx)(sub, ctx.interpreter, node)
    x = _ldl_solve_one(body, node, *inputs, dtype)
    out = sub.add_output(typed(x, dtype))
    out.dtype, out.shape = x.dtype, ir.Shape([None, None])
    x = typed(ctx.op.Scan(*flats, body=sub.to_graph(), num_scan_inputs=3), dtype)
    x = ctx.op.Slice(x, ctx.const([0], I64), ctx.const([-1], I64), ctx.const([0], I64))  # the padding matrix went last
    return ctx.op.Reshape(x, ctx.op.Concat(batch, rhs, axis=0), allowzero=1)
