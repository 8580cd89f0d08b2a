"""Converters of reductions: sum, mean, prod, max, min, arg*, var, std, norms, cumulative ops, topk, sort."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import Fn, check_export
from helpers import seeded_randn as _x


FLOAT_REDUCTIONS = {
    "sum": lambda x: (x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.sum(-1, dtype=torch.float64)),
    "mean": lambda x: (x.mean(), x.mean(1), x.mean((-1, -2), keepdim=True)),
    "prod": lambda x: (x.prod(), x.prod(1), x.prod(-1, keepdim=True)),
    "amax_amin": lambda x: (x.amax(), x.amax(1), x.amin((0, 2)), x.amin(-1, keepdim=True)),
    "max_min_all": lambda x: (x.max(), x.min()),
    "max_min_dim": lambda x: (*x.max(1), *x.min(-1, keepdim=True)),
    "aminmax": lambda x: torch.aminmax(x, dim=1),
    "argmax_argmin": lambda x: (x.argmax(), x.argmax(1), x.argmin(-1, keepdim=True), x.argmin()),
    "var_std": lambda x: (
        x.var(),
        x.var(1),
        x.std(-1, keepdim=True),
        x.std((0, 2), correction=0),
        x.var(1, unbiased=False),
    ),
    "var_std_mean": lambda x: (
        *torch.var_mean(x, 1),
        *torch.std_mean(x, dim=(0, 2), keepdim=True, correction=1),
        *torch.var_mean(x, unbiased=False),
    ),
    "norms": lambda x: (
        x.norm(),
        x.norm(dim=1),
        x.norm(p=1, dim=-1),
        torch.linalg.vector_norm(x, ord=3, dim=1),
        torch.linalg.vector_norm(x, float("inf")),
        torch.linalg.vector_norm(x, float("-inf"), dim=1),
        torch.linalg.vector_norm(x.round(), 0, dim=-1),
    ),
    "normalize": lambda x: F.normalize(x, dim=1),
    "logsumexp": lambda x: (torch.logsumexp(x, 1), torch.logsumexp(x, (0, 2), keepdim=True)),
    "cumsum_cumprod": lambda x: (x.cumsum(1), x.cumsum(-1), x.cumprod(1), x.cumprod(-1)),
    "topk": lambda x: (*x.topk(2, dim=1), *x.topk(3, dim=-1, largest=False)),
    "sort": lambda x: (*x.sort(1), *x.sort(-1, descending=True)),
    "argsort": lambda x: (x.argsort(1), x.argsort(-1, descending=True)),
    "count_nonzero": lambda x: (torch.count_nonzero(x > 0, 1), (x > 0).sum(-1)),
    "any_all": lambda x: ((x > 0).any(), (x > 0).any(1), (x > 0.5).all(-1), (x > -3).all(), (x > 0).any((0, 2))),
}


@pytest.mark.parametrize("name", list(FLOAT_REDUCTIONS))
def test_float_reductions(name):
    x, x2 = _x(2, 5, 6), _x(3, 5, 6, seed=1)
    check_export(Fn(FLOAT_REDUCTIONS[name]), (x,), dynamic_shapes=({0: "batch"},), inputs2=((x2,), None))


INT_REDUCTIONS = {
    "sum_mean_prod": lambda x: (x.sum(), x.sum(1), x.prod(-1), x.float().mean(1)),
    "max_min": lambda x: (x.amax(1), x.amin(), *x.max(1), x.argmax(-1)),
    "cumsum": lambda x: (x.cumsum(1), x.cumsum(0, dtype=torch.float32)),
    "topk_sort": lambda x: (x.topk(2, 1)[0], x.sort(-1)[0]),
    "any_all": lambda x: (x.any(), x.all(1), x.bool().any(-1)),
}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("name", list(INT_REDUCTIONS))
def test_integer_reductions(name, dtype):
    x = torch.randint(-3, 4, (3, 5), generator=torch.Generator().manual_seed(0), dtype=dtype)
    check_export(Fn(INT_REDUCTIONS[name]), (x,))


def test_bool_reductions():
    x = torch.rand(3, 5, generator=torch.Generator().manual_seed(0)) > 0.4
    check_export(Fn(lambda x: (x.sum(), x.sum(1), x.any(0), x.all(1), x.cumsum(1))), (x,))


def test_sort_stable_with_ties():
    x = torch.tensor([[3.0, 1.0, 3.0, 2.0, 1.0], [0.0, 0.0, 1.0, 0.0, 1.0]])
    check_export(
        Fn(
            lambda x: (
                *x.sort(dim=1, stable=True),
                x.argsort(dim=1, stable=True),
                x.sort(dim=1, stable=True, descending=True)[1],
            )
        ),
        (x,),
    )


MORE_REDUCTIONS = {
    "nansum_nanmean": lambda x: (
        torch.nansum(x.log()),
        torch.nansum(x.log(), 1),
        torch.nanmean(x.log(), -1, keepdim=True),
    ),
    "median": lambda x: (torch.median(x), *torch.median(x, 1), *torch.median(x, -1, keepdim=True)),
    "kthvalue": lambda x: (*torch.kthvalue(x, 2, 1), *torch.kthvalue(x, 3, -1, keepdim=True)),
    "logcumsumexp": lambda x: (torch.logcumsumexp(x, 1), torch.logcumsumexp(x * 100, -1)),
    "cummax_cummin": lambda x: (*torch.cummax(x, 1), *torch.cummin(x, -1)),
    "diff": lambda x: (
        torch.diff(x),
        torch.diff(x, n=2, dim=1),
        torch.diff(x, dim=1, prepend=x[:, :1], append=x[:, -2:]),
    ),
    "dist": lambda x: (torch.dist(x, x.flip(0)), torch.dist(x, x * 2, p=1), torch.dist(x, -x, p=3)),
    "trace": lambda x: torch.trace(x[0]),
}


@pytest.mark.parametrize("name", list(MORE_REDUCTIONS))
def test_more_reductions(name):
    x, x2 = _x(2, 5, 6), _x(3, 5, 6, seed=1)
    check_export(Fn(MORE_REDUCTIONS[name]), (x,), dynamic_shapes=({0: "batch"},), inputs2=((x2,), None))


def test_cummax_integer_ties():
    x = torch.tensor([[1, 3, 3, 2, 5, 5], [4, 4, 1, 1, 0, 7]])
    check_export(Fn(lambda x: (*torch.cummax(x, 1), *torch.cummin(x, 1), torch.diff(x > 2))), (x,))


def test_one_hot():
    ids, ids2 = torch.tensor([[0, 3], [2, 1]]), torch.tensor([[4, 0], [1, 1], [2, 3]])
    check_export(
        Fn(lambda x: torch.nn.functional.one_hot(x, 5)), (ids,), dynamic_shapes=({0: "batch"},), inputs2=((ids2,), None)
    )


SEARCHES = {
    "bucketize": lambda x: (
        torch.bucketize(x, torch.tensor([-1.0, 0.0, 0.5, 1.0])),
        torch.bucketize(x.round(), torch.tensor([-1.0, 0.0, 1.0]), right=True, out_int32=True),
    ),
    "searchsorted": lambda x: (
        torch.searchsorted(torch.tensor([-1.0, 0.0, 1.0]), x),
        torch.searchsorted(x.sort(-1)[0], x[..., :2], side="right"),
    ),
    "renorm": lambda x: (torch.renorm(x, 2, 1, 1.0), torch.renorm(x, 1, 0, 2.0), torch.renorm(x, 3, -1, 0.5)),
}


@pytest.mark.parametrize("name", list(SEARCHES))
def test_searches_and_renorm(name):
    x, x2 = _x(2, 5, 6), _x(3, 5, 6, seed=1)
    x[0, 0, :3] = torch.tensor([0.0, 1.0, -1.0])
    check_export(Fn(SEARCHES[name]), (x,), dynamic_shapes=({0: "batch"},), inputs2=((x2,), None))


def test_trapezoid():
    model = Fn(
        lambda y: (
            torch.trapezoid(y),
            torch.trapezoid(y, dx=0.5, dim=1),
            torch.trapz(y, dx=2.0),
            torch.cumulative_trapezoid(y, dim=1),
        )
    )
    x, x2 = _x(2, 5, 6), _x(3, 5, 6, seed=1)
    check_export(model, (x,), dynamic_shapes=({0: "batch"},), inputs2=((x2,), None))
