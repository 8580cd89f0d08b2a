"""Custom ops exported through a user converter given to the Dispatcher."""

from __future__ import annotations

import onnx
import onnxscript
import pytest
import torch
from helpers import check_export
from onnxscript import opset18 as op

import fx2onnx
from fx2onnx.convert.errors import UnsupportedOpError


@torch.library.custom_op("fx2onnx_test::addmul", mutates_args=())
def addmul(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x + y * alpha


@addmul.register_fake
def _addmul_fake(x, y, alpha):
    return torch.empty_like(x)


@torch.library.custom_op("fx2onnx_test::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, s: float) -> None:
    x.mul_(s)


@scale_.register_fake
def _scale_fake(x, s):
    return None


@torch.library.custom_op("fx2onnx_test::scale_sum", mutates_args=("x",))
def scale_sum(x: torch.Tensor, s: float) -> torch.Tensor:
    x.mul_(s)
    return x.sum(dim=0)


@scale_sum.register_fake
def _scale_sum_fake(x, s):
    return x.new_empty(x.shape[1:])


_lib = torch.library.Library("fx2onnx_test2", "DEF")
_lib.define("clip_low(Tensor x, float low) -> Tensor")
_lib.impl("clip_low", lambda x, low: x.clamp_min(low), "CompositeExplicitAutograd")


@torch.library.register_fake("fx2onnx_test2::clip_low")
def _clip_low_fake(x, low):
    return torch.empty_like(x)


class CustomModel(torch.nn.Module):
    def forward(self, x, y):
        z = addmul(x, y, 2.0)
        return torch.ops.fx2onnx_test2.clip_low(z, 0.1) * 3


def convert_addmul(ctx, node, x, y, alpha):
    return ctx.op.Add(x, ctx.op.Mul(y, ctx.const(alpha, torch.float32)))


def convert_clip_low(ctx, node, x, low):
    return ctx.op.Max(x, ctx.const(low, torch.float32))


@onnxscript.script()
def addmul_script(x, y, alpha: float):
    return x + y * op.CastLike(alpha, y)


@onnxscript.script()
def clip_low_script(x, low: float):
    return op.Max(x, op.CastLike(low, x))


INPUTS = (torch.randn(3, 4), torch.randn(3, 4))
INPUTS2 = ((torch.randn(6, 4), torch.randn(6, 4)), None)
DS = ({0: "batch"}, {0: "batch"})


@pytest.mark.parametrize(
    "keys",
    [
        (torch.ops.fx2onnx_test.addmul.default, torch.ops.fx2onnx_test2.clip_low.default),  # overloads
        (torch.ops.fx2onnx_test.addmul, torch.ops.fx2onnx_test2.clip_low),  # packets
        ("fx2onnx_test::addmul", "fx2onnx_test2::clip_low"),  # names
    ],
)
def test_custom_op_builder_converter(keys):
    dispatcher = fx2onnx.Dispatcher({keys[0]: convert_addmul, keys[1]: convert_clip_low})
    onx = check_export(CustomModel(), INPUTS, dynamic_shapes=DS, inputs2=INPUTS2, dispatcher=dispatcher)
    assert {"Add", "Mul", "Max"} <= {n.op_type for n in onx.graph.node}


@pytest.mark.parametrize("optimize", [False, True])
def test_custom_op_onnxscript_converter(optimize):
    dispatcher = fx2onnx.Dispatcher({"fx2onnx_test::addmul": addmul_script, "fx2onnx_test2::clip_low": clip_low_script})
    onx = check_export(CustomModel(), INPUTS, dynamic_shapes=DS, inputs2=INPUTS2, dispatcher=dispatcher, optimize=optimize)
    if not optimize:  # kept as local functions, inlined by the optimizer
        assert {f.name for f in onx.functions} == {"addmul_script", "clip_low_script"}
        assert {"addmul_script", "clip_low_script"} <= {n.op_type for n in onx.graph.node}


def test_custom_op_onnxscript_called_from_builder_converter():
    def convert(ctx, node, x, y, alpha):
        return ctx.call_onnxscript(addmul_script, x, y, alpha=alpha)

    dispatcher = fx2onnx.Dispatcher({"fx2onnx_test::addmul": convert, "fx2onnx_test2::clip_low": convert_clip_low})
    check_export(CustomModel(), INPUTS, dynamic_shapes=DS, inputs2=INPUTS2, dispatcher=dispatcher, optimize=False)


def test_custom_op_without_converter_message():
    with pytest.raises(UnsupportedOpError) as e:
        fx2onnx.to_onnx(CustomModel(), INPUTS, dynamic_shapes=DS)
    text = str(e.value)
    assert "fx2onnx_test::addmul" in text
    assert "fx2onnx.Dispatcher" in text and "def convert_op(ctx, node" in text
    assert "test_custom_ops.py" in text  # points at the user's source line


class InplaceModel(torch.nn.Module):
    def forward(self, x):
        w = x * 1
        scale_(w, 3.0)
        w2 = w + 1
        s = scale_sum(w2, 0.5)
        return w, w2, s


def convert_scale_(ctx, node, x, s):
    return ctx.op.Mul(x, ctx.const(s, torch.float32))  # the new value of the mutated x


def convert_scale_sum(ctx, node, x, s):
    new_x = ctx.op.Mul(x, ctx.const(s, torch.float32))
    return ctx.op.ReduceSum(new_x, ctx.const([0], torch.int64), keepdims=0), new_x


@onnxscript.script()
def scale_script(x, s: float):
    return x * op.CastLike(s, x)


def test_custom_op_mutating_inputs():
    dispatcher = fx2onnx.Dispatcher({"fx2onnx_test::scale_": convert_scale_, "fx2onnx_test::scale_sum": convert_scale_sum})
    onx = check_export(
        InplaceModel(), (torch.randn(3, 4),), dynamic_shapes=({0: "batch"},), inputs2=((torch.randn(5, 4),), None), dispatcher=dispatcher
    )
    assert len(onx.graph.output) == 3


def test_custom_op_mutating_inputs_onnxscript():
    dispatcher = fx2onnx.Dispatcher({"fx2onnx_test::scale_": scale_script, "fx2onnx_test::scale_sum": convert_scale_sum})
    check_export(
        InplaceModel(), (torch.randn(3, 4),), dynamic_shapes=({0: "batch"},), inputs2=((torch.randn(5, 4),), None), dispatcher=dispatcher
    )


def test_custom_op_mutating_wrong_converter():
    def bad(ctx, node, x, s):
        return ctx.op.ReduceSum(x, keepdims=0)  # forgets the new value of x

    dispatcher = fx2onnx.Dispatcher({"fx2onnx_test::scale_": convert_scale_, "fx2onnx_test::scale_sum": bad})
    with pytest.raises(fx2onnx.convert.errors.ConversionError, match="new value of each mutated argument"):
        fx2onnx.to_onnx(InplaceModel(), (torch.randn(3, 4),), dispatcher=dispatcher)


def test_mutating_op_without_converter():
    with pytest.raises(UnsupportedOpError, match="fx2onnx_test::scale_"):
        fx2onnx.to_onnx(InplaceModel(), (torch.randn(3, 4),))


def test_custom_op_inside_cond():
    class M(torch.nn.Module):
        def forward(self, x, y):
            return torch.cond(x.sum() > 0, lambda x, y: addmul(x, y, 0.5), lambda x, y: x - y, [x, y])

    dispatcher = fx2onnx.Dispatcher({"fx2onnx_test::addmul": addmul_script})
    onx = check_export(M(), INPUTS, dynamic_shapes=DS, inputs2=((-INPUTS[0].abs(), INPUTS[1]), None), dispatcher=dispatcher)
    assert isinstance(onx, onnx.ModelProto)


@torch.library.custom_op("fx2onnx_test::min_max", mutates_args=())
def min_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.amin(dim=-1), x.amax(dim=-1)


@min_max.register_fake
def _min_max_fake(x):
    return x.new_empty(x.shape[:-1]), x.new_empty(x.shape[:-1])


def test_custom_op_two_outputs():
    class M(torch.nn.Module):
        def forward(self, x):
            low, high = min_max(x)
            return high - low, low

    def convert(ctx, node, x):
        axes = ctx.const([-1], torch.int64)
        return ctx.op.ReduceMin(x, axes, keepdims=0), ctx.op.ReduceMax(x, axes, keepdims=0)

    check_export(
        M(), (torch.randn(3, 5),), dynamic_shapes=({0: "a", 1: "b"},), inputs2=((torch.randn(4, 2),), None),
        dispatcher=fx2onnx.Dispatcher({torch.ops.fx2onnx_test.min_max: convert}),
    )


class MutatesSlice(torch.nn.Module):
    def forward(self, x):
        y = x * 1
        scale_(y[:, 1:3], 2.0)  # mutates a slice of y
        z = y + 1
        scale_(z[2:], 0.5)
        return y, z


def test_custom_op_mutating_a_slice():
    dispatcher = fx2onnx.Dispatcher({"fx2onnx_test::scale_": convert_scale_})
    onx = check_export(
        MutatesSlice(), (torch.randn(4, 5),), dynamic_shapes=({0: "a"},), inputs2=((torch.randn(7, 5),), None), dispatcher=dispatcher
    )
    assert [n.op_type for n in onx.graph.node].count("Concat") == 2  # each slice written back into its base


def test_custom_op_mutating_a_strided_view_is_refused():
    class M(torch.nn.Module):
        def forward(self, x):
            y = x * 1
            scale_(y.t()[1], 2.0)  # a strided view: not a slice
            return y

    dispatcher = fx2onnx.Dispatcher({"fx2onnx_test::scale_": convert_scale_})
    with pytest.raises(fx2onnx.ConversionError, match="strided view of another tensor"):
        fx2onnx.to_onnx(M(), (torch.randn(3, 4),), dispatcher=dispatcher)
