"""Linear algebra converters (Loop-based factorizations and solves) against eager."""

from __future__ import annotations

import pytest
import torch
from helpers import Fn, Fn2, check_export, seeded_randn, sweep

from fx2onnx.convert.decompose import decompositions_for

SHAPES = [(1, 1), (3, 3), (5, 5), (2, 3, 4, 4), (0, 3, 3)]
DTYPES = [torch.float32, torch.float64]
#: the shapes of the fast tier (a matrix, a batch of them); the shape sweeps run every shape in the slow tier
FAST_SHAPES = {(3, 3), (2, 3, 4, 4), (5, 3)}


def _tol(dtype):
    return dict(atol=2e-4, rtol=2e-3) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-9)


def _general(shape, dtype, seed=0):
    """A well-conditioned matrix (diagonally dominant enough) with pivoting needed."""
    n = shape[-1]
    return (seeded_randn(*shape, seed=seed) + n * torch.eye(n)[torch.randperm(n, generator=torch.Generator().manual_seed(seed))]).to(dtype)


def _spd(shape, dtype, seed=0):
    a = seeded_randn(*shape, seed=seed).double()
    return (a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=torch.float64)).to(dtype)


def _rhs(shape, dtype, k=2, seed=1):
    return seeded_randn(*shape[:-1], k, seed=seed).to(dtype)


def _dynamic(rank, batch=True):
    """Every batch dimension and n dynamic (names shared by the square dimensions)."""
    spec = {i: f"b{i}" for i in range(rank - 2)} if batch else {}
    spec.update({rank - 2: "n", rank - 1: "n"})
    return spec


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SHAPES, FAST_SHAPES))
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(shape, dtype, upper):
    a = _spd(shape, dtype)
    check_export(Fn(lambda x: torch.linalg.cholesky(x, upper=upper)), (a,), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SHAPES, FAST_SHAPES))
def test_cholesky_ex(shape, dtype):
    check_export(Fn(torch.linalg.cholesky_ex), (_spd(shape, dtype),), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_ex_info_not_positive_definite(dtype):
    # leading minors of order 1, 2 positive, the third is not: info = 3 as LAPACK
    a = torch.tensor([[4.0, 2, 0, 0], [2, 5, 1, 0], [0, 1, -3, 1], [0, 0, 1, 2]], dtype=dtype)
    batch = torch.stack([a, _spd((4, 4), dtype), -torch.eye(4, dtype=dtype)])
    check_export(Fn(lambda x: torch.linalg.cholesky_ex(x).info), (batch,))
    assert torch.linalg.cholesky_ex(batch).info.tolist() == [3, 0, 1]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_dynamic(dtype):
    check_export(
        Fn(torch.linalg.cholesky), (_spd((2, 4, 4), dtype),), dynamic_shapes=({0: "batch", 1: "n", 2: "n"},),
        inputs2=((_spd((3, 6, 6), dtype, seed=2),), None), **_tol(dtype),
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SHAPES, FAST_SHAPES))
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_inverse(shape, dtype, upper):
    factor = torch.linalg.cholesky(_spd(shape, dtype), upper=upper)
    b = _rhs(shape, dtype)
    check_export(Fn2(lambda x, f: torch.cholesky_solve(x, f, upper=upper)), (b, factor), **_tol(dtype))
    check_export(Fn(lambda f: torch.cholesky_inverse(f, upper=upper)), (factor,), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SHAPES, FAST_SHAPES))
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(shape, dtype, upper, left, unit):
    a = _general(shape, dtype)
    b = _rhs(shape, dtype)
    if not left:
        b = b.mT.contiguous()

    def fn(x, y):
        return torch.linalg.solve_triangular(x, y, upper=upper, left=left, unitriangular=unit)

    check_export(Fn2(fn), (a, b), **_tol(dtype))


@pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SHAPES, FAST_SHAPES))
@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve(shape, dtype, transpose):
    a, b = _general(shape, dtype), _rhs(shape, dtype)
    for upper in (True, False):
        check_export(Fn2(lambda y, x: torch.triangular_solve(y, x, upper=upper, transpose=transpose)), (b, a), **_tol(dtype))


def test_solve_triangular_broadcast_dynamic():
    a = _general((2, 1, 4, 4), torch.float64)
    b = _rhs((3, 4, 4), torch.float64, k=3)
    check_export(
        Fn2(lambda x, y: torch.linalg.solve_triangular(x, y, upper=False)), (a, b),
        dynamic_shapes=({0: "b", 2: "n", 3: "n"}, {0: "c", 1: "n", 2: "k"}),
        inputs2=((_general((3, 1, 6, 6), torch.float64), _rhs((2, 6, 6), torch.float64, k=1)), None), **_tol(torch.float64),
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SHAPES, FAST_SHAPES))
@pytest.mark.slow
def test_solve_and_inverse(shape, dtype):
    a, b = _general(shape, dtype), _rhs(shape, dtype)
    tol = _tol(dtype)
    check_export(Fn2(torch.linalg.solve), (a, b), **tol)
    check_export(Fn2(torch.linalg.solve), (a, b[..., 0]), **tol)  # a batch of vectors
    check_export(Fn2(lambda x, y: torch.linalg.solve(x, y.mT, left=False)), (a, b), **tol)
    check_export(Fn2(torch.linalg.solve_ex), (a, b), **tol)
    check_export(Fn(torch.linalg.inv), (a,), **tol)
    check_export(Fn(torch.linalg.inv_ex), (a,), **tol)
    check_export(Fn(torch.inverse), (a,), **tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_inverse_dynamic(dtype):
    a, b = _general((2, 4, 4), dtype), _rhs((2, 4, 4), dtype, k=3)
    a2, b2 = _general((3, 5, 5), dtype, seed=3), _rhs((3, 5, 5), dtype, k=1)
    ds = ({0: "batch", 1: "n", 2: "n"}, {0: "batch", 1: "n", 2: "k"})
    check_export(Fn2(torch.linalg.solve), (a, b), dynamic_shapes=ds, inputs2=((a2, b2), None), **_tol(dtype))
    check_export(Fn(torch.linalg.inv), (a,), dynamic_shapes=(ds[0],), inputs2=((a2,), None), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_ex_info_singular(dtype):
    singular = torch.tensor([[1.0, 2, 3], [2, 4, 6], [1, 1, 1]], dtype=dtype)
    batch = torch.stack([singular, _general((3, 3), dtype), torch.zeros(3, 3, dtype=dtype)])
    b = _rhs((3, 3, 3), dtype)
    check_export(Fn2(lambda x, y: torch.linalg.solve_ex(x, y).info), (batch, b))
    check_export(Fn(lambda x: torch.linalg.inv_ex(x).info), (batch,))
    assert torch.linalg.inv_ex(batch).info.tolist() == [3, 0, 1]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep([*SHAPES, (3, 5), (5, 3), (2, 4, 2)], FAST_SHAPES))
def test_lu_factor_and_lu(shape, dtype):
    a = seeded_randn(*shape, seed=4).to(dtype)
    tol = _tol(dtype)
    check_export(Fn(torch.linalg.lu_factor), (a,), **tol)
    check_export(Fn(torch.linalg.lu_factor_ex), (a,), **tol)
    check_export(Fn(torch.linalg.lu), (a,), **tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_factor_singular(dtype):
    # a zero pivot: LAPACK leaves its column unscaled, goes on and reports the first one in info
    singular = torch.tensor([[1.0, 2, 3], [2, 4, 6], [1, 1, 1]], dtype=dtype)
    batch = torch.stack([singular, torch.zeros(3, 3, dtype=dtype), torch.ones(3, 3, dtype=dtype)])
    check_export(Fn(torch.linalg.lu_factor_ex), (batch,), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_factor_dynamic(dtype):
    check_export(
        Fn(torch.linalg.lu_factor_ex), (seeded_randn(2, 4, 3).to(dtype),),
        dynamic_shapes=({0: "batch", 1: "m", 2: "n"},), inputs2=((seeded_randn(3, 4, 6, seed=5).to(dtype),), None),
        **_tol(dtype),
    )


class _LuSolve(torch.nn.Module):
    def __init__(self, left, adjoint):
        super().__init__()
        self.left, self.adjoint = left, adjoint

    def forward(self, lu, pivots, b):
        return torch.linalg.lu_solve(lu, pivots, b, left=self.left, adjoint=self.adjoint)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SHAPES, FAST_SHAPES))
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(shape, dtype, left, adjoint):
    lu, pivots = torch.linalg.lu_factor(_general(shape, dtype))
    b = _rhs(shape, dtype)
    if not left:
        b = b.mT.contiguous()
    check_export(_LuSolve(left, adjoint), (lu, pivots, b), **_tol(dtype))


@pytest.mark.parametrize(
    ("fn", "op"),
    [
        (torch.linalg.cholesky, torch.ops.aten.linalg_cholesky.default),
        (torch.linalg.inv, torch.ops.aten.linalg_inv.default),
        (torch.linalg.solve, torch.ops.aten.linalg_solve.default),
    ],
)
def test_effect_token(fn, op):
    """torch's decomposition checks errors through with_effects(token, _linalg_check_errors)."""
    a = _spd((2, 3, 3), torch.float64)
    inputs = (a,) if fn is not torch.linalg.solve else (a, _rhs((2, 3, 3), torch.float64))
    model = (Fn if len(inputs) == 1 else Fn2)(fn)
    ep = torch.export.export(model, inputs).run_decompositions(decompositions_for([op]))
    assert any(s.kind.name == "TOKEN" for s in ep.graph_signature.input_specs)
    onx = check_export(model, inputs, decompositions=decompositions_for([op]), **_tol(torch.float64))
    assert len(onx.graph.input) == len(inputs) and len(onx.graph.output) == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SHAPES, FAST_SHAPES))
def test_slogdet_logdet(shape, dtype):
    a = seeded_randn(*shape, seed=6).to(dtype)
    tol = _tol(dtype)
    check_export(Fn(torch.linalg.slogdet), (a,), **tol)
    check_export(Fn(torch.logdet), (a,), **tol)  # NaN for a negative determinant, as torch


@pytest.mark.filterwarnings("ignore:invalid value encountered in subtract")  # -inf compared with -inf
@pytest.mark.parametrize("dtype", DTYPES)
def test_slogdet_singular(dtype):
    a = seeded_randn(3, 4, 4, seed=7).to(dtype)
    a[1] = 0  # sign 0, log|det| -inf
    a[2] = torch.tensor([[1.0, 2, 0, 2], [0, 1, 0, 0], [1, 0, 0, 2], [0, 0, 1, 0]], dtype=dtype)  # an exact zero pivot
    check_export(Fn(torch.linalg.slogdet), (a,), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep([*SHAPES, (3, 5), (5, 3)], FAST_SHAPES))
def test_lu_unpack(shape, dtype):
    lu, pivots = torch.linalg.lu_factor(seeded_randn(*shape, seed=8).to(dtype))

    class Unpack(torch.nn.Module):
        def __init__(self, data, pivots):
            super().__init__()
            self.data, self.pivots = data, pivots

        def forward(self, x, p):
            out = torch.lu_unpack(x, p, unpack_data=self.data, unpack_pivots=self.pivots)
            return tuple(t for t, keep in zip(out, (self.pivots, self.data, self.data)) if keep)

    for data, piv in ((True, True), (True, False), (False, True)):
        check_export(Unpack(data, piv), (lu, pivots), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SHAPES, FAST_SHAPES))
def test_matrix_exp(shape, dtype):
    a = seeded_randn(*shape, seed=9).to(dtype)
    check_export(Fn(torch.linalg.matrix_exp), (a,), **_tol(dtype))
    # large norms: several squarings, a different number per matrix of the batch
    big = a * torch.linspace(0.01, 6, a.numel() // max(a.shape[-1] ** 2, 1) or 1).reshape(*a.shape[:-2], 1, 1).to(dtype) if a.numel() else a
    check_export(Fn(torch.linalg.matrix_exp), (big,), atol=1e-3 if dtype == torch.float32 else 1e-9, rtol=1e-3 if dtype == torch.float32 else 1e-9)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_exp_dynamic(dtype):
    check_export(
        Fn(torch.linalg.matrix_exp), (seeded_randn(2, 3, 3).to(dtype),), dynamic_shapes=({0: "batch", 1: "n", 2: "n"},),
        inputs2=((seeded_randn(4, 5, 5, seed=1).to(dtype) * 3,), None), **_tol(dtype),
    )


@pytest.mark.parametrize(
    ("name", "fn", "shapes"),
    [
        ("cholesky_ex", torch.linalg.cholesky_ex, [(0, 0)]),
        ("inv_ex", torch.linalg.inv_ex, [(2, 0, 0)]),
        ("solve", torch.linalg.solve, [(0, 0), (0, 2)]),
        ("lu", torch.linalg.lu, [(0, 0)]),
        ("lu_factor_ex", torch.linalg.lu_factor_ex, [(3, 0)]),
        ("qr", torch.linalg.qr, [(3, 0)]),
        ("eigh", torch.linalg.eigh, [(2, 0, 0)]),
        ("svd", torch.linalg.svd, [(0, 3)]),
        ("slogdet", torch.linalg.slogdet, [(0, 0)]),
        ("matrix_exp", torch.linalg.matrix_exp, [(0, 0)]),
        ("pinv", torch.linalg.pinv, [(3, 0)]),
        ("ldl_factor_ex", torch.linalg.ldl_factor_ex, [(0, 0)]),
    ],
)
def test_zero_size_matrices(name, fn, shapes):
    """Matrices with no rows or columns: the results torch gives (empty, or identities)."""
    inputs = tuple(torch.zeros(*s) for s in shapes)
    check_export(Fn(fn) if len(inputs) == 1 else Fn2(fn), inputs)


@pytest.mark.parametrize("shape", sweep(SHAPES, FAST_SHAPES))
def test_det_float64(shape):
    """onnxruntime's Det has no float64 kernel: the LU gives it."""
    a = seeded_randn(*shape, seed=10).double()
    check_export(Fn(torch.linalg.det), (a,), **_tol(torch.float64))
    singular = torch.tensor([[1.0, 2, 3], [2, 4, 6], [1, 1, 1]], dtype=torch.float64)
    check_export(Fn(torch.det), (torch.stack([singular, -singular.T, torch.eye(3, dtype=torch.float64)]),), **_tol(torch.float64))
