"""timm models with a dynamic image size: captures torch's constraint solver cannot solve."""

from __future__ import annotations

import pytest
import torch

import fx2onnx
from fx2onnx.validation import validate

pytest.importorskip("timm")


@pytest.mark.slow  # 29 s: the longest test of the fast tier
def test_cpubone_dynamic_image_size():
    """CPUBone pads by ``(-H) % 2`` after a stride of 16: sympy cannot solve the guard on the height
    (``NotImplementedError: The inequality ... cannot be solved``); to_onnx captures it size-oblivious."""
    from fx2onnx.zoo.timm_models import build_timm_model

    case = build_timm_model("cpubone_nano", shapes="image")
    assert case.dynamic_shapes == ({0: "batch", 2: "height", 3: "width"},)
    with pytest.raises(NotImplementedError, match="cannot be solved"):  # torch alone
        torch.export.export(case.model, (case.export_input,), dynamic_shapes=(
            {0: torch.export.Dim.DYNAMIC, 2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC},))
    with torch.no_grad():
        onx = fx2onnx.to_onnx(case.model, (case.export_input,), dynamic_shapes=case.dynamic_shapes)
    assert case.check_input.shape[2:] != case.export_input.shape[2:]
    with torch.no_grad():
        report = validate(onx, case.model, (case.check_input,))
    assert report.ok, report
