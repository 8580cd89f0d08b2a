"""Types onnxruntime's CPU kernels do not take (bool Max, bool Where, int Floor...) and the
edge cases torch's OpInfo samples found: each failed to load or run before."""

from __future__ import annotations

import onnx_ir as ir
import pytest
import torch
from helpers import Fn, Fn2, check_export

from fx2onnx.convert.ort_kernels import cast_to_kernel_types, positive_reduction_axes
from fx2onnx.validation import make_session

BOOL_A = torch.tensor([[True, False, True], [False, False, True]])
BOOL_B = torch.tensor([[False, False, True], [True, False, False]])
INTS = torch.tensor([[-3, 0, 7], [2, -9, 4]])


@pytest.mark.parametrize(
    "fn",
    [torch.maximum, torch.minimum, torch.gt, torch.le, lambda a, b: torch.where(a, b, a), lambda a, b: torch.addr(a, a[:, 0], b[0])],
    ids=["maximum", "minimum", "gt", "le", "where", "addr"],
)
def test_bool_inputs(fn):
    check_export(Fn2(fn), (BOOL_A, BOOL_B))


@pytest.mark.parametrize(
    "fn",
    [torch.floor, torch.round, torch.sign, torch.isnan, torch.isinf, lambda x: torch.amax(x, dim=1)],
    ids=["floor", "round", "sign", "isnan", "isinf", "amax"],
)
def test_integer_and_bool_elementwise(fn):
    check_export(Fn(fn), (INTS,))
    if fn not in (torch.floor, torch.round):
        check_export(Fn(fn), (BOOL_A,))


def test_pass_on_a_graph_casts_and_restores():
    a = ir.Value(name="a", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([3]))
    b = ir.Value(name="b", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([3]))
    node = ir.node("Max", [a, b])
    node.outputs[0].name = "y"
    graph = ir.Graph([a, b], node.outputs, nodes=[node], opset_imports={"": 20})
    model = ir.Model(graph, ir_version=10)
    assert cast_to_kernel_types(model) == 1
    assert [n.op_type for n in model.graph] == ["Cast", "Cast", "Max", "Cast"]
    assert model.graph.outputs[0].name == "y" and model.graph.outputs[0].dtype == ir.DataType.BOOL
    sess = make_session(ir.to_proto(model))
    got = sess.run(None, {"a": BOOL_A[0].numpy(), "b": BOOL_B[0].numpy()})[0]
    assert got.tolist() == torch.maximum(BOOL_A[0], BOOL_B[0]).tolist()
    # a float node is left alone
    assert cast_to_kernel_types(model) == 0


def test_atan2_on_the_axes():
    y = torch.tensor([0.0, 1.0, -1.0, 0.0, 2.0, -2.0])
    x = torch.tensor([0.0, 0.0, 0.0, -1.0, -3.0, -3.0])
    check_export(Fn2(torch.atan2), (y, x))
    check_export(Fn2(torch.atan2), (y > 0, x < 0))


def test_cumsum_of_a_scalar():
    check_export(Fn(lambda x: torch.cumsum(x, 0)), (torch.tensor(3.5),))


def test_unfold_of_an_empty_batch():
    unfold = Fn(lambda x: torch.nn.functional.unfold(x, kernel_size=2))
    check_export(unfold, (torch.randn(0, 1, 5, 5),))


def test_conv_transpose_output_padding_beyond_stride():
    # torch allows output_padding < max(stride, dilation); onnxruntime only < stride
    x, w, b = torch.randn(2, 2, 4, 4), torch.randn(2, 2, 3, 3), torch.randn(2)

    class ConvT(torch.nn.Module):
        def forward(self, x, w, b):
            return torch.nn.functional.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=3, dilation=4)

    check_export(ConvT(), (x, w, b))


def test_triplet_margin_loss_of_integers():
    a, p, n = (torch.randint(-5, 5, (4, 6), generator=torch.Generator().manual_seed(i)) for i in range(3))

    class Loss(torch.nn.Module):
        def forward(self, a, p, n):
            return torch.nn.functional.triplet_margin_loss(a, p, n)

    check_export(Loss(), (a, p, n))


def test_replicate_pad_with_negative_pads():
    pad = Fn(lambda x: torch.nn.functional.pad(x, (-1, 2, 1, -2), mode="replicate"))
    check_export(pad, (torch.randn(1, 2, 5, 6),))


def test_max_dim_of_a_scalar():
    check_export(Fn(lambda x: torch.max(x, 0)), (torch.tensor(2.5),))


@pytest.mark.parametrize("offset, dims", [(0, (0, 1)), (1, (1, 2)), (-2, (2, 0))])
def test_diagonal_scatter(offset, dims):
    x = torch.randn(4, 5, 6)
    src = torch.diagonal(x, offset, *dims) * 0 + torch.arange(1.0, 1 + torch.diagonal(x, offset, *dims).shape[-1])

    class Scatter(torch.nn.Module):
        def forward(self, x, src):
            return torch.diagonal_scatter(x, src, offset, *dims)

    check_export(Scatter(), (x, src))


@pytest.mark.parametrize("size", [0, 2, 7])
def test_nonzero_static(size):
    x = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    check_export(Fn(lambda x: torch.nonzero_static(x, size=size, fill_value=-4)), (x,))


def test_nonzero_of_a_scalar():
    check_export(Fn(lambda x: torch.nonzero(x)), (torch.tensor(2.0),))
    check_export(Fn(lambda x: torch.nonzero_static(x, size=3)), (torch.tensor(2.0),))


@pytest.mark.parametrize(
    "fn",
    [lambda x: torch.logsumexp(x, 1), lambda x: torch.logit(x), lambda x: torch.cummax(x, 1), lambda x: torch.argmax(x[0, 0].int(), 0)],
    ids=["logsumexp", "logit", "cummax", "argmax-scalar"],
)
def test_integer_and_bool_inputs_of_float_results(fn):
    check_export(Fn(fn), (INTS,))
    check_export(Fn(fn), (BOOL_A,))


@pytest.mark.parametrize("ord", [1, 2, float("inf"), 3.0])
def test_norm_of_a_scalar(ord):
    # the norm of one negative number is its absolute value (it was returned as it is)
    check_export(Fn(lambda x: torch.linalg.vector_norm(x, ord)), (torch.tensor(-8.5),))


def test_mean_of_nothing_is_nan():
    # onnxruntime's ReduceMean of an empty tensor gives 0, torch NaN: a dynamic (maybe empty)
    # dimension is averaged as sum / count
    mean = Fn(lambda x: (x.mean(1), torch.var_mean(x, 1)))
    check_export(mean, (torch.randn(2, 3),), dynamic_shapes=({1: "n"},), inputs2=((torch.randn(2, 0),), None))


def test_reductions_over_an_empty_last_axis():
    # onnxruntime keeps an empty axis given as -1 instead of reducing it: positive axes
    check_export(Fn2(lambda b, x: torch.bucketize(x, b)), (torch.empty(0), torch.randn(3)))
    check_export(Fn2(lambda e, t: torch.isin(e, t)), (torch.randn(2, 3), torch.empty(0)))
    check_export(Fn(lambda x: torch.cummax(x, 0)[0]), (torch.randn(0, 3),))
    check_export(Fn2(lambda a, b: torch.cdist(a, b)), (torch.randn(2, 0, 3), torch.randn(2, 4, 3)))


def test_one_hot_of_a_scalar():
    check_export(Fn(lambda x: torch.nn.functional.one_hot(x, 5)), (torch.tensor(3),))


def test_adaptive_avg_pool_of_a_dynamic_image():
    # windows of uneven sizes computed from the runtime height and width (refused before)
    pool = Fn(lambda x: torch.nn.functional.adaptive_avg_pool2d(x, (3, 5)))
    check_export(
        pool,
        (torch.randn(2, 2, 8, 9),),
        dynamic_shapes=({0: "batch", 2: "height", 3: "width"},),
        inputs2=((torch.randn(3, 2, 13, 7),), None),
    )
    keep_width = Fn(lambda x: torch.nn.functional.adaptive_avg_pool2d(x, (2, None)))
    check_export(keep_width, (torch.randn(1, 2, 8, 9),), dynamic_shapes=({2: "height", 3: "width"},), inputs2=((torch.randn(1, 2, 5, 4),), None))


def test_take_and_searchsorted_with_a_sorter():
    x = torch.randn(3, 4)
    check_export(Fn2(torch.take), (x, torch.tensor([[0, -1], [5, 11]])))
    seq = torch.tensor([5.0, 1.0, 3.0, 2.0])

    class Sorted(torch.nn.Module):
        def forward(self, seq, sorter, values):
            return torch.searchsorted(seq, values, sorter=sorter)

    check_export(Sorted(), (seq, torch.argsort(seq), torch.tensor([0.5, 2.5, 6.0])))


def test_float64_without_a_kernel_is_reported():
    # onnxruntime's Det is float only and float64 is never computed in float32: said at export
    # (to_onnx computes a float64 det through an LU factorization now: the node is built here)
    import onnx
    import onnx_ir as ir

    from fx2onnx.convert.ort_kernels import cast_to_kernel_types

    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Det", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, [3, 3])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, [])],
    )
    model = ir.serde.deserialize_model(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)]))
    with pytest.warns(UserWarning, match=r"no kernel for Det\(double"):
        cast_to_kernel_types(model)
    assert [n.op_type for n in model.graph] == ["Det"]


def test_bincount():
    x = torch.tensor([0, 3, 3, 1])
    check_export(Fn(lambda x: torch.bincount(x, minlength=2)), (x,), dynamic_shapes=({0: "n"},), inputs2=((torch.tensor([5, 0, 5]),), None))
    check_export(Fn2(lambda x, w: torch.bincount(x, w)), (x, torch.tensor([0.5, 1.0, 2.0, -1.0])))
    check_export(Fn(lambda x: torch.bincount(x, minlength=3)), (torch.zeros(0, dtype=torch.int64),))


def test_frexp_at_powers_of_two_and_special_values():
    x = torch.tensor([8.0, -0.25, 3.0, 1e-30, 0.0, float("inf"), -7.5, 1.0, 1023.9])
    check_export(Fn(torch.frexp), (x,))


def test_gcd_and_lcm():
    a, b = torch.tensor([12, -18, 0, 7, 0, 1071]), torch.tensor([8, 24, 5, 0, 0, 462])
    shapes = ({0: "n"}, {0: "n"})
    second = ((torch.tensor([89, 144, -6]), torch.tensor([55, 233, 4])), None)
    check_export(Fn2(torch.gcd), (a, b), dynamic_shapes=shapes, inputs2=second)
    check_export(Fn2(torch.lcm), (a, b), dynamic_shapes=shapes, inputs2=second)


def test_negative_reduction_axes_become_positive():
    # a (3, 0) tensor summed over -1 stays (3, 0) in onnxruntime: the pass gives the axis as 1
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([3, 0]))
    axes = ir.node("Constant", [], {"value": ir.tensor([-1], dtype=ir.DataType.INT64)})
    node = ir.node("ReduceSum", [x, axes.outputs[0]], {"keepdims": 0})
    node.outputs[0].name = "y"
    graph = ir.Graph([x], node.outputs, nodes=[axes, node], opset_imports={"": 20})
    model = ir.Model(graph, ir_version=10)
    assert positive_reduction_axes(model) == 1
    got = make_session(ir.to_proto(model)).run(None, {"x": torch.zeros(3, 0).numpy()})[0]
    assert got.shape == (3,)
    # end to end: a modified Bessel function of an empty tensor (a reduction over its quadrature nodes)
    check_export(Fn(torch.special.modified_bessel_k0), (torch.rand(1, 0, 3),))


def test_rounding_of_large_integers_is_exact():
    big = torch.tensor([2**62 + 1, -(2**60) - 3, 7])
    for fn in (torch.floor, torch.ceil, torch.round, torch.trunc):
        check_export(Fn(fn), (big,))


def test_integer_linear_and_addmm_are_exact():
    a, b = torch.tensor([[2**50 + 1, 3], [5, -7]]), torch.tensor([[2**11, 1], [2, 3]])  # 2**61 + 2**11: not a float64
    bias = torch.tensor([1, -1])

    class Linear(torch.nn.Module):
        def forward(self, a, b, bias):
            return torch.nn.functional.linear(a, b, bias), torch.addmm(bias, a, b, beta=2, alpha=3)

    check_export(Linear(), (a, b, bias))
