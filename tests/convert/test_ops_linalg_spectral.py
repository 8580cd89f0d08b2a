"""QR, eigh and SVD converters (Householder and Jacobi Loops) against eager.

Eigenvectors and singular vectors are unique up to sign (torch's follow LAPACK's internals),
so those tests compare what does not depend on the signs: the values, the reconstruction
and the orthogonality of the vectors.
"""

from __future__ import annotations

import pytest
import torch
from helpers import Fn, check_export, seeded_randn, sweep

SQUARE = [(1, 1), (3, 3), (5, 5), (2, 3, 4, 4), (0, 3, 3)]
RECTANGULAR = [(5, 3), (3, 5), (2, 4, 2)]
DTYPES = [torch.float32, torch.float64]
#: the shapes of the fast tier (a batch of square matrices, a tall one); the shape sweeps run every
#: shape in the slow tier (eigh, SVD and pinv build iterative graphs: seconds a case)
FAST_SHAPES = {(2, 3, 4, 4), (5, 3)}


def _tol(dtype):
    return dict(atol=5e-4, rtol=2e-3) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-9)


def _x(shape, dtype, seed=0):
    return seeded_randn(*shape, seed=seed).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SQUARE + RECTANGULAR, FAST_SHAPES))
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(shape, dtype, mode):
    check_export(Fn(lambda a: torch.linalg.qr(a, mode=mode)), (_x(shape, dtype),), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SQUARE + RECTANGULAR, FAST_SHAPES))
def test_geqrf_householder_product(shape, dtype):
    a = _x(shape, dtype)
    check_export(Fn(torch.geqrf), (a,), **_tol(dtype))
    if shape[-2] >= shape[-1]:
        packed, tau = torch.geqrf(a)

        class Product(torch.nn.Module):
            def forward(self, x, t):
                return torch.linalg.householder_product(x, t)

        check_export(Product(), (packed, tau), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_qr_dynamic_and_zero_column(dtype):
    a = _x((2, 5, 3), dtype)
    a[..., 1] = 0  # a column already reduced: tau = 0 there, as LAPACK
    check_export(
        Fn(torch.linalg.qr), (a,), dynamic_shapes=({0: "batch", 1: "m", 2: "n"},),
        inputs2=((_x((3, 4, 6), dtype, seed=1),), None), **_tol(dtype),
    )
    check_export(Fn(torch.geqrf), (a,), **_tol(dtype))


def _eigh_invariants(upper):
    def fn(a):
        w, v = torch.linalg.eigh(a, UPLO="U" if upper else "L")
        return w, (v * w.unsqueeze(-2)) @ v.mT, v.mT @ v

    return fn


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SQUARE, FAST_SHAPES))
@pytest.mark.parametrize("upper", [False, True])
def test_eigh(shape, dtype, upper):
    a = _x(shape, dtype)  # not symmetric: torch reads one triangle
    check_export(Fn(_eigh_invariants(upper)), (a,), **_tol(dtype))
    check_export(Fn(lambda x: torch.linalg.eigvalsh(x, UPLO="U" if upper else "L")), (a,), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.slow
def test_eigh_repeated_eigenvalues_dynamic(dtype):
    q, _ = torch.linalg.qr(_x((6, 6), torch.float64, seed=2))
    a = (q * torch.tensor([1.0, 1.0, 2.0, 2.0, 2.0, -3.0], dtype=torch.float64)) @ q.T
    a = torch.stack([a, a.T @ a]).to(dtype)
    check_export(
        Fn(_eigh_invariants(False)), (a,), dynamic_shapes=({0: "batch", 1: "n", 2: "n"},),
        inputs2=((_x((3, 3, 3), dtype, seed=3),), None), **_tol(dtype),
    )


def _svd_invariants(full):
    def fn(a):
        u, s, vh = torch.linalg.svd(a, full_matrices=full)
        k = s.shape[-1]
        return s, (u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :], u.mT @ u, vh @ vh.mT

    return fn


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SQUARE + RECTANGULAR, {(2, 4, 2)}))
@pytest.mark.parametrize("full", [False, True])
def test_svd(shape, dtype, full):
    a = _x(shape, dtype)
    check_export(Fn(_svd_invariants(full)), (a,), **_tol(dtype))
    check_export(Fn(torch.linalg.svdvals), (a,), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.slow
def test_svd_rank_deficient(dtype):
    """U keeps orthonormal columns for zero singular values, as torch's."""
    a = _x((2, 5, 4), dtype)
    a[..., 3] = a[..., 0] - a[..., 1]
    a[1] = 0
    check_export(Fn(_svd_invariants(False)), (a,), **_tol(dtype))
    check_export(Fn(_svd_invariants(True)), (a,), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.slow
def test_svd_dynamic(dtype):
    check_export(
        Fn(_svd_invariants(False)), (_x((2, 4, 4), dtype),), dynamic_shapes=({0: "batch", 1: "n", 2: "n"},),
        inputs2=((_x((3, 6, 6), dtype, seed=4),), None), **_tol(dtype),
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.slow
def test_svd_unrelated_dynamic_dimensions(dtype):
    """Tall or wide is known at run time only: an If picks the orientation."""
    ds = ({0: "m", 1: "n"},)
    check_export(Fn(_svd_invariants(False)), (_x((4, 3), dtype),), dynamic_shapes=ds, inputs2=((_x((3, 6), dtype),), None), **_tol(dtype))
    check_export(Fn(torch.linalg.svdvals), (_x((3, 5), dtype),), dynamic_shapes=ds, inputs2=((_x((6, 2), dtype),), None), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep(SQUARE + RECTANGULAR, {(5, 3)}))
def test_pinv_matrix_rank_cond(shape, dtype):
    a = _x(shape, dtype)
    if shape[-1] >= 2 and shape[-2] >= 2:
        a[..., -1] = a[..., 0] + a[..., 1]  # rank deficient
    tol = _tol(dtype)
    check_export(Fn(torch.linalg.pinv), (a,), **tol)
    check_export(Fn(lambda x: torch.linalg.pinv(x, atol=0.3, rtol=0.01)), (a,), **tol)
    check_export(Fn(torch.linalg.matrix_rank), (a,))
    if shape[-1] == shape[-2]:
        check_export(Fn(lambda x: torch.linalg.pinv(x + x.mT, hermitian=True)), (a,), **tol)
        check_export(Fn(lambda x: torch.linalg.matrix_rank(x + x.mT, hermitian=True)), (a,))
        well = _x(shape, dtype, seed=5) + 3 * torch.eye(shape[-1], dtype=dtype)
        check_export(Fn(torch.linalg.cond), (well,), **tol)


class _Ormqr(torch.nn.Module):
    def __init__(self, left, transpose):
        super().__init__()
        self.left, self.transpose = left, transpose

    def forward(self, a, tau, c):
        return torch.ormqr(a, tau, c, left=self.left, transpose=self.transpose)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", sweep([(1, 1), (5, 3), (4, 4), (2, 5, 2), (0, 3, 3)], {(5, 3), (2, 5, 2)}))
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr(shape, dtype, left, transpose):
    a, tau = torch.geqrf(_x(shape, dtype))
    c = _x((*shape[:-1], 2), dtype, seed=6)
    if not left:
        c = c.mT.contiguous()
    check_export(_Ormqr(left, transpose), (a, tau, c), **_tol(dtype))


@pytest.mark.parametrize(("shape", "shape2"), [((5, 3), (4, 6)), ((2, 4, 4), (3, 5, 5))])
def test_geqrf_dynamic(shape, shape2):
    """torch has no shape function for geqrf: fx2onnx registers one during capture."""
    ds = ({i: f"d{i}" for i in range(len(shape))},)
    check_export(
        Fn(torch.geqrf), (_x(shape, torch.float64),), dynamic_shapes=ds,
        inputs2=((_x(shape2, torch.float64, seed=7),), None), **_tol(torch.float64),
    )
