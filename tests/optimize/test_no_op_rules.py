"""The optimizer removes ``x * 1`` and ``x + 0`` only when the constant is exactly neutral."""

from __future__ import annotations

import numpy as np
import torch

import fx2onnx
from fx2onnx.validation import run_onnx


class _NearlyNeutral(torch.nn.Module):
    def forward(self, x):
        return (x + 1e-9) * 1.000001, torch.sqrt(x * x + 1e-12) - 1e-7


class _Neutral(torch.nn.Module):
    def forward(self, x):
        return (x * 1.0 + 0.0) / 1.0 - 0.0


def test_nearly_neutral_constants_are_kept():
    model = _NearlyNeutral()
    x = torch.zeros(3, 4)
    onx = fx2onnx.to_onnx(model, (x,))
    got = run_onnx(onx, (x,))
    expected = model(x)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-6, atol=0)
    assert float(got[0].max()) > 0  # the 1e-9 survives


def test_exactly_neutral_constants_are_removed():
    model = _Neutral()
    x = torch.randn(3, 4)
    onx = fx2onnx.to_onnx(model, (x,))
    ops = [n.op_type for n in onx.graph.node]
    assert not {"Mul", "Add", "Div", "Sub"} & set(ops), ops
    np.testing.assert_allclose(run_onnx(onx, (x,))[0], model(x).numpy())


class _TwoClampChains(torch.nn.Module):
    def forward(self, x):
        return x.clamp_min(1.0).clamp_max(3.0) + x.clamp_min(2.0).clamp_max(5.0)


def test_two_fused_clips_on_one_input_give_a_valid_model():
    # onnxscript's rewriter leaves the bounds of the second fused Clip unregistered (x_min_1):
    # onnxruntime refused the model before fx2onnx registered them
    import onnx

    onx = fx2onnx.to_onnx(_TwoClampChains(), (torch.linspace(0, 6, 13),), dynamic_shapes=({0: "n"},))
    onnx.checker.check_model(onx, full_check=True)
    assert [n.op_type for n in onx.graph.node].count("Clip") == 2
    report = fx2onnx.validate(onx, _TwoClampChains(), (torch.linspace(-3, 9, 25),))
    assert report.ok, report


class _Masks(torch.nn.Module):
    """``m & True`` and ``m | False`` are ``m``; ``m & ones`` broadcast to a larger shape is not removed."""

    def forward(self, x):
        m = x > 0
        wide = torch.ones(2, *x.shape, dtype=torch.bool)
        return (m & torch.ones(1, 4, dtype=torch.bool)) | torch.zeros(1, dtype=torch.bool), m & wide


def test_neutral_boolean_constants_are_removed_without_changing_shapes():
    model = _Masks()
    x = torch.randn(3, 4)
    onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=({0: "n"},))
    ops = [n.op_type for n in onx.graph.node]
    assert ops.count("And") == 1 and "Or" not in ops, ops  # the broadcasting And stays
    report = fx2onnx.validate(onx, model, (torch.randn(5, 4),))
    assert report.ok, report
