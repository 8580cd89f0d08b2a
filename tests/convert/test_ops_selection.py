"""index_select/index_add/index_copy edge shapes, index_reduce, scatter_reduce (every mode,
include_self both ways), histc, histogram, histogramdd, repeat_interleave, masked_select, put, nanmedian, mode."""

from __future__ import annotations

import pytest
import torch
from helpers import Fn, Fn2, check_export, seeded_randn

aten = torch.ops.aten
NUMERIC = [torch.float32, torch.float64, torch.int64, torch.int32]


def ints(high, *shape, seed=0):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


def values(dtype, *shape, seed=0):
    x = seeded_randn(*shape, seed=seed) * 5
    return x.to(dtype) if not dtype.is_floating_point else x.to(dtype)


# index_select / index_add / index_copy
@pytest.mark.parametrize("dim", [0, 1, -1, -2])
@pytest.mark.parametrize("index", [torch.tensor(1), torch.tensor([2, 0, 2]), torch.tensor([2]), torch.tensor([], dtype=torch.int64)])
def test_index_select_edges(dim, index):
    check_export(Fn2(lambda x, i: torch.index_select(x, dim, i)), (seeded_randn(3, 4), index))


@pytest.mark.parametrize("index", [torch.tensor(0), torch.tensor([0])])
def test_index_select_0d_input(index):
    check_export(Fn2(lambda x, i: torch.index_select(x, 0, i)), (torch.tensor(2.5), index))


def test_index_select_dynamic():
    check_export(
        Fn2(lambda x, i: torch.index_select(x, 1, i)),
        (seeded_randn(3, 4), torch.tensor([3, 0])),
        dynamic_shapes={"x": {0: "a", 1: "b"}, "y": {0: "k"}},
        inputs2=((seeded_randn(5, 6), torch.tensor([5, 1, 1])), None),
    )


@pytest.mark.parametrize("dtype", NUMERIC + [torch.bool])
def test_index_select_dtypes(dtype):
    check_export(Fn2(lambda x, i: torch.index_select(x, 0, i)), (values(dtype, 4, 2), torch.tensor(3)))


@pytest.mark.parametrize("dim,index,src_shape", [(0, torch.tensor([2, 0]), (2, 4)), (1, torch.tensor([3]), (3, 1)), (-1, torch.tensor(1), (3, 1)), (-2, torch.tensor([1, 2]), (2, 4))])
@pytest.mark.parametrize("alpha", [1, 3])
def test_index_add(dim, index, src_shape, alpha):
    x, src = seeded_randn(3, 4), seeded_randn(*src_shape, seed=1)
    check_export(Fn2(lambda a, b: a.index_add(dim, index, b, alpha=alpha)), (x, src))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float64])
def test_index_add_dtypes_and_duplicates(dtype):
    x, src = values(dtype, 4, 3), values(dtype, 5, 3, seed=1)
    check_export(Fn2(lambda a, b: a.index_add(0, torch.tensor([1, 1, 3, 0, 1]), b, alpha=2)), (x, src))


def test_index_add_0d():
    check_export(Fn2(lambda a, b: a.index_add(0, torch.tensor(0), b)), (torch.tensor(1.5), torch.tensor(2.0)))


@pytest.mark.parametrize("dim,index,src_shape", [(0, torch.tensor([2, 0]), (2, 4)), (1, torch.tensor(3), (3, 1)), (-1, torch.tensor([0, 2]), (3, 2))])
def test_index_copy(dim, index, src_shape):
    x, src = seeded_randn(3, 4), seeded_randn(*src_shape, seed=1)
    check_export(Fn2(lambda a, b: a.index_copy(dim, index, b)), (x, src))


@pytest.mark.slow
def test_index_copy_0d_and_int():
    check_export(Fn2(lambda a, b: a.index_copy(0, torch.tensor([0]), b)), (torch.tensor(1.5), torch.tensor(2.0)))
    check_export(Fn2(lambda a, b: a.index_copy(0, torch.tensor([1]), b)), (ints(9, 3, 2), ints(9, 1, 2, seed=1)))


def test_index_add_dynamic():
    idx = torch.tensor([0, 2])
    check_export(
        Fn2(lambda a, b: a.index_add(1, idx, b)),
        (seeded_randn(3, 4), seeded_randn(3, 2, seed=1)),
        dynamic_shapes={"x": {0: "n", 1: "m"}, "y": {0: "n"}},
        inputs2=((seeded_randn(5, 6), seeded_randn(5, 2, seed=1)), None),
    )


# scatter_reduce / index_reduce
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_reduce(reduce, include_self, dtype):
    x, src = values(dtype, 4, 3), values(dtype, 5, 3, seed=1)
    index = torch.tensor([[0, 1, 0], [0, 0, 0], [3, 1, 1], [3, 1, 1], [0, 0, 1]])
    check_export(Fn2(lambda a, b: a.scatter_reduce(0, index, b, reduce, include_self=include_self)), (x, src))


@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_negative_dim_smaller_index(include_self):
    # index smaller than src: torch reads src only where index has values
    x, src = seeded_randn(3, 5), seeded_randn(4, 6, seed=1)
    index = torch.tensor([[4, 0], [1, 1], [4, 2]])
    check_export(Fn2(lambda a, b: a.scatter_reduce(-1, index, b, "amax", include_self=include_self)), (x, src))


def test_scatter_reduce_dynamic():
    check_export(
        Fn2(lambda a, i: a.scatter_reduce(1, i, a * 2, "mean", include_self=False)),
        (seeded_randn(3, 4), ints(4, 3, 4)),
        dynamic_shapes={"x": {0: "n", 1: "m"}, "y": {0: "n", 1: "m"}},
        inputs2=((seeded_randn(5, 6), ints(6, 5, 6, seed=1)), None),
    )


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, -1])
def test_index_reduce(reduce, include_self, dim):
    x = seeded_randn(4, 4)
    src = seeded_randn(3, 4, seed=1) if dim == 0 else seeded_randn(4, 3, seed=1)
    index = torch.tensor([1, 3, 1])
    check_export(Fn2(lambda a, b: a.index_reduce(dim, index, b, reduce, include_self=include_self)), (x, src))


def test_index_reduce_int_mean():
    check_export(Fn2(lambda a, b: a.index_reduce(0, torch.tensor([0, 0, 2]), b, "mean")), (ints(20, 3, 2) - 10, ints(20, 3, 2, seed=1) - 10))


# histc
@pytest.mark.parametrize("bins,lo,hi", [(10, -2.0, 2.0), (4, 0, 0), (7, -0.5, 0.5), (1, 0, 0), (100, 0, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc(bins, lo, hi, dtype):
    x = seeded_randn(5, 40).to(dtype)
    check_export(Fn(lambda t: torch.histc(t, bins=bins, min=lo, max=hi)), (x,))


def test_histc_constant_data_and_edges():
    check_export(Fn(lambda t: torch.histc(t, bins=3)), (torch.full((4,), 2.0),))
    check_export(Fn(lambda t: torch.histc(t, bins=4, min=0, max=4)), (torch.tensor([0.0, 4.0, 4.0, 1.0, 2.0, 5.0, -1.0, 3.999]),))


@pytest.mark.parametrize("bins,range_,weighted,density", [(5, None, False, False), (3, (-1.0, 0.5), True, False), (4, None, True, True), (1, None, False, True)])
def test_histogram_bin_count(bins, range_, weighted, density):
    def fn(t, w):
        return torch.histogram(t, bins=bins, range=range_, weight=w if weighted else None, density=density)

    x, w = seeded_randn(4, 10), torch.rand(4, 10, generator=torch.Generator().manual_seed(1))
    check_export(Fn2(fn), (x, w), dynamic_shapes={"x": {0: "n"}, "y": {0: "n"}}, inputs2=((seeded_randn(7, 10, seed=2), torch.rand(7, 10)), None))


def test_histogram_shape_functions_only_during_capture():
    # torch has no Meta kernel for histogram (so no symbolic shapes): fx2onnx registers one while capturing
    from fx2onnx.convert.meta_kernels import META_KERNELS, _has_meta, missing_meta_kernels

    assert not _has_meta("histogram.bin_ct")
    with missing_meta_kernels() as added:
        assert set(added) == set(META_KERNELS) and _has_meta("histogram.bin_ct")
    assert not _has_meta("histogram.bin_ct")


def test_histogram_edges_constant_and_empty_data():
    # torch widens equal outer edges by 0.5 each side and bins empty data over [0, 1]
    check_export(Fn(lambda t: torch.histogram(t, bins=4)), (torch.full((3,), 2.0),))
    check_export(Fn(lambda t: torch.histogram(t, bins=4)), (torch.zeros(0),))


def test_histogram_bin_edges_tensor_of_dynamic_length():
    check_export(
        Fn2(lambda t, e: torch.histogram(t, e, density=True)),
        (seeded_randn(30), torch.tensor([-2.0, -0.5, 0.0, 1.5])),
        dynamic_shapes={"x": {0: "n"}, "y": {0: "edges"}},
        inputs2=((seeded_randn(50, seed=3), torch.tensor([-1.0, 0.0, 0.1, 0.2, 3.0])), None),
    )


@pytest.mark.parametrize("bins", [(3, 4), [torch.tensor([-1.0, 0.0, 2.0]), torch.tensor([-3.0, -1.0, 0.0, 1.0])]])
def test_histogramdd(bins):
    if isinstance(bins, tuple):
        fn = lambda t, w: torch.histogramdd(t, bins=list(bins), weight=w, density=True)  # noqa: E731
    else:
        fn = lambda t, w: torch.histogramdd(t, bins=bins, weight=w)  # noqa: E731
    check_export(
        Fn2(fn), (seeded_randn(20, 2), torch.rand(20)), dynamic_shapes={"x": {0: "n"}, "y": {0: "n"}},
        inputs2=((seeded_randn(33, 2, seed=4), torch.rand(33)), None),
    )


@pytest.mark.parametrize("reduce", ["sum", "mean", "prod", "max", "min"])
@pytest.mark.parametrize("initial", [None, 2.5])
def test_segment_reduce_empty_segments_and_nan(reduce, initial):
    data = seeded_randn(6, 3)
    data[4, 1] = float("nan")
    lengths = torch.tensor([2, 0, 3, 1])
    check_export(Fn2(lambda d, n: torch.segment_reduce(d, reduce, lengths=n, initial=initial)), (data, lengths))
    offsets = torch.tensor([0, 2, 2, 5, 6])
    check_export(
        Fn2(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, initial=initial)),
        (seeded_randn(6, 2), offsets),
        dynamic_shapes={"x": {0: "n"}, "y": {0: "segments"}},
        inputs2=((seeded_randn(9, 2, seed=1), torch.tensor([0, 0, 4, 9])), None),
    )


def test_histc_moe_routing_dynamic():
    # counts of tokens per expert, as mixture-of-experts layers compute them
    num_experts = 8

    def fn(expert_ids):
        return torch.histc(expert_ids.float(), bins=num_experts, min=0, max=num_experts - 1)

    check_export(
        Fn(fn), (ints(num_experts, 6, 2),), dynamic_shapes={"x": {0: "tokens"}}, inputs2=((ints(num_experts, 13, 2, seed=1),), None)
    )


# repeat_interleave
@pytest.mark.parametrize("repeats,dim", [(2, -1), (3, 0), (1, 1), (2, None), (0, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_repeat_interleave_int(repeats, dim, dtype):
    x = values(dtype, 2, 3) if dtype != torch.bool else seeded_randn(2, 3) > 0
    check_export(Fn(lambda t: t.repeat_interleave(repeats, dim=dim)), (x,))


def test_repeat_interleave_int_0d_and_empty():
    check_export(Fn(lambda t: t.repeat_interleave(3)), (torch.tensor(1.5),))
    check_export(Fn(lambda t: t.repeat_interleave(2, dim=0)), (torch.zeros(0, 3),))


def test_repeat_interleave_interleaved_rotary_dynamic():
    # GPT-J / CodeGen style: sin/cos [seq, d/2] -> [seq, d], pairs interleaved
    def fn(t):
        return torch.sin(t).repeat_interleave(2, dim=-1) * torch.cos(t)[:, None, :].repeat_interleave(2, 2)[:, 0]

    check_export(Fn(fn), (seeded_randn(5, 4),), dynamic_shapes={"x": {0: "seq", 1: "half"}}, inputs2=((seeded_randn(9, 3),), None))


def test_repeat_interleave_symbolic_repeats():
    # the repeat count is a dimension of the input
    check_export(Fn(lambda t: t[0].repeat_interleave(t.shape[0], dim=0)), (seeded_randn(3, 2),), dynamic_shapes={"x": {0: "n"}}, inputs2=((seeded_randn(5, 2),), None))


@pytest.mark.parametrize("repeats", [torch.tensor([2, 0, 3, 1]), torch.tensor([0, 0, 0, 0]), torch.tensor([1, 2, 0, 0]), torch.tensor([3])])
@pytest.mark.parametrize("dim", [0, None])
def test_repeat_interleave_self_tensor(repeats, dim):
    x = seeded_randn(4, 2) if dim == 0 else seeded_randn(2, 2)
    check_export(Fn2(lambda t, r: t.repeat_interleave(r, dim=dim)), (x, repeats))


def test_repeat_interleave_tensor_dynamic():
    check_export(
        Fn(lambda r: torch.repeat_interleave(r)),
        (torch.tensor([2, 0, 3]),),
        dynamic_shapes={"x": {0: "n"}},
        inputs2=((torch.tensor([1, 4, 0, 0, 2]),), None),
    )
    check_export(Fn(lambda r: torch.repeat_interleave(r)), (torch.tensor([], dtype=torch.int64),))


# masked_select / put
@pytest.mark.parametrize("dtype", NUMERIC + [torch.bool])
def test_masked_select_broadcast(dtype):
    x = values(dtype, 3, 4) if dtype != torch.bool else seeded_randn(3, 4) > 0
    mask = seeded_randn(4, seed=1) > 0
    check_export(Fn2(lambda a, m: torch.masked_select(a, m)), (x, mask))


def test_masked_select_dynamic_and_0d():
    check_export(
        Fn(lambda a: torch.masked_select(a, a > 0)),
        (seeded_randn(3, 4),),
        dynamic_shapes={"x": {0: "n", 1: "m"}},
        inputs2=((seeded_randn(6, 5),), None),
    )
    check_export(Fn(lambda a: torch.masked_select(a, a > 0)), (torch.tensor(1.5),))


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_put(accumulate, dtype):
    index = torch.tensor([[0, -1], [5, 3]]) if not accumulate else torch.tensor([[0, -1], [0, 3]])
    check_export(Fn2(lambda a, b: a.put(index, b, accumulate=accumulate)), (values(dtype, 3, 4), values(dtype, 2, 2, seed=1)))


def test_put_0d():
    check_export(Fn2(lambda a, b: a.put(torch.tensor(0), b)), (torch.tensor(1.0), torch.tensor(5.0)))


# nanmedian / mode
def _with_nans(*shape, seed=0):
    x = seeded_randn(*shape, seed=seed)
    x[seeded_randn(*shape, seed=seed + 1) > 0.6] = float("nan")
    return x


@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False)])
def test_nanmedian_dim(dim, keepdim):
    x = _with_nans(5, 6)
    check_export(Fn(lambda t: torch.nanmedian(t, dim, keepdim)), (x,))
    # a row of NaN only: the value is NaN, the index is whatever torch's selection algorithm left there
    x[2, :] = float("nan")
    x[:, 2] = float("nan")
    check_export(Fn(lambda t: torch.nanmedian(t, dim, keepdim)[0]), (x,))


def test_nanmedian_all_and_0d_and_dynamic():
    check_export(Fn(lambda t: torch.nanmedian(t)), (_with_nans(4, 5),))
    check_export(Fn(lambda t: torch.nanmedian(t)), (torch.tensor(float("nan")),))
    check_export(Fn(lambda t: torch.nanmedian(t, 0)), (torch.tensor(2.0),))
    check_export(
        Fn(lambda t: torch.nanmedian(t, 1)), (_with_nans(3, 4),), dynamic_shapes={"x": {0: "n", 1: "m"}}, inputs2=((_with_nans(5, 7, seed=3),), None)
    )


@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.int32])
def test_mode(dim, keepdim, dtype):
    x = ints(4, 5, 7).to(dtype)
    check_export(Fn(lambda t: torch.mode(t, dim, keepdim)), (x,))


def test_mode_bool_0d_dynamic():
    check_export(Fn(lambda t: torch.mode(t, 0)), (torch.tensor([True, False, True]),))
    check_export(Fn(lambda t: torch.mode(t)), (torch.tensor(3),))
    check_export(Fn(lambda t: torch.mode(t, -1)), (ints(3, 4, 6),), dynamic_shapes={"x": {0: "n", 1: "m"}}, inputs2=((ints(3, 2, 9, seed=1),), None))
