"""to_onnx checks the capture: the exported program against eager on the example inputs."""

from __future__ import annotations

import warnings

import pytest
import torch

import fx2onnx
from fx2onnx.convert.capture_check import CaptureMismatchError, CaptureMismatchWarning, check_capture


class Block(torch.nn.Module):
    """Takes another path while torch.export traces it (what some libraries do)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        if torch.compiler.is_exporting():
            return y * 0.5
        return y


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.before = torch.nn.Linear(4, 4)
        self.block = Block()
        self.after = torch.nn.Linear(4, 3)

    def forward(self, x):
        return {"hidden": self.block(torch.relu(self.before(x))), "scores": self.after(x)}


def _model() -> Model:
    torch.manual_seed(0)
    return Model().eval()


def test_a_wrong_capture_raises_naming_output_and_submodule():
    x = torch.randn(3, 4)
    with pytest.raises(CaptureMismatchError) as info:
        fx2onnx.to_onnx(_model(), (x,), dynamic_shapes=({0: "batch"},))
    message = str(info.value)
    assert "1 of 2 output(s) differ" in message
    assert "['hidden']" in message and "['scores']" not in message
    assert "'block' (Block)" in message, message
    assert "check_capture='warn'" in message


def test_warn_exports_the_faithful_program():
    model, x = _model(), torch.randn(3, 4)
    with pytest.warns(CaptureMismatchWarning, match="'block' \\(Block\\)"):
        onx = fx2onnx.to_onnx(model, (x,), check_capture="warn")
    report = fx2onnx.validate(onx, model, (x,))
    assert not report.ok  # the ONNX model holds the program's computation, as the warning said


def test_no_check_no_error():
    with warnings.catch_warnings():
        warnings.simplefilter("error", CaptureMismatchWarning)
        fx2onnx.to_onnx(_model(), (torch.randn(3, 4),), check_capture=False)


def test_bad_option():
    with pytest.raises(ValueError, match="check_capture must be"):
        fx2onnx.to_onnx(_model(), (torch.randn(3, 4),), check_capture="yes")


class Counter(torch.nn.Module):
    """A buffer the forward mutates: the check leaves it as it was."""

    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(1))
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        self.steps.add_(1)
        return self.linear(x) + self.steps


def test_mutated_buffers_are_restored_and_the_check_passes():
    model, x = Counter().eval(), torch.randn(2, 4)
    onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=({0: "batch"},))
    assert model.steps.item() == 0
    # the ONNX model has no state: it computes the first call's output
    expected = model.linear(torch.randn(5, 4))
    assert expected.shape == (5, 2) and onx is not None


class Noisy(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)


def test_random_programs_are_not_checked():
    ep = torch.export.export(Noisy(), (torch.randn(2, 3),))
    assert check_capture(ep, Noisy(), (torch.randn(2, 3),), {}) is None
    fx2onnx.to_onnx(Noisy(), (torch.randn(2, 3),))  # no error although two runs differ


def test_meta_weights_are_not_checked():
    with torch.device("meta"):
        model = torch.nn.Linear(4, 2)
    x = torch.randn(2, 4, device="meta")
    ep = torch.export.export(model, (x,))
    assert check_capture(ep, model, (x,), {}) is None


def test_a_right_capture_passes():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.LayerNorm(8)).eval()
    x = torch.randn(3, 4)
    ep = torch.export.export(model, (x,))
    result = check_capture(ep, model, (x,), {})
    assert result is not None and result.ok and result.max_abs < 1e-5


def test_a_module_given_as_input_is_checked():
    """A module in the inputs flattens into its weights for the program, as during the capture
    (the check raised 'Unexpected number of inputs (expected 3, got 2)')."""

    class ApplyLayer(torch.nn.Module):
        def forward(self, x, layer):
            return layer(x).relu()

    x, layer = torch.randn(2, 4), torch.nn.Linear(4, 3)
    ep = torch.export.export(ApplyLayer(), (x, layer), strict=False)
    result = check_capture(ep, ApplyLayer(), (x, layer), {})
    assert result is not None and result.ok
    assert not any(cls is torch.nn.Linear for cls in torch.utils._pytree.SUPPORTED_NODES)  # registration undone
    onx = fx2onnx.to_onnx(ApplyLayer(), (x, layer))
    assert [i.name for i in onx.graph.input] == ["x", "layer_weight", "layer_bias"]


class _AssertedOnlyInTheProgram(torch.nn.Module):
    """The program carries a runtime assertion the example inputs fail (``u0 >= 2``), eager none."""

    def forward(self, x):
        count = (x > 0).sum().item()
        if torch.compiler.is_exporting():
            torch._check(count >= 2)
        return x * 2 + count


class _RaisesInEager(torch.nn.Module):
    def forward(self, x):
        if not torch.compiler.is_exporting():
            raise RuntimeError("this model runs under torch.export only")
        return x.cos() + 1


@torch.library.custom_op("fx2onnx_capture_check::failing_kernel", mutates_args=())
def _failing_kernel(x: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError("the kernel failed on this machine")


@_failing_kernel.register_fake
def _failing_kernel_fake(x):
    return torch.empty_like(x)


class _KernelFails(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting():
            return torch.ops.fx2onnx_capture_check.failing_kernel(x)
        return x.abs()


def test_a_runtime_assertion_of_the_program_ends_in_one_warning():
    """torch.export's runtime assertion fails on the example inputs: one warning, the ONNX model written and right."""
    x = torch.tensor([1.0, -2.0, -3.0])  # one positive value: the program's assertion count >= 2 fails
    with pytest.warns(fx2onnx.convert.capture_check.CaptureNotCheckedWarning,
                      match="captured program raised.*Runtime assertion failed") as record:
        onx = fx2onnx.to_onnx(_AssertedOnlyInTheProgram(), (x,))
    assert len([w for w in record if "not checked" in str(w.message)]) == 1
    other = torch.tensor([1.0, 2.0, -3.0])
    assert fx2onnx.validate(onx, _AssertedOnlyInTheProgram(), (other,)).ok


def test_eager_raising_ends_in_one_warning():
    x = torch.randn(3, 4)
    with pytest.warns(fx2onnx.convert.capture_check.CaptureNotCheckedWarning, match="raised in eager mode"):
        onx = fx2onnx.to_onnx(_RaisesInEager(), (x,))
    from fx2onnx.validation import run_onnx

    torch.testing.assert_close(torch.from_numpy(run_onnx(onx, (x,))[0]), x.cos() + 1)


def test_a_failing_kernel_ends_in_one_warning():
    x = torch.randn(3, 4)
    dispatcher = fx2onnx.Dispatcher({"fx2onnx_capture_check::failing_kernel": lambda ctx, node, x: ctx.op.Abs(x)})
    with pytest.warns(fx2onnx.convert.capture_check.CaptureNotCheckedWarning, match="NotImplementedError"):
        onx = fx2onnx.to_onnx(_KernelFails(), (x,), dispatcher=dispatcher)
    assert fx2onnx.validate(onx, _KernelFails(), (x,)).ok
