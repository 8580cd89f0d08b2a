"""torch.unique, unique(dim=...), unique_consecutive -> ONNX Unique (data-dependent sizes)."""

from __future__ import annotations

import pytest
import torch
from helpers import check_export

import fx2onnx


def _ints(*shape, high=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=g)


class Unique(torch.nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, x):
        return torch.unique(x, **self.options)


class UniqueConsecutive(torch.nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, x):
        return torch.unique_consecutive(x, **self.options)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"sorted": False},
        {"return_inverse": True},
        {"return_counts": True},
        {"return_inverse": True, "return_counts": True},
    ],
)
def test_unique_nd_dynamic(options):
    onx = check_export(
        Unique(**options),
        (_ints(3, 4),),
        dynamic_shapes=({0: "batch"},),
        inputs2=((_ints(7, 4, high=9, seed=1),), None),
        atol=0,
    )
    assert "Unique" in [n.op_type for n in onx.graph.node]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16])
def test_unique_dtypes_1d(dtype):
    x = (_ints(10) - 2).to(dtype)
    x2 = (_ints(17, high=11, seed=2) - 5).to(dtype)
    check_export(
        Unique(return_inverse=True, return_counts=True),
        (x,),
        dynamic_shapes=({0: "n"},),
        inputs2=((x2,), None),
        atol=0,
    )


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_dim(dim):
    x = _ints(6, 3, high=2)
    x2 = _ints(9, 3, high=2, seed=3)
    check_export(
        Unique(dim=dim, return_inverse=True, return_counts=True),
        (x,),
        dynamic_shapes=({0: "batch"},),
        inputs2=((x2,), None),
        atol=0,
    )


@pytest.mark.parametrize(
    "options", [{}, {"return_inverse": True}, {"return_counts": True}, {"return_inverse": True, "return_counts": True}]
)
def test_unique_consecutive(options):
    x = torch.tensor([[1, 1, 2, 2], [2, 3, 3, 1], [1, 1, 1, 4]])
    x2 = _ints(5, 4, high=2, seed=4)
    check_export(
        UniqueConsecutive(**options),
        (x,),
        dynamic_shapes=({0: "batch"},),
        inputs2=((x2,), None),
        atol=0,
    )


def test_unique_consecutive_float_1d():
    x = torch.tensor([0.5, 0.5, -1.0, 2.0, 2.0, 2.0])
    check_export(UniqueConsecutive(return_counts=True), (x,), dynamic_shapes=({0: "n"},), atol=0)


def test_unique_consecutive_dim_is_a_clear_error():
    model = UniqueConsecutive(dim=0)
    with pytest.raises(fx2onnx.ConversionError, match="unique_consecutive with dim"):
        fx2onnx.to_onnx(model, (_ints(4, 3),))
