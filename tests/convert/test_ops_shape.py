"""Shape converters (view, reshape, permute, slice, cat, split, expand...): static and dynamic shapes."""

from __future__ import annotations

import pytest
import torch
from helpers import check_export, make, r


B = {0: "batch"}
BS = {0: "batch", 1: "seq"}

# name, function, inputs, dynamic shapes (one per input) or None, second inputs
CASES = [
    ("view", lambda x: x.view(2, 12), (r(2, 3, 4),), None, None),
    ("reshape_dyn", lambda x: x.reshape(x.shape[0], -1), (r(2, 3, 4),), (B,), (r(5, 3, 4),)),
    ("reshape_sym", lambda x: x.reshape(-1, x.shape[1] * 4), (r(2, 3, 4),), (BS,), (r(5, 6, 4),)),
    ("flatten_1", lambda x: x.flatten(1), (r(2, 3, 4),), (B,), (r(5, 3, 4),)),
    ("flatten_0", lambda x: x.flatten(), (r(2, 3, 4),), (B,), (r(5, 3, 4),)),
    ("flatten_mid", lambda x: x.flatten(1, 2), (r(2, 3, 4, 5),), (B,), (r(4, 3, 4, 5),)),
    ("flatten_first", lambda x: x.flatten(0, 1), (r(2, 3, 4),), (BS,), (r(4, 5, 4),)),
    ("permute", lambda x: x.permute(2, 0, 1), (r(2, 3, 4),), (BS,), (r(4, 5, 4),)),
    ("transpose", lambda x: x.transpose(-1, 0), (r(2, 3, 4),), (B,), (r(4, 3, 4),)),
    ("t", lambda x: x.t() + 1, (r(2, 3),), None, None),
    ("unsqueeze", lambda x: x.unsqueeze(-1) + x.unsqueeze(1).sum(), (r(2, 3),), (B,), (r(4, 3),)),
    ("squeeze_dim", lambda x: x.squeeze(1), (r(2, 1, 3),), (B,), (r(4, 1, 3),)),
    ("squeeze_dims", lambda x: x.squeeze((1, 3)), (r(2, 1, 3, 1),), (B,), (r(4, 1, 3, 1),)),
    ("squeeze_all", lambda x: x.squeeze(), (r(2, 1, 3, 1),), None, None),
    ("expand", lambda x: x.expand(-1, 4, -1), (r(2, 1, 3),), (B,), (r(5, 1, 3),)),
    ("expand_dyn", lambda x, y: x.expand(y.shape[0], 3), (r(1, 3), r(4, 2)), (None, B), (r(1, 3), r(6, 2))),
    ("expand_as", lambda x, y: x.expand_as(y), (r(1, 3), r(4, 3)), (None, B), (r(1, 3), r(6, 3))),
    ("repeat", lambda x: x.repeat(2, 1, 3), (r(2, 3),), (B,), (r(4, 3),)),
    ("tile", lambda x: x.tile((2,)), (r(2, 3),), (B,), (r(4, 3),)),
    ("slice", lambda x: x[:, 1:3, ::2], (r(2, 4, 6),), (B,), (r(5, 4, 6),)),
    ("slice_neg", lambda x: x[:, -2:], (r(2, 5),), (BS,), (r(3, 7),)),
    ("slice_dyn_end", lambda x, y: x[:, : y.shape[1]], (r(2, 8), r(2, 3)), ({0: "batch"}, {0: "batch", 1: "n"}), (r(3, 8), r(3, 5))),
    ("narrow", lambda x: x.narrow(1, 1, 2), (r(2, 5),), (B,), (r(3, 5),)),
    ("select", lambda x: x[:, 1], (r(2, 5, 3),), (B,), (r(3, 5, 3),)),
    ("select_neg", lambda x: x[:, -1], (r(2, 5, 3),), (BS,), (r(3, 4, 3),)),
    ("cat", lambda x, y: torch.cat([x, y, x], dim=1), (r(2, 3), r(2, 4)), (B, B), (r(5, 3), r(5, 4))),
    ("cat_empty", lambda x: torch.cat([torch.zeros(0), x.flatten()]), (r(2, 3),), (B,), (r(5, 3),)),
    ("cat_dtype", lambda x, i: torch.cat([x, i], dim=0), (r(2, 3), torch.ones(1, 3, dtype=torch.int64)), None, None),
    ("stack", lambda x, y: torch.stack([x, y], dim=-1), (r(2, 3), r(2, 3)), (B, B), (r(5, 3), r(5, 3))),
    ("split", lambda x: x.split([1, 2, 3], dim=1), (r(2, 6),), (B,), (r(4, 6),)),
    ("split_size", lambda x: x.split(2, dim=1), (r(2, 5),), (B,), (r(4, 5),)),
    # the number of pieces is fixed at export time: the second input gives 3 pieces too (2, 2, 1)
    ("split_dyn", lambda x: x.split(2, dim=0), (r(6, 3),), (B,), (r(5, 3),)),
    ("chunk", lambda x: x.chunk(3, dim=-1), (r(2, 6),), (B,), (r(4, 6),)),
    # along a dynamic dimension: pieces of ceil(n / chunks), the last one smaller (6 -> 3+3, 5 -> 3+2)
    ("chunk_dyn", lambda x: x.chunk(2, dim=0), (r(6, 3),), (B,), (r(5, 3),)),
    ("chunk_dyn_3", lambda x: x.chunk(3, dim=0), (r(8, 3),), (B,), (r(7, 3),)),
    ("unbind", lambda x: x.unbind(1), (r(2, 3, 4),), (B,), (r(4, 3, 4),)),
    ("flip", lambda x: x.flip(0, 2), (r(2, 3, 4),), (BS,), (r(4, 5, 4),)),
    ("roll", lambda x: x.roll(1, 1), (r(2, 5),), (BS,), (r(3, 7),)),
    ("roll_flat", lambda x: x.roll(-2), (r(2, 5),), (B,), (r(3, 5),)),
    # shifts read from dynamic sizes (fftshift): symbolic shifts
    ("roll_by_size", lambda x: x.roll((x.shape[0] // 2, -x.shape[1]), (0, 1)), (r(4, 5),), (BS,), (r(7, 3),)),
    ("fftshift", lambda x: torch.fft.fftshift(x), (r(4, 5),), (BS,), (r(7, 3),)),
    ("movedim", lambda x: x.movedim(0, -1), (r(2, 3, 4),), (B,), (r(5, 3, 4),)),
    ("unflatten", lambda x: x.unflatten(1, (2, 3)), (r(2, 6),), None, None),
    ("unflatten_dyn", lambda x: x.unflatten(1, (2, 3)), (r(2, 6),), (B,), (r(5, 6),)),
    ("view_as", lambda x, y: x.view_as(y), (r(2, 6), r(4, 3)), None, None),
    ("contiguous", lambda x: x.transpose(0, 1).contiguous() * 2, (r(2, 3),), (B,), (r(5, 3),)),
    ("clone_detach", lambda x: x.clone().detach() + 1, (r(2, 3),), (B,), (r(5, 3),)),
]


@pytest.mark.parametrize(("name", "fn", "inputs", "ds", "inputs2"), CASES, ids=[c[0] for c in CASES])
def test_shape_op(name, fn, inputs, ds, inputs2):
    check_export(make(fn, inputs), inputs, dynamic_shapes=ds, inputs2=None if inputs2 is None else (inputs2, None))
