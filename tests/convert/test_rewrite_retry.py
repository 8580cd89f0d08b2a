"""to_onnx rewrites the `if` statements on tensor values of forward methods when the capture fails on them."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime
import pytest
import torch
import fx2onnx
from fx2onnx.convert.rewrite_retry import RewrittenControlFlowWarning


class Inner(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        y = self.inner(x)
        if y.mean() < 0.5:
            y = y + 10
        return y


def _run(onx, x):
    session = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def test_ifs_of_every_forward_rewritten_and_right_on_each_branch():
    model = Outer()
    with pytest.warns(RewrittenControlFlowWarning, match=r"Outer.forward \(line \d+\); Inner.forward \(line \d+\)"):
        onx = fx2onnx.to_onnx(model, (torch.randn(2, 5),), dynamic_shapes=({0: "batch"},))
    assert "If" in {n.op_type for n in onx.graph.node}
    # the three paths: inner true / outer false, inner false / outer true, inner true / outer true
    for x in [torch.rand(3, 5) * 3, -torch.rand(4, 5), torch.rand(2, 5) * 0.1]:
        np.testing.assert_allclose(_run(onx, x), model(x).numpy(), atol=1e-6)
    assert Outer.forward.__code__.co_filename == __file__  # the classes are restored


def test_patches_false_refuses_and_names_the_line():
    with pytest.raises(fx2onnx.ExportError, match=r"reads a Python value from a tensor's data at .*`if x.sum\(\) > 0:`"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RewrittenControlFlowWarning)
            fx2onnx.to_onnx(Outer(), (torch.randn(2, 5),), patches=False)


def _helper(x):
    if x.mean() > 0:  # not a forward: not rewritten
        return x
    return -x


class StillDataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            x = x + 1
        return _helper(x)


def test_second_failure_reports_both():
    with pytest.raises(fx2onnx.ExportError) as info:
        fx2onnx.to_onnx(StillDataDependent(), (torch.randn(2, 5),))
    message = str(info.value)
    assert "also tried with the `if` statements on tensor values of StillDataDependent.forward" in message
    assert "`if x.mean() > 0:  # not a forward: not rewritten`" in message  # the first failure's line


class CutAtLongest(torch.nn.Module):
    def forward(self, x, lengths):
        scale = float(lengths.float().mean())  # a Python number read from a tensor
        return x[:, : int(lengths.max())] * scale


def test_int_and_float_of_tensors_read_as_symbolic_numbers():
    model = CutAtLongest()
    args = (torch.randn(2, 9), torch.tensor([3, 5]))
    with pytest.warns(RewrittenControlFlowWarning, match=r"CutAtLongest.forward \(line \d+, \d+\).*t.item\(\)"):
        onx = fx2onnx.to_onnx(model, args, dynamic_shapes=({0: "batch", 1: "seq"}, {0: "batch"}))
    session = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    for x, lengths in [args, (torch.randn(3, 11), torch.tensor([2, 8, 4])), (torch.randn(1, 4), torch.tensor([4]))]:
        got = session.run(None, {"x": x.numpy(), "lengths": lengths.numpy()})[0]
        expected = model(x, lengths).numpy()
        assert got.shape == expected.shape  # cut at max(lengths), a size read from the data
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_read_helpers_match_python():
    from fx2onnx.patches.rewrite import find_scalar_reads, read_float, read_int

    assert read_int(torch.tensor(-2.7)) == int(-2.7) == -2 and read_int(torch.tensor(True)) == 1 and read_int(3.9) == 3
    assert read_float(torch.tensor(3)) == 3.0 and read_float(torch.tensor(False)) == 0.0
    assert [code for _, code in find_scalar_reads(CutAtLongest.forward)] == [
        "float(lengths.float().mean())", "int(lengths.max())"
    ]


def test_class_defined_in_a_function_is_rewritten_and_restored():
    class Local(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x - 1

    original = Local.forward
    with pytest.warns(RewrittenControlFlowWarning, match="Local.forward"):
        onx = fx2onnx.to_onnx(Local(), (torch.randn(2, 3),), dynamic_shapes=({0: "batch"},))
    assert Local.forward is original
    for x in [torch.rand(4, 3), -torch.rand(1, 3)]:
        np.testing.assert_allclose(_run(onx, x), Local()(x).numpy(), atol=1e-6)
