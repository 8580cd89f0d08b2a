"""DPT (ViT backbone, 32x32 images, 8x8 patches) exported with a dynamic height and width: its position
embeddings are resized only when the number of patches differs from the configuration's, a branch
torch.export takes at the example's size. The export records the condition and warns; validate refuses
other sizes with it (onnxruntime's Reshape failed at 48x48 before anything said so)."""

from __future__ import annotations

import pytest
import torch

import fx2onnx
from fx2onnx.frozen import FrozenInputError, FrozenInputWarning

transformers = pytest.importorskip("transformers")

from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model  # noqa: E402


def test_dpt_dynamic_size_condition_is_said_and_refused():
    model, config = tiny_task_model(get_task_architecture("depth-estimation", "dpt"), patch_size=8)
    assert (config.image_size, config.patch_size) == (32, 8)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with pytest.warns(FrozenInputWarning, match=r"pixel_values.shape\[2\] // 8"):
        onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=({2: "height", 3: "width"},))
    other = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    report = fx2onnx.validate(onx, model, (other,))
    assert report.ok, report
    with pytest.raises(FrozenInputError, match=r"pixel_values.shape\[2\] = 48"):
        fx2onnx.validate(onx, model, (torch.randn(1, 3, 48, 48),))
