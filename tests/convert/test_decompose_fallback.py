"""Operators without a converter are decomposed by torch, only them; the dispatcher always wins."""

from __future__ import annotations

import pytest
import torch
from helpers import check_export

import fx2onnx
from fx2onnx.convert.decompose import decompositions_for, preserving, unsupported_ops
from fx2onnx.convert.registry import lookup

aten = torch.ops.aten


class DiagEmbedShrink(torch.nn.Module):
    def forward(self, x, y):
        return torch.diag_embed(x) + torch.nn.functional.hardshrink(y, 0.3)


class IndexFill(torch.nn.Module):
    def forward(self, x, index):
        return x.index_fill(1, index, -1.0)


class FakeQuantize(torch.nn.Module):
    def forward(self, x):
        return torch.fake_quantize_per_tensor_affine(x, 0.1, 0, 0, 255)


def test_ops_of_these_tests_have_no_builtin_converter():
    # if a converter is added later, pick other ops for these tests
    for op in (aten.diag_embed.default, aten.hardshrink.default, aten.index_fill.int_Scalar, aten.fake_quantize_per_tensor_affine_cachemask.default):
        assert lookup(op) is None, op


def test_decomposed_and_validated(capsys):
    x, y = torch.randn(2, 3), torch.randn(3, 3)
    x2, y2 = torch.randn(5, 3), torch.randn(3, 3)
    onx = check_export(
        DiagEmbedShrink(), (x, y), dynamic_shapes=({0: "batch"}, None), inputs2=((x2, y2), None), verbose=1
    )
    printed = capsys.readouterr().out
    assert "decomposed (no converter): aten::diag_embed, aten::hardshrink" in printed, printed
    targets = {p.value for n in onx.graph.node for p in n.metadata_props if p.key == "fx_target"}
    assert not any("diag_embed" in t or "hardshrink" in t for t in targets), targets


def test_decomposition_with_a_data_dependent_index():
    x = torch.randn(4, 5)
    index = torch.tensor([0, 3])
    check_export(
        IndexFill(), (x, index), dynamic_shapes=({0: "n"}, None), inputs2=((torch.randn(6, 5), torch.tensor([4, 1])), None)
    )


def _shrink_with_onnx(ctx, node, x, lambd=0.5):
    return ctx.op.Shrink(x, lambd=float(lambd), bias=0.0)


def test_dispatcher_converter_is_used_not_the_decomposition(capsys):
    dispatcher = fx2onnx.Dispatcher({aten.hardshrink.default: _shrink_with_onnx})
    x, y = torch.randn(2, 3), torch.randn(3, 3)
    onx = check_export(DiagEmbedShrink(), (x, y), dispatcher=dispatcher, verbose=1)
    printed = capsys.readouterr().out
    assert "decomposed (no converter): aten::diag_embed\n" in printed, printed
    shrink = [n for n in onx.graph.node if n.op_type == "Shrink"]
    assert len(shrink) == 1
    assert {p.key: p.value for p in shrink[0].metadata_props}["fx_target"] == "aten::hardshrink"


def test_preserving_restores_torch_kernels():
    op = aten.hardshrink.default
    before = dict(op.py_kernels)
    with pytest.raises(RuntimeError, match="inside"):
        with preserving([op]):
            assert torch._C.DispatchKey.Autograd not in op.py_kernels
            raise RuntimeError("inside")
    assert dict(op.py_kernels) == before
    y = torch.tensor([-1.0, 0.1, 2.0])
    assert torch.equal(torch.nn.functional.hardshrink(y, 0.5), torch.tensor([-1.0, 0.0, 2.0]))


def test_not_decomposable_still_raises_unsupported():
    # fake_quantize_per_tensor_affine -> its _cachemask form, which has neither a converter nor a decomposition
    op = aten.fake_quantize_per_tensor_affine_cachemask.default
    with pytest.raises(fx2onnx.UnsupportedOpError, match="'aten::fake_quantize_per_tensor_affine_cachemask'") as info:
        fx2onnx.to_onnx(FakeQuantize(), (torch.randn(3, 3),))
    message = str(info.value)
    assert "Dispatcher" in message and "torch.fake_quantize_per_tensor_affine" in message, message
    assert decompositions_for([op]) == {}


def test_decompose_false_raises_for_the_original_op():
    with pytest.raises(fx2onnx.UnsupportedOpError, match="diag_embed"):
        fx2onnx.to_onnx(DiagEmbedShrink(), (torch.randn(2, 3), torch.randn(3, 3)), decompose=False)


def test_unsupported_ops_respects_the_dispatcher():
    ep = torch.export.export(DiagEmbedShrink(), (torch.randn(2, 3), torch.randn(3, 3)))
    assert unsupported_ops(ep) == {aten.diag_embed.default, aten.hardshrink.default}
    dispatcher = fx2onnx.Dispatcher({"aten::hardshrink": _shrink_with_onnx})
    assert unsupported_ops(ep, dispatcher) == {aten.diag_embed.default}


def test_a_failing_decomposition_names_the_ops(monkeypatch):
    import fx2onnx.convert.decompose as decompose

    def broken(*args, **kwargs):
        raise RuntimeError("this decomposition is broken")

    monkeypatch.setattr(decompose, "decompositions_for", lambda ops: {op: broken for op in ops})
    with pytest.raises(fx2onnx.ExportError, match="without a converter \\(aten::diag_embed, aten::hardshrink\\) failed") as info:
        fx2onnx.to_onnx(DiagEmbedShrink(), (torch.randn(2, 3), torch.randn(3, 3)))
    assert "this decomposition is broken" in str(info.value) and "decompose=False" in str(info.value)


class ResampleWithDiag(torch.nn.Module):
    """A linear resampling to a size computed from the input (naflexvit's factorized position
    embedding) next to an operator decomposed: the re-tracing must keep torch's python kernel
    of ``upsample_linear1d.vec``, its C++ kernel refuses symbolic sizes."""

    def forward(self, x, table):
        n = x.shape[1]
        resized = torch.nn.functional.interpolate(table, size=n, mode="linear", align_corners=False)
        return x + resized[0].transpose(0, 1) + torch.diag_embed(x[:, :1, 0]).sum()


def test_resampling_to_a_symbolic_size_survives_the_decompositions():
    table = torch.randn(1, 4, 7)
    x, x2 = torch.randn(2, 9, 4), torch.randn(3, 13, 4)
    check_export(ResampleWithDiag(), (x, table), dynamic_shapes=({0: "batch", 1: "n"}, None),
                 inputs2=((x2, table), None))
