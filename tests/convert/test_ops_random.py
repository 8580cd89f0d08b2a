"""Random operators: values differ from torch, so shapes, dtypes, ranges and statistics are checked."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from helpers import Fn, seeded_randn

import fx2onnx

aten = torch.ops.aten
DYN = {"x": {0: "a", 1: "b"}}


def run(fn, x, dynamic_shapes=None, x2=None):
    """Exports ``fn`` (one input), runs it on x (and x2); returns the outputs and eager's output."""
    model = Fn(fn)
    onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic_shapes)
    onnx.checker.check_model(onx)
    sess = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    results = []
    for inp in [x] + ([x2] if x2 is not None else []):
        got = sess.run(None, {sess.get_inputs()[0].name: inp.numpy()})[0]
        expected = model(inp)
        assert got.shape == tuple(expected.shape), (got.shape, expected.shape)
        assert got.dtype == expected.numpy().dtype, (got.dtype, expected.dtype)
        results.append(got)
    return results


def test_rand_dynamic_statistics():
    x, x2 = seeded_randn(40, 50), seeded_randn(60, 70)
    for got in run(lambda t: torch.rand(t.shape), x, DYN, x2):
        assert got.min() >= 0 and got.max() < 1
        assert abs(got.mean() - 0.5) < 0.03 and abs(got.var() - 1 / 12) < 0.01


def test_randn_statistics_and_dtypes():
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        if dtype == torch.bfloat16:
            (got,) = run(lambda t: torch.randn(t.shape, dtype=dtype).float(), seeded_randn(50, 40))
        else:
            (got,) = run(lambda t: torch.randn(t.shape, dtype=dtype), seeded_randn(50, 40))
        got = got.astype(np.float64)
        # 2000 draws: the mean has a standard error of 0.022, the bound is 4.5 of them
        assert abs(got.mean()) < 0.1 and abs(got.std() - 1) < 0.06, (dtype, got.mean(), got.std())


def test_rand_like_randn_like_and_not_constant():
    (u,) = run(lambda t: torch.rand_like(t), seeded_randn(30, 30))
    (n,) = run(lambda t: torch.randn_like(t, dtype=torch.float64), seeded_randn(30, 30))
    assert 0 <= u.min() and u.max() < 1 and len(np.unique(u)) > 800
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1


def test_rand_empty_and_0d():
    (got,) = run(lambda t: torch.rand(t.shape[0], 0) + t.sum(), seeded_randn(3, 2))
    assert got.shape == (3, 0)
    (got,) = run(lambda t: torch.rand(()) + t.sum() * 0, seeded_randn(3, 2))
    assert got.shape == () and 0 <= got < 1


def test_randperm_is_a_permutation_dynamic():
    for got in run(lambda t: torch.randperm(t.shape[0]), seeded_randn(50, 3), {"x": {0: "a"}}, seeded_randn(77, 3)):
        assert got.dtype == np.int64 and sorted(got.tolist()) == list(range(len(got)))
    (got,) = run(lambda t: torch.randperm(t.shape[0], dtype=torch.int32), seeded_randn(5, 3))
    assert sorted(got.tolist()) == list(range(5))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_randint_range(dtype):
    (got,) = run(lambda t: torch.randint(-3, 4, t.shape, dtype=dtype), seeded_randn(60, 60))
    assert set(np.unique(got).tolist()) == set(range(-3, 4))
    (got,) = run(lambda t: torch.randint_like(t, 5), seeded_randn(60, 60))
    assert set(np.unique(got).tolist()) == set(range(5))


def _doubles(fn, x):
    """The ops of ``fn``'s graph computing in float64 (a Cast to it or a draw of it)."""
    graph = fx2onnx.to_onnx(Fn(fn), (x,)).graph
    return [n.op_type for n in graph.node for a in n.attribute
            if a.name in ("to", "dtype") and a.i == onnx.TensorProto.DOUBLE]


def test_randint_and_integer_bernoulli_draw_in_float32():
    # onnxruntime-web has no float64 kernels: integers of bounds within 2**24 are drawn in float32 (exact there)
    ints = lambda t: torch.randint(-3, 4, t.shape) + torch.bernoulli(torch.full(t.shape, 0.5)).to(torch.int64)
    assert _doubles(ints, seeded_randn(4, 4)) == []
    (got,) = run(lambda t: torch.bernoulli(torch.full(t.shape, 0.3)).to(torch.int32) + 0 * t.int(),
                 seeded_randn(100, 100))
    assert set(np.unique(got).tolist()) == {0, 1} and abs(got.mean() - 0.3) < 0.02
    # wider bounds are drawn in float64: every value reachable
    wide = lambda t: torch.randint(-2**40, 2**40, t.shape)
    assert _doubles(wide, seeded_randn(4, 4)) != []
    (got,) = run(wide, seeded_randn(60, 60))
    assert got.min() >= -2**40 and got.max() < 2**40 and len(np.unique(got)) == got.size


def test_bernoulli_uniform_normal():
    (b,) = run(lambda t: torch.bernoulli(torch.full_like(t, 0.3)), seeded_randn(100, 100))
    assert set(np.unique(b).tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.3) < 0.02
    (b,) = run(lambda t: torch.ops.aten.bernoulli.p(t, 0.8), seeded_randn(100, 100))
    assert abs(b.mean() - 0.8) < 0.02
    (u,) = run(lambda t: torch.ops.aten.uniform.default(t, -2.0, 3.0), seeded_randn(100, 100))
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.05
    (n,) = run(lambda t: torch.normal(t * 0 + 5.0, 2.0), seeded_randn(100, 100))
    assert abs(n.mean() - 5) < 0.06 and abs(n.std() - 2) < 0.06
    (n,) = run(lambda t: torch.normal(-1.0, 0.5, size=(t.shape[0], 100)), seeded_randn(100, 2))
    assert abs(n.mean() + 1) < 0.02 and abs(n.std() - 0.5) < 0.02


def test_exponential_statistics_dynamic():
    # the in-place exponential_ (phimoe's router draws Gumbel noise with it in training)
    x, x2 = seeded_randn(40, 50), seeded_randn(60, 70)
    for got in run(lambda t: t.clone().exponential_(2.0), x, DYN, x2):
        # rate 2: mean and standard deviation 0.5; 2000 draws, standard error of the mean 0.011
        assert got.min() >= 0 and len(np.unique(got)) > 1000
        assert abs(got.mean() - 0.5) < 0.05 and abs(got.std() - 0.5) < 0.05, (got.mean(), got.std())
