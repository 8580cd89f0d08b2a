"""Indexing converters (index, index_put, gather, scatter, masked ops, setitem): static and dynamic."""

from __future__ import annotations

import pytest
import torch
from helpers import check_export, make, r


def i(high, *shape):
    return torch.randint(0, high, shape)


def setitem_slice(x, y):
    x = x.clone()
    x[:, 1:3] = y
    return x


def setitem_index(x, idx):
    x = x.clone()
    x[idx] = 0.5
    return x


def setitem_mask(x):
    x = x.clone()
    x[x > 0] = 0
    return x


def setitem_mask_values(x):
    """``x[mask] = values`` with as many values as the mask selects: a data-dependent count."""
    x = x.clone()
    mask = x > 0
    x[mask] = x[mask] * 2
    return x


def setitem_select(x):
    x = x.clone()
    x[:, 0] = x[:, 1] * 2
    return x


def accumulate(x, idx):
    return torch.zeros(5, x.shape[1]).index_put((idx,), x, accumulate=True)


B = {0: "batch"}
N = {0: "n"}

CASES = [
    ("index_1d", lambda x, idx: x[idx], (r(5, 3), i(5, 4)), (None, N), (r(5, 3), i(5, 7))),
    ("index_neg", lambda x: x[torch.tensor([-1, 0, -2])], (r(5, 3),), (B,), (r(6, 3),)),
    ("index_axis1", lambda x, idx: x[:, idx], (r(2, 5), i(5, 3)), (B, N), (r(4, 5), i(5, 6))),
    ("index_2idx", lambda x, idx: x[idx, idx], (r(5, 5), i(5, 3)), (None, N), (r(5, 5), i(5, 6))),
    ("index_2d_idx", lambda x, idx: x[idx], (r(5, 3), i(5, 2, 2)), None, None),
    ("index_mask", lambda x: x[x > 0], (r(4, 3),), (B,), (r(6, 3),)),
    ("index_select", lambda x, idx: x.index_select(1, idx), (r(2, 5), i(5, 3)), (B, N), (r(4, 5), i(5, 6))),
    ("gather", lambda x, idx: x.gather(1, idx), (r(3, 5), i(5, 3, 2)), ({0: "batch"}, {0: "batch"}), (r(4, 5), i(5, 4, 2))),
    ("scatter_src", lambda x, idx: torch.zeros(3, 5).scatter(1, idx, x), (r(3, 2), torch.tensor([[0, 1], [2, 3], [4, 0]])), None, None),
    ("scatter_value", lambda x, idx: x.scatter(1, idx, 7.0), (r(3, 5), torch.tensor([[0], [2], [4]])), None, None),
    ("scatter_add", lambda x, idx: torch.ones(3, 5).scatter_add(1, idx, x), (r(3, 2), torch.tensor([[0, 0], [2, 3], [4, 4]])), None, None),
    ("scatter_reduce", lambda x, idx: torch.ones(3, 5).scatter_reduce(1, idx, x, "amax"), (r(3, 2), torch.tensor([[0, 0], [2, 3], [4, 4]])), None, None),
    ("masked_fill", lambda x: x.masked_fill(x < 0, -1.0), (r(3, 4),), (B,), (r(5, 4),)),
    ("masked_fill_t", lambda x, y: x.masked_fill(y > 0, torch.tensor(2.0)), (r(3, 4), r(3, 4)), (B, B), (r(5, 4), r(5, 4))),
    ("masked_scatter", lambda x, y: x.masked_scatter(x > 0, y), (r(3, 4), r(3, 4)), None, None),
    ("setitem_slice", setitem_slice, (r(3, 5), r(3, 2)), (B, B), (r(4, 5), r(4, 2))),
    ("setitem_index", setitem_index, (r(5, 3), torch.tensor([0, 3])), (None, N), (r(5, 3), torch.tensor([1, 2, 4]))),
    ("setitem_mask", setitem_mask, (r(4, 3),), (B,), (r(6, 3),)),
    ("setitem_mask_values", setitem_mask_values, (r(4, 3),), (B,), (r(6, 3),)),
    ("setitem_select", setitem_select, (r(3, 4),), (B,), (r(5, 4),)),
    ("index_put_acc", accumulate, (r(6, 3), torch.tensor([0, 1, 1, 4, 4, 4])), None, None),
    ("select_scatter", lambda x, y: x.select_scatter(y, 1, 0), (r(3, 4), r(3)), ({0: "batch"}, {0: "batch"}), (r(5, 4), r(5))),
    ("slice_scatter", lambda x, y: x.slice_scatter(y, 1, 1, 3), (r(3, 4), r(3, 2)), (B, B), (r(5, 4), r(5, 2))),
    ("nonzero", lambda x: torch.nonzero(x > 0), (r(4, 3),), (B,), (r(6, 3),)),
    ("where_indices", lambda x: torch.where(x > 0), (r(4, 3),), (B,), (r(6, 3),)),
    ("where_indices_1d", lambda x: torch.where(x > 0)[0] * 2, (r(7),), (B,), (r(9),)),
    ("index_copy", lambda x, y: x.index_copy(0, torch.tensor([0, 2]), y), (r(4, 3), r(2, 3)), None, None),
    ("index_add", lambda x, y: x.index_add(0, torch.tensor([0, 2, 0]), y), (r(4, 3), r(3, 3)), None, None),
]


@pytest.mark.parametrize(("name", "fn", "inputs", "ds", "inputs2"), CASES, ids=[c[0] for c in CASES])
def test_indexing_op(name, fn, inputs, ds, inputs2):
    check_export(make(fn, inputs), inputs, dynamic_shapes=ds, inputs2=None if inputs2 is None else (inputs2, None))


def _padding_mask(mask, past):
    """transformers' padding mask: ``mask[batch_idx, kv_idx]`` over aranges, broadcast to 4 dims."""
    batch_idx = torch.arange(past.shape[0])[:, None, None, None]
    kv_idx = torch.arange(mask.shape[1])[None, None, None, :] + 0 * past.shape[1]
    return mask[batch_idx, kv_idx] & (kv_idx >= 0)


def _reversed_rows(x):
    return x[torch.arange(-1, -x.shape[0] - 1, -1)]  # negative aranges keep their wrapping


@pytest.mark.parametrize(
    ("fn", "inputs", "inputs2", "wrapped"),
    [
        (_padding_mask, (r(2, 5) > 0, r(2, 3)), (r(3, 7) > 0, r(3, 6)), False),
        (lambda x: x[:, torch.arange(1, x.shape[1], 2)], (r(3, 7),), (r(2, 10),), False),
        (_reversed_rows, (r(4, 3),), (r(6, 3),), True),
    ],
    ids=["padding_mask", "strided_columns", "negative_arange"],
)
def test_arange_indices_are_not_wrapped(fn, inputs, inputs2, wrapped):
    """An index the graph proves non-negative (an arange from a non-negative start, unsqueezed, sliced,
    shifted by a size) is used as it is; any other keeps ``idx + (idx < 0) * size``."""
    ds = tuple({i: f"d{k}_{i}" for i in range(t.dim())} for k, t in enumerate(inputs))
    onx = check_export(make(fn, inputs), inputs, dynamic_shapes=ds, inputs2=(inputs2, None))
    assert ("Less" in {n.op_type for n in onx.graph.node}) is wrapped


@pytest.mark.parametrize("include_self", [True, False])
def test_integer_scatter_mean_floors_without_float64(include_self):
    # torch floors an integer mean (negative sums included); the graph stays in integers (onnxruntime-web has no
    # Cast to double)
    x = torch.tensor([[-7, 5, -1, 9, -4], [3, -8, 2, -5, 6]])
    index = torch.tensor([[0, 0, 1, 1, 3], [2, 2, 2, 4, 4]])
    fn = lambda base, src: base.scatter_reduce(1, index, src, "mean", include_self=include_self)
    inputs = (torch.tensor([[1, -2, 0, 4, -3], [0, 5, -6, 2, 1]]), x)
    assert (fn(*inputs) < 0).any()  # negative means, floored
    onx = check_export(make(fn, inputs), inputs)
    casts = {a.i for n in onx.graph.node if n.op_type == "Cast" for a in n.attribute}
    assert 11 not in casts  # onnx.TensorProto.DOUBLE
