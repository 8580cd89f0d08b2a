"""Complex tensors stop the export at conversion time with a message naming the node."""

from __future__ import annotations

import pytest
import torch
from helpers import check_export

import fx2onnx


class ComplexInput(torch.nn.Module):
    def forward(self, x):
        return (x * 2).abs()


class ComplexInside(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_real(torch.view_as_complex(x) * 2)


class AbsOfComplex(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_complex(x).abs()


def test_complex_input_is_a_clear_error():
    x = torch.randn(3, dtype=torch.complex64)
    with pytest.raises(fx2onnx.ConversionError, match="complex tensors are not supported") as info:
        fx2onnx.to_onnx(ComplexInput(), (x,))
    message = str(info.value)
    assert "'mul'" in message and "takes a complex tensor (torch.complex64, from 'x')" in message, message
    assert "source:" in message and "x * 2" in message, message


def test_complex_intermediate_is_a_clear_error():
    with pytest.raises(fx2onnx.ConversionError, match="produces a complex tensor") as info:
        fx2onnx.to_onnx(ComplexInside(), (torch.randn(3, 2),))
    assert "aten::view_as_complex" in str(info.value)
    assert not isinstance(info.value, fx2onnx.UnsupportedOpError)


def test_dispatcher_converters_may_handle_complex_values():
    # the user converts the complex pair (real, imag) stored as a trailing axis of 2
    def keep_pairs(ctx, node, x):
        return ctx.op.Identity(x)

    def abs_of_pairs(ctx, node, x):
        two = ctx.op.ReduceSum(ctx.op.Mul(x, x), ctx.const([-1], torch.int64), keepdims=0)
        return ctx.op.Sqrt(two)

    dispatcher = fx2onnx.Dispatcher({"aten::view_as_complex": keep_pairs, "aten::abs": abs_of_pairs})
    x, x2 = torch.randn(4, 2), torch.randn(7, 2)
    onx = check_export(
        AbsOfComplex(), (x,), dispatcher=dispatcher, dynamic_shapes=({0: "n"},), inputs2=((x2,), None)
    )
    assert [n.op_type for n in onx.graph.node].count("Sqrt") == 1
