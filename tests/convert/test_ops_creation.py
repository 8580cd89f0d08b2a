"""Converters of tensor creation and casts: zeros, ones, full, *_like, arange, linspace, eye, tril, casts."""

from __future__ import annotations

import pytest
import torch
from helpers import Fn, check_export
from helpers import seeded_randn as _x


CREATIONS = {
    "zeros_ones_static": lambda x: (
        torch.zeros(2, 3) + x[:2, :3],
        torch.ones(4, dtype=torch.int64),
        torch.zeros((2,), dtype=torch.bool),
    ),
    "zeros_ones_dynamic": lambda x: (torch.zeros(x.shape[0], 3) + 1, torch.ones(x.shape, dtype=torch.int32)),
    "full": lambda x: (
        torch.full((x.shape[0], 2), 1.5),
        torch.full((3,), 7, dtype=torch.int64),
        torch.full((2, 2), True),
    ),
    "new_methods": lambda x: (
        x.new_zeros(x.shape[0], 2),
        x.new_ones((3,)),
        x.new_full((x.shape[0],), 2.5),
        x.new_zeros(2, dtype=torch.int64),
    ),
    "like": lambda x: (
        torch.zeros_like(x),
        torch.ones_like(x, dtype=torch.int64),
        torch.full_like(x, -2.0),
        torch.empty_like(x).fill_(3.0),
    ),
    "empty_filled": lambda x: torch.empty(x.shape[0], 3).fill_(0.5) + torch.empty(2, 3).zero_().sum(),
    "fill": lambda x: x.clone().fill_(4.0) + x.clone().fill_(x[0, 0]),
    "arange_int": lambda x: (torch.arange(5), torch.arange(2, 9, 3), torch.arange(x.shape[0]), torch.arange(10, 0, -3)),
    "arange_float": lambda x: (
        torch.arange(0.0, 1.0, 0.25),
        torch.arange(x.shape[0], dtype=torch.float32),
        torch.arange(1, 4, 0.5),
    ),
    "linspace": lambda x: (
        torch.linspace(0, 1, 5),
        torch.linspace(-2.0, 3.0, 7),
        torch.linspace(0, 10, 3, dtype=torch.int64),
    ),
    "eye": lambda x: (torch.eye(3), torch.eye(2, 4, dtype=torch.int64), torch.eye(x.shape[0]),
                      torch.eye(x.shape[0], dtype=torch.bool), torch.eye(2, 3, dtype=torch.float16)),
    "tril_triu": lambda x: (
        x.tril(),
        x.triu(1),
        x.tril(-1),
        torch.ones(x.shape[0], x.shape[0], dtype=torch.bool).tril(),
    ),
    "casts": lambda x: (
        x.to(torch.int64),
        x.int(),
        x.double(),
        x.half(),
        (x > 0).float(),
        x.to(torch.int32).to(torch.float32),
        x.bool(),
    ),
    "type_as": lambda x: (torch.arange(3).type_as(x), x.type(torch.int64)),
}


@pytest.mark.parametrize("name", list(CREATIONS))
def test_creation(name):
    x, x2 = _x(4, 5) * 3, _x(6, 5, seed=1) * 3
    check_export(Fn(CREATIONS[name]), (x,), dynamic_shapes=({0: "batch"},), inputs2=((x2,), None))


def test_cast_float_to_int_truncates():
    x = torch.tensor([-2.7, -0.5, 0.5, 2.7, 3.0])
    check_export(
        Fn(lambda x: (x.long(), x.to(torch.int32), x.to(torch.uint8).to(torch.int64) * 0 + (x > 1).long())), (x,)
    )


STATIC_CREATIONS = {
    "tril_triu_indices": lambda x: (x[tuple(torch.tril_indices(4, 5))], torch.triu_indices(3, 5, 1)),
    "windows": lambda x: (
        x * torch.hann_window(5),
        torch.hamming_window(6, periodic=False),
        torch.blackman_window(4),
        torch.bartlett_window(5),
        torch.kaiser_window(7),
    ),
    "meshgrid": lambda x: (
        *torch.meshgrid(x[0], x[1, :3], indexing="ij"),
        *torch.meshgrid(x[0], x[1, :3], indexing="xy"),
        torch.cartesian_prod(x[0, :2], x[1, :3]),
    ),
    "block_diag": lambda x: torch.block_diag(x, x[0], x[1, :2].reshape(2, 1), torch.tensor(3.0)),
}


@pytest.mark.parametrize("name", list(STATIC_CREATIONS))
def test_static_creations(name):
    check_export(Fn(STATIC_CREATIONS[name]), (_x(4, 5),))


def test_meshgrid_dynamic():
    model = Fn(lambda x: torch.meshgrid(x[0], x[:, 0], indexing="ij"))
    check_export(model, (_x(4, 5),), dynamic_shapes=({0: "n", 1: "m"},), inputs2=((_x(2, 7, seed=1),), None))
