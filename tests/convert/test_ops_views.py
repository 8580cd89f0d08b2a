"""Strided views (as_strided, diagonal, unfold, sym_stride) and the ``*_copy`` view variants."""

from __future__ import annotations

import pytest
import torch
from helpers import Fn, Fn2, check_export, seeded_randn

aten = torch.ops.aten
DYN = {"x": {0: "a", 1: "b"}}


@pytest.mark.parametrize(
    "size,stride,offset",
    [((2, 2), (1, 2), 0), ((3, 2), (2, 1), 1), ((2, 3, 2), (6, 1, 3), None), ((), (), 5), ((0, 3), (3, 1), 0), ((4,), (0,), 2)],
)
def test_as_strided_static(size, stride, offset):
    x = seeded_randn(3, 4)
    check_export(Fn(lambda t: torch.as_strided(t, size, stride, offset)), (x,))


def test_as_strided_dynamic_sizes():
    # a sliding window over the last axis, sizes follow the input
    def fn(t):
        n, m = t.shape
        return torch.as_strided(t, (n, m - 1, 2), (m, 1, 1))

    check_export(Fn(fn), (seeded_randn(3, 5),), dynamic_shapes=DYN, inputs2=((seeded_randn(4, 7),), None))


def test_as_strided_of_a_transposed_input():
    # the transposed tensor is dense: its storage is the input before the transposition
    check_export(Fn(lambda t: torch.as_strided(t.t(), (2, 3), (1, 4))), (seeded_randn(3, 4),))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_as_strided_copy_dtypes(dtype):
    x = (seeded_randn(3, 4) * 4).to(dtype)
    check_export(Fn(lambda t: aten.as_strided_copy.default(t, [2, 2], [4, 1], 1)), (x,))


@pytest.mark.parametrize("size,stride,offset", [((2, 2), (1, 2), 1), ((3,), (4,), 0), ((2, 3), (6, 1), None), ((), (), 5), ((0, 2), (2, 1), 0)])
def test_as_strided_scatter_static(size, stride, offset):
    check_export(
        Fn2(lambda t, s: torch.as_strided_scatter(t, s, size, stride, offset)), (seeded_randn(3, 4), torch.randn(size, generator=torch.Generator().manual_seed(1)))
    )


def test_as_strided_scatter_of_a_transposed_input_and_dynamic_sizes():
    # the result keeps the input's layout: the scatter works on its storage, the transposition comes back
    check_export(Fn2(lambda t, s: torch.as_strided_scatter(t.t(), s, (2, 2), (1, 3), 1)), (seeded_randn(3, 4), seeded_randn(2, 2, seed=1)))
    check_export(
        Fn2(lambda t, s: torch.as_strided_scatter(t, s, (s.shape[0],), (2,), 0)),
        (seeded_randn(8), seeded_randn(3, seed=1)),
        dynamic_shapes={"x": {0: "n"}, "y": {0: "k"}},
        inputs2=((seeded_randn(12), seeded_randn(5, seed=2)), None),
    )


@pytest.mark.parametrize("offset,dim1,dim2", [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (2, -1, -2), (-5, 1, 2), (0, 2, 0), (7, 0, 1)])
def test_diagonal(offset, dim1, dim2):
    x = seeded_randn(3, 4, 5)
    check_export(Fn(lambda t: torch.diagonal(t, offset, dim1, dim2)), (x,))


def test_diagonal_dynamic():
    check_export(
        Fn(lambda t: torch.diagonal(t, 1) * 2),
        (seeded_randn(3, 5),),
        dynamic_shapes=DYN,
        inputs2=((seeded_randn(6, 2),), None),
    )


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.float64])
def test_diagonal_copy_dtypes(dtype):
    x = (seeded_randn(4, 4) * 3).to(dtype)
    check_export(Fn(lambda t: aten.diagonal_copy.default(t, -1)), (x,))


@pytest.mark.parametrize("dim,size,step", [(0, 2, 1), (1, 3, 2), (-1, 1, 1), (1, 5, 5), (0, 4, 3)])
def test_unfold(dim, size, step):
    check_export(Fn(lambda t: t.unfold(dim, size, step)), (seeded_randn(4, 5),))


def test_unfold_dynamic_and_0d():
    check_export(Fn(lambda t: t.unfold(1, 2, 2)), (seeded_randn(3, 6),), dynamic_shapes=DYN, inputs2=((seeded_randn(2, 9),), None))
    check_export(Fn(lambda t: aten.unfold_copy.default(t, 0, 1, 1)), (torch.tensor(3.0),))


def test_unfold_sliding_windows_of_a_sequence():
    # unfold used for local attention / conv-like windows in real models
    check_export(Fn(lambda t: t.unfold(-1, 3, 1).sum(-1)), (seeded_randn(2, 3, 8),))


COPY_CASES = {
    "alias_copy": lambda t: aten.alias_copy.default(t),
    "detach_copy": lambda t: aten.detach_copy.default(t),
    "view_copy": lambda t: aten.view_copy.default(t, [4, 3]),
    "permute_copy": lambda t: aten.permute_copy.default(t, [1, 0]),
    "expand_copy": lambda t: aten.expand_copy.default(t[:1], [5, 4]),
    "slice_copy": lambda t: aten.slice_copy.Tensor(t, 1, 1, -1, 2),
    "select_copy": lambda t: aten.select_copy.int(t, 1, -1),
    "transpose_copy": lambda t: aten.transpose_copy.int(t, 0, -1),
    "unsqueeze_copy": lambda t: aten.unsqueeze_copy.default(t, -1),
    "squeeze_copy": lambda t: aten.squeeze_copy.dim(t[:1], 0),
    "squeeze_copy_dims": lambda t: aten.squeeze_copy.dims(t[:1, :1], [0, 1]),
    "squeeze_copy_all": lambda t: aten.squeeze_copy.default(t[:1]),
    "t_copy": lambda t: aten.t_copy.default(t),
    "narrow_copy": lambda t: aten.narrow_copy.default(t, 1, 1, 2),
    "split_copy": lambda t: aten.split_copy.Tensor(t, 2, 1)[1],
    "split_with_sizes_copy": lambda t: aten.split_with_sizes_copy.default(t, [1, 2], 0)[1],
    "unbind_copy": lambda t: aten.unbind_copy.int(t, 1)[2],
    "reshape_copy": lambda t: aten._reshape_copy.default(t, [2, -1]),
}


@pytest.mark.parametrize("name", sorted(COPY_CASES))
def test_copy_variants(name):
    check_export(Fn(COPY_CASES[name]), (seeded_randn(3, 4),))


@pytest.mark.parametrize("name", ["view_copy", "permute_copy", "transpose_copy", "t_copy"])
def test_copy_variants_int(name):
    check_export(Fn(COPY_CASES[name]), ((seeded_randn(3, 4) * 5).to(torch.int64),))


def test_sym_stride_contiguous_dynamic():
    # x.stride(0) of a contiguous [a, b] input is b
    def fn(t):
        return t * aten.sym_stride.int(t, 0)

    check_export(Fn(fn), (seeded_randn(3, 4),), dynamic_shapes=DYN, inputs2=((seeded_randn(2, 7),), None))
