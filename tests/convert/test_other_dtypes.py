"""Half precision, float64 and small integer types: what the OpInfo sweep over them found.

Each case failed (or was silently wrong) before its fix; every model is checked against eager.
"""

from __future__ import annotations

import onnx_ir as ir
import pytest
import torch
import torch.nn.functional as F
from helpers import Fn, Fn2, check_export, seeded_randn

from fx2onnx.convert.ort_kernels import cast_to_kernel_types

HALF = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_norms_accumulate_in_float32(dtype):
    # squares of values ~300 overflow float16 (65504): torch accumulates in float32 and rounds once
    x = (seeded_randn(4, 64) * 300).to(dtype)
    check_export(Fn(lambda t: F.rms_norm(t, (64,))), (x,), atol=1e-2, rtol=1e-2)
    check_export(Fn2(lambda a, b: torch.dist(a, b, 3)), (x, -x), atol=1, rtol=1e-2)
    check_export(Fn(lambda t: torch.linalg.vector_norm(t, 2.5, dim=1)), (x,), atol=1, rtol=1e-2)
    check_export(Fn(lambda t: t.sum(1)), (x,), atol=2, rtol=1e-2)


@pytest.mark.parametrize("dtype", [*HALF, torch.float64])
def test_native_layer_norm_statistics_in_the_input_type(dtype):
    # ONNX's LayerNormalization gives float32 statistics: cast back, or computed in float64
    x = seeded_randn(3, 5, 8).to(dtype)
    check_export(Fn(lambda t: torch.native_layer_norm(t, [8], None, None, 1e-5)), (x,), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize(
    "reduce,dtype",
    [(r, torch.float16) for r in ["sum", "prod", "amax", "amin", "mean"]] + [(r, torch.bool) for r in ["sum", "prod", "amax", "amin"]],
)
def test_scatter_reductions_onnxruntime_refuses_at_run_time(reduce, dtype):
    # onnxruntime registers ScatterElements for float16 and bool but refuses a reduction at run time
    x = (seeded_randn(4, 3) > 0) if dtype == torch.bool else seeded_randn(4, 3).to(dtype)
    src = (seeded_randn(2, 3, seed=1) > 0) if dtype == torch.bool else seeded_randn(2, 3, seed=1).to(dtype)
    index = torch.tensor([[0, 1, 3], [0, 2, 3]])
    check_export(Fn2(lambda a, s: a.scatter_reduce(0, index, s, reduce)), (x, src), atol=1e-2)


def test_bfloat16_where_the_schema_has_no_bfloat16():
    # HardSwish-14 and Compress-11 do not list bfloat16: computed in float32
    x = seeded_randn(2, 6).to(torch.bfloat16)
    check_export(Fn(F.hardswish), (x,), atol=1e-2, rtol=1e-2)
    check_export(Fn(lambda t: torch.masked_select(t, t > 0)), (x,))


@pytest.mark.parametrize("fn", [F.elu, F.selu, F.softplus, F.hardswish, F.hardsigmoid, F.mish, F.celu, lambda t: F.leaky_relu(t, 0.2)])
def test_float64_activations_through_their_function_bodies(fn):
    # onnxruntime has float kernels only: the ONNX function body (Exp, Where...) runs in float64
    x = seeded_randn(3, 7).double() * 4
    check_export(Fn(fn), (x,), atol=1e-10, rtol=1e-10)


def test_function_body_expansion_on_a_graph():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.DOUBLE), shape=ir.Shape([3]))
    node = ir.node("HardSwish", [x])
    node.outputs[0].name = "y"
    model = ir.Model(ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 20}), ir_version=10)
    cast_to_kernel_types(model)
    ops = [n.op_type for n in model.graph]
    assert "HardSwish" not in ops and "HardSigmoid" not in ops and "Mul" in ops  # expanded twice
    assert model.graph.outputs[0].name == "y" and model.graph.outputs[0].dtype == ir.DataType.DOUBLE


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int8])
def test_nonzero_of_other_types_and_of_a_scalar(dtype):
    x = torch.tensor([[0, 1.5, 0], [2, 0, -1]]).to(dtype)
    check_export(Fn(lambda t: torch.nonzero(t)), (x,))
    check_export(Fn(lambda t: torch.nonzero(t, as_tuple=True)), (x,))
    check_export(Fn(lambda t: torch.nonzero(t, as_tuple=True)), (torch.tensor(3).to(dtype),))


def test_small_integer_types():
    u = torch.tensor([[0, 3, 255], [1, 0, 7]], dtype=torch.uint8)
    check_export(Fn(lambda t: (t.all(1), t.any())), (u,))  # uint8 in, uint8 out as torch
    check_export(Fn(lambda t: torch.bincount(t.flatten())), (torch.tensor([1, 3, 3, 0], dtype=torch.int32),))
    check_export(Fn(torch.trace), (torch.tensor([[100, 1], [7, 100]], dtype=torch.int8),))  # int64, no wrap at 200
    # the difference wraps in uint8 before the eps makes it float, as in eager
    check_export(Fn2(lambda a, b: F.pairwise_distance(a, b)), (u, u.flip(1)))


def test_uint8_bilinear_rounds_to_nearest():
    # torch interpolates integer images with fixed-point weights; the model computes the exact value and
    # rounds it: equal to eager here, and never more than 1 apart (OpInfo samples, ``rounding``)
    x = torch.tensor([[[[0, 255], [255, 0]]]], dtype=torch.uint8)
    check_export(Fn(lambda t: F.interpolate(t, size=(3, 3), mode="bilinear")), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_nextafter_exact_at_the_edges(dtype):
    info = torch.finfo(dtype)
    tiny = info.smallest_normal * info.eps  # the smallest subnormal
    special = [0.0, -0.0, tiny, -tiny, info.smallest_normal, 1.0, 0.5, -2.0, 3.0, 1e-3, info.max, -info.max, float("inf"), float("-inf"), float("nan")]
    x = torch.tensor(special, dtype=dtype).repeat_interleave(3)
    y = torch.tensor([float("inf"), float("-inf"), 1.0], dtype=dtype).repeat(len(special))
    check_export(Fn2(torch.nextafter), (x, y), atol=0, rtol=0)
    check_export(Fn(lambda t: torch.frexp(t)), (x,), atol=0, rtol=0)


@pytest.mark.parametrize("n,groups,stride,padding,dilation", [(1, 1, 1, 0, 1), (2, 2, 2, 1, 1), (2, 1, 1, "same", 2), (3, 1, (1, 2, 1), 1, 1)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_convolutions_onnxruntime_computes_in_float32_only(n, groups, stride, padding, dilation, dtype):
    # onnxruntime's Conv is float32 only: float64 and integer convolutions are sums of products, exact
    conv = [F.conv1d, F.conv2d, F.conv3d][n - 1]
    gen = torch.Generator().manual_seed(n)
    x = torch.randint(-2**20, 2**20, (2, 4, *[7] * n), generator=gen).to(dtype)
    x = x / 3 if dtype.is_floating_point else x  # float64: digits float32 does not have
    w = torch.randint(-50, 50, (6, 4 // groups, *[3] * n), generator=gen).to(dtype)
    b = torch.randint(-9, 9, (6,), generator=gen).to(dtype)
    model = Fn2(lambda t, k: conv(t, k, b, stride, padding, dilation, groups))
    spatial = {a: f"s{a}" for a in range(2, 2 + n)}
    bigger = torch.randint(-9, 9, (1, 4, *[9] * n), generator=gen).to(dtype)
    check_export(model, (x, w), dynamic_shapes=({0: "b", **spatial}, None), inputs2=((bigger, w), None), atol=0, rtol=1e-12)


@pytest.mark.parametrize(
    "n,groups,stride,padding,output_padding,dilation",
    [(1, 1, 2, 0, 1, 1), (2, 2, 2, 1, 0, 1), (2, 1, 3, 2, 2, 2), (3, 1, (1, 2, 2), 1, (0, 1, 0), 1), (2, 1, 1, 3, 0, 1)],
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_transposed_convolutions_in_float64_and_integers(n, groups, stride, padding, output_padding, dilation, dtype):
    # the input spread by the stride, padded (cropped for padding > dilation * (k - 1)), flipped weights
    conv = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][n - 1]
    gen = torch.Generator().manual_seed(n)
    x = torch.randint(-2**20, 2**20, (2, 4, *[5] * n), generator=gen).to(dtype)
    w = torch.randint(-50, 50, (4, 6 // groups, *[3] * n), generator=gen).to(dtype)
    b = torch.randint(-9, 9, (6,), generator=gen).to(dtype)
    model = Fn2(lambda t, k: conv(t, k, b, stride, padding, output_padding, groups, dilation))
    spatial = {a: f"s{a}" for a in range(2, 2 + n)}
    bigger = torch.randint(-9, 9, (1, 4, *[7] * n), generator=gen).to(dtype)
    if padding == 3:  # the crop case: torch.export specializes the spatial sizes itself
        check_export(model, (x, w), atol=0, rtol=1e-12)
        return
    check_export(model, (x, w), dynamic_shapes=({0: "b", **spatial}, None), inputs2=((bigger, w), None), atol=0, rtol=1e-12)


@pytest.mark.parametrize("ceil_mode,count_include_pad,divisor", [(False, True, None), (True, False, None), (True, True, None), (False, False, 4)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_avg_pool_in_float64_and_integers(ceil_mode, count_include_pad, divisor, dtype):
    # window sums divided by what torch divides by (integers: truncated as torch does)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-2**20, 2**20, (2, 3, 8, 7), generator=gen).to(dtype)
    x = x / 7 if dtype.is_floating_point else x
    model = Fn(lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode, count_include_pad, divisor))
    bigger = torch.randint(-99, 99, (1, 3, 9, 12), generator=gen).to(dtype)
    check_export(model, (x,), dynamic_shapes=({0: "b", 2: "h", 3: "w"},), inputs2=((bigger,), None), atol=0, rtol=1e-12)
    check_export(model, (x[:0],))  # an empty batch


def test_float64_unfold_and_instance_norm():
    # both use float32-only onnxruntime kernels (Conv, InstanceNormalization) in float32 models
    x = seeded_randn(2, 3, 6, 5).double() * 1e3 + 1 / 3
    check_export(Fn(lambda t: F.unfold(t, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))), (x,), atol=0, rtol=1e-15)
    scale = torch.tensor([0.5, 2.0, -1.0], dtype=torch.float64)
    check_export(Fn(lambda t: F.instance_norm(t, weight=scale, eps=1e-7)), (x,), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(size=(5, 7), mode="nearest"),
        dict(size=(5, 7), mode="nearest-exact"),
        dict(size=(2, 3), mode="bilinear"),
        dict(size=(5, 7), mode="bilinear", align_corners=True),
        dict(size=(1, 1), mode="bilinear", align_corners=True),
        dict(size=(5, 7), mode="bicubic"),
        dict(size=(3, 9), mode="bicubic", align_corners=True),
    ],
)
def test_float64_interpolation_by_gathers(kwargs):
    """onnxruntime's Resize has no float64 kernel: exact float64 interpolation by gathers, dynamic image sizes."""
    x = seeded_randn(2, 3, 4, 6).double()
    x2 = seeded_randn(1, 3, 9, 5).double()
    check_export(Fn(lambda t: F.interpolate(t, **kwargs)), (x,), dynamic_shapes=({0: "b", 2: "h", 3: "w"},),
                 inputs2=((x2,), None), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(
    "shape, kwargs",
    [
        ((2, 3, 4, 6), dict(scale_factor=2.5, mode="bilinear")),
        ((2, 3, 4, 6), dict(scale_factor=0.6, mode="bicubic")),
        ((2, 3, 4, 6), dict(scale_factor=1.7, mode="nearest-exact")),
        ((2, 3, 5), dict(size=8, mode="linear")),
        ((1, 2, 3, 4, 5), dict(size=(4, 5, 7), mode="trilinear")),
        ((1, 2, 3, 4, 5), dict(scale_factor=2, mode="nearest")),
        ((2, 3, 12, 10), dict(size=(5, 4), mode="bilinear", antialias=True)),
        ((2, 3, 12, 10), dict(size=(17, 6), mode="bicubic", antialias=True)),
        ((2, 3, 12, 10), dict(scale_factor=0.3, mode="bicubic", antialias=True)),
    ],
)
def test_float64_interpolation_scales_and_ranks(shape, kwargs):
    check_export(Fn(lambda t: F.interpolate(t, **kwargs)), (seeded_randn(*shape).double(),), atol=1e-12, rtol=1e-12)
