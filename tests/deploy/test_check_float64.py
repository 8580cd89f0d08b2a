"""The folder check's second opinion from eager float64: a float32 export outside the float32 tolerance is accepted
when it is as close to eager float64 as eager float32 is (float32's own rounding), refused otherwise (a wrong
model is far from float64 whatever float32 does)."""

from __future__ import annotations

import onnx
import onnx.helper as oh
import pytest
import torch

from fx2onnx.deploy.check import REDUCED_PRECISION_FACTOR, check_against_eager

SHIFT = 1.0e4  # float32's spacing at 1e4 is about 1e-3: ten times the check's atol


class Cancel(torch.nn.Module):
    """``(x + SHIFT) - SHIFT``: exact in float64, float32 loses the low bits of a small ``x``."""

    def __init__(self, float32_only: bool = False):
        super().__init__()
        self.register_buffer("shift", torch.tensor(SHIFT))
        self.float32_only = float32_only

    def forward(self, x):
        if self.float32_only and x.dtype != torch.float32:
            raise TypeError("float32 only")
        return (x + self.shift) - self.shift


def _onnx(path: str, error: float = 0.0) -> str:
    """The same computation in float64 (the exact result rounded once), plus ``error``."""
    shift = oh.make_tensor("error", onnx.TensorProto.DOUBLE, [], [error])
    nodes = [oh.make_node("Cast", ["x"], ["x64"], to=onnx.TensorProto.DOUBLE),
             oh.make_node("Constant", [], ["error"], value=shift),
             oh.make_node("Add", ["x64", "error"], ["y64"]),
             oh.make_node("Cast", ["y64"], ["y"], to=onnx.TensorProto.FLOAT)]
    graph = oh.make_graph(nodes, "cancel", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 64])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 64])])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9), path)
    return path


@pytest.fixture(scope="module")
def inputs():
    return [{"x": torch.randn(2, 64, generator=torch.Generator().manual_seed(0)) * 1e-3}]


def test_float32_rounding_accepted(tmp_path, inputs):
    model = Cancel().eval()
    (check,) = check_against_eager(_onnx(str(tmp_path / "right.onnx")), model, inputs, torch.float32)
    assert check.ok, check
    assert max(check.onnx_diff) > 1e-4  # outside the float32 tolerance: the old check said MISMATCH
    assert max(check.float64_diff) < 1e-6 < max(check.eager32_float64_diff)
    assert "to eager float64" in str(check) and str(check).startswith("OK")
    assert model.shift.dtype == torch.float32  # the model is float32 again


def test_wrong_model_refused(tmp_path, inputs):
    (check,) = check_against_eager(_onnx(str(tmp_path / "wrong.onnx"), error=0.01), Cancel().eval(), inputs,
                                   torch.float32)
    assert not check.ok and str(check).startswith("MISMATCH")
    assert max(check.float64_diff) > REDUCED_PRECISION_FACTOR * max(check.eager32_float64_diff) + check.atol


def test_no_float64_keeps_the_float32_verdict(tmp_path, inputs):
    model = Cancel(float32_only=True).eval()
    (check,) = check_against_eager(_onnx(str(tmp_path / "right.onnx")), model, inputs, torch.float32)
    assert not check.ok and check.float64_diff == []
    assert model.shift.dtype == torch.float32


class CancelInFloat32(Cancel):
    """The same, its sum cast to float32 and back as an RMSNorm's code does (``x.to(torch.float32)``, ``.float()``)."""

    def forward(self, x):
        return ((x + self.shift).to(torch.float32) - self.shift.float()).to(x.dtype)


def test_float64_reference_keeps_float64_where_the_code_casts_to_float32(tmp_path, inputs):
    # with the model's casts kept, its "float64" run would round as eager float32 does: eager float32 would be at 0
    # from it and the right export (exact) refused
    (check,) = check_against_eager(_onnx(str(tmp_path / "right.onnx")), CancelInFloat32().eval(), inputs,
                                   torch.float32)
    assert check.ok, check
    assert max(check.float64_diff) < 1e-6 < max(check.eager32_float64_diff)
