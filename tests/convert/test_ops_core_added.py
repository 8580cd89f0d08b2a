"""Core ATen operators added for the core-set coverage: batch-norm overloads, addmv, _pdist_forward,
the two backward operators left (adaptive average pooling, group norm)."""

from __future__ import annotations

import pytest
import torch
from helpers import Fn, Fn2, check_export, seeded_randn, sweep

aten = torch.ops.aten


class BatchNormOp(torch.nn.Module):
    """Calls one batch-norm overload on buffers (running statistics) and returns every output."""

    def __init__(self, fn, channels=3):
        super().__init__()
        self.fn = fn
        self.weight = torch.nn.Parameter(seeded_randn(channels, seed=1))
        self.bias = torch.nn.Parameter(seeded_randn(channels, seed=2))
        self.register_buffer("running_mean", seeded_randn(channels, seed=3))
        self.register_buffer("running_var", seeded_randn(channels, seed=4).abs() + 0.5)

    def forward(self, x):
        outputs = self.fn(x, self.weight, self.bias, self.running_mean.clone(), self.running_var.clone())
        return tuple(o for o in outputs if o.numel() or o.dim() == 1)


BATCH_NORMS = {
    "legit_eval": lambda x, w, b, m, v: aten._native_batch_norm_legit.default(x, w, b, m, v, False, 0.1, 1e-5),
    "legit_train": lambda x, w, b, m, v: aten._native_batch_norm_legit.default(x, w, b, m, v, True, 0.1, 1e-5),
    "legit_no_training": lambda x, w, b, m, v: aten._native_batch_norm_legit_no_training.default(x, w, b, m, v, 0.1, 1e-5),
    "with_update_functional": lambda x, w, b, m, v: aten._batch_norm_with_update_functional.default(x, w, b, m, v, 0.1, 1e-5),
    "no_update": lambda x, w, b, m, v: aten._batch_norm_no_update.default(x, w, b, m, v, 0.1, 1e-5),
}


@pytest.mark.parametrize("name", sorted(BATCH_NORMS))
@pytest.mark.parametrize("shape", sweep([(4, 3), (2, 3, 5), (2, 3, 4, 4)], {(2, 3, 4, 4)}))
def test_batch_norm_overloads(name, shape):
    x = seeded_randn(*shape)
    check_export(BatchNormOp(BATCH_NORMS[name]), (x,), atol=1e-4)


def test_batch_norm_functional_dynamic_batch():
    model = BatchNormOp(BATCH_NORMS["with_update_functional"])
    check_export(
        model, (seeded_randn(4, 3, 5),), dynamic_shapes={"x": {0: "batch", 2: "seq"}}, inputs2=((seeded_randn(7, 3, 2),), None)
    )


def test_batch_norm_functional_after_functionalization():
    # BatchNorm2d in training mode: torch.export gives the in-place update, to_onnx functionalizes it
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(3)

        def forward(self, x):
            return self.bn(x)

    model = M().train()
    onx_model = M().train()
    x = seeded_randn(6, 3, 4)
    import fx2onnx
    from fx2onnx.validation import validate

    onx = fx2onnx.to_onnx(onx_model, (x,))
    report = validate(onx, model, (x,), {}, atol=1e-4, rtol=1e-3)
    assert report.ok, report


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1)])
def test_addmv(beta, alpha):
    class M(torch.nn.Module):
        def forward(self, bias, mat, vec):
            return torch.addmv(bias, mat, vec, beta=beta, alpha=alpha)

    args = (seeded_randn(3), seeded_randn(3, 4, seed=1), seeded_randn(4, seed=2))
    check_export(M(), args)
    if beta == 0:  # NaN in the bias is ignored
        args = (torch.full((3,), float("nan")),) + args[1:]
        check_export(M(), args)


def test_addmv_int_and_dynamic():
    class M(torch.nn.Module):
        def forward(self, bias, mat, vec):
            return torch.addmv(bias, mat, vec, beta=2, alpha=3)

    ints = (torch.arange(3), torch.arange(12).reshape(3, 4), torch.arange(4))
    check_export(M(), ints)
    args2 = (seeded_randn(5), seeded_randn(5, 2, seed=1), seeded_randn(2, seed=2))
    check_export(
        M(),
        (seeded_randn(3), seeded_randn(3, 4, seed=1), seeded_randn(4, seed=2)),
        dynamic_shapes={"bias": {0: "n"}, "mat": {0: "n", 1: "m"}, "vec": {0: "m"}},
        inputs2=(args2, None),
    )


@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, 3.0, float("inf")])
def test_pdist(p):
    check_export(Fn(lambda x: torch.nn.functional.pdist(x, p)), (seeded_randn(5, 3),))


def test_pdist_dynamic_and_tiny():
    check_export(
        Fn(lambda x: aten._pdist_forward.default(x, 2.0)),
        (seeded_randn(5, 3),),
        dynamic_shapes={"x": {0: "n", 1: "m"}},
        inputs2=((seeded_randn(2, 7),), None),
    )
    check_export(Fn(lambda x: aten._pdist_forward.default(x, 2.0)), (seeded_randn(1, 3),))


@pytest.mark.parametrize("in_size,out_size", [((6, 6), (3, 3)), ((5, 7), (3, 2)), ((4, 4), (4, 4)), ((3, 5), (1, 1))])
@pytest.mark.parametrize("batched", [True, False])
def test_adaptive_avg_pool2d_backward(in_size, out_size, batched):
    lead = (2, 3) if batched else (3,)
    x, grad = seeded_randn(*lead, *in_size), seeded_randn(*lead, *out_size, seed=1)
    check_export(Fn2(lambda g, t: aten._adaptive_avg_pool2d_backward.default(g, t)), (grad, x))


@pytest.mark.parametrize("groups,affine", [(1, True), (3, True), (6, False)])
def test_native_group_norm_backward(groups, affine):
    n, c, hw = 2, 6, 5
    x = seeded_randn(n, c, hw)
    grouped = x.reshape(n, groups, -1)
    mean = grouped.mean(-1)
    rstd = (grouped.var(-1, unbiased=False) + 1e-5).rsqrt()
    weight = seeded_randn(c, seed=3) if affine else None

    class M(torch.nn.Module):
        def forward(self, grad, t):
            return aten.native_group_norm_backward.default(grad, t, mean, rstd, weight, n, c, hw, groups, [True, affine, affine])

    outputs = 3 if affine else 1

    class Outputs(M):
        def forward(self, grad, t):
            return tuple(super().forward(grad, t)[:outputs])

    check_export(Outputs(), (seeded_randn(n, c, hw, seed=1), x), atol=1e-4)
