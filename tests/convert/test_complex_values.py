"""Complex tensors are real pairs; a complex node without a converter stops the export with a message naming it."""

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


class TanhOfComplex(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_real(torch.view_as_complex(x).tanh())


def test_complex_input_is_a_real_pair():
    x, x2 = torch.randn(3, dtype=torch.complex64), torch.randn(5, dtype=torch.complex64)
    onx = check_export(ComplexInput(), (x,), dynamic_shapes=({0: "n"},), inputs2=((x2,), None))
    shape = [d.dim_param or d.dim_value for d in onx.graph.input[0].type.tensor_type.shape.dim]
    assert shape == ["n", 2], shape


def test_complex_intermediate_is_converted():
    x, x2 = torch.randn(3, 2), torch.randn(6, 2)
    onx = check_export(ComplexInside(), (x,), dynamic_shapes=({0: "n"},), inputs2=((x2,), None))
    assert all("COMPLEX" not in str(v.type) for v in onx.graph.value_info)


def test_complex_op_without_converter_is_a_clear_error():
    with pytest.raises(fx2onnx.ConversionError, match="no converter handles complex values") as info:
        fx2onnx.to_onnx(TanhOfComplex(), (torch.randn(3, 2),))
    message = str(info.value)
    assert "aten::tanh" in message and "takes a complex tensor (torch.complex64, from 'view_as_complex')" in message
    assert "real pairs" in message and "fx2onnx.Dispatcher" in message
    assert "source:" in message and ".tanh()" in message, message
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


class ComplexRotary(torch.nn.Module):
    """The rotary embedding of DeepSeek-V2: complex multiplication, ``.to`` calls asserted by torch.export."""

    def forward(self, x, freqs):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        rotation = torch.polar(torch.ones_like(freqs), freqs).to(xc.device)
        return torch.view_as_real((xc * rotation).to(torch.complex64)).flatten(-2).type_as(x)


def test_assertions_on_complex_tensors_are_dropped():
    x, freqs = torch.randn(2, 5, 8), torch.randn(5, 4)
    x2, freqs2 = torch.randn(3, 7, 8), torch.randn(7, 4)
    ep = torch.export.export(ComplexRotary(), (x, freqs))
    assert any(n.target == torch.ops.aten._assert_tensor_metadata.default for n in ep.graph.nodes)
    check_export(ComplexRotary(), (x, freqs), dynamic_shapes=({0: "batch", 1: "seq"}, {0: "seq"}),
                 inputs2=((x2, freqs2), None))
