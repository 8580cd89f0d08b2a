"""Symbolic dimensions: sym_size, arithmetic on SymInt/SymFloat, scalar outputs, item."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import check_export, make, r


def item_scale(x, n):
    k = n.max().item()
    torch._check(k >= 0)
    return x * k


B = {0: "batch"}
BS = {0: "batch", 1: "seq"}

CASES = [
    ("sym_size", lambda x: x.reshape(x.shape[0] * x.shape[1], -1), (r(2, 3, 4),), (BS,), (r(3, 5, 4),)),
    ("floordiv", lambda x: x.reshape(x.shape[0] // 2, -1), (r(4, 3),), ({0: "batch"},), (r(6, 3),)),
    ("mod_output", lambda x: (x + 1, x.shape[1] % 3), (r(2, 5),), (BS,), (r(3, 7),)),
    ("sym_output", lambda x: (x * 2, x.shape[0] * 3 + 1), (r(2, 5),), (B,), (r(4, 5),)),
    ("sym_max_min", lambda x, y: torch.zeros(torch.sym_max(x.shape[0], y.shape[0]), torch.sym_min(x.shape[0], y.shape[0])), (r(2, 3), r(5, 3)), ({0: "a"}, {0: "b"}), (r(6, 3), r(4, 3))),
    ("truediv", lambda x: x * (x.shape[1] / 2), (r(2, 5),), (BS,), (r(3, 8),)),
    ("float_pow", lambda x: x / x.shape[-1] ** 0.5, (r(2, 4),), ({1: "dim"},), (r(2, 9),)),
    ("ceil", lambda x: torch.zeros(math.ceil(x.shape[0] / 2)), (r(5, 2),), (B,), (r(8, 2),)),
    ("numel", lambda x: x.sum() / x.numel(), (r(2, 5),), (BS,), (r(3, 7),)),
    ("arange_sym", lambda x: x + torch.arange(x.shape[1]), (r(2, 5),), (BS,), (r(3, 7),)),
    ("new_zeros", lambda x: x.new_zeros((x.shape[0], x.shape[1] + 1)), (r(2, 5),), (BS,), (r(3, 7),)),
    ("item", item_scale, (r(2, 5), torch.tensor([1, 3])), (B, None), (r(3, 5), torch.tensor([2, 4]))),
]


@pytest.mark.parametrize(("name", "fn", "inputs", "ds", "inputs2"), CASES, ids=[c[0] for c in CASES])
def test_symbolic_op(name, fn, inputs, ds, inputs2):
    check_export(make(fn, inputs), inputs, dynamic_shapes=ds, inputs2=None if inputs2 is None else (inputs2, None))
