"""A persistent buffer of a model built outside the meta device (a frozen batch norm's weight: DETR's backbone) is
read from the checkpoint when the model is exported from it, as transformers' ``from_pretrained`` does: its
initialization (timm zeroes the last norm of each block) would otherwise give a wrong model."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import safetensors.torch
import torch

from fx2onnx.weights.empty import parameters_on_meta
from fx2onnx.weights.export import read_checkpoint_buffers, to_onnx_from_checkpoint


class FrozenNorm(torch.nn.Module):
    """A linear layer, then a scale and shift held as buffers (a frozen batch norm)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("weight", torch.zeros(4))  # the initialization: zero
        self.register_buffer("bias", torch.zeros(4))
        self.register_buffer("steps", torch.arange(4.0), persistent=False)  # computed, never in a checkpoint

    def forward(self, x):
        return self.linear(x) * self.weight + self.bias + self.steps


def test_persistent_buffers_read_from_checkpoint(tmp_path):
    torch.manual_seed(0)
    trained = FrozenNorm()
    with torch.no_grad():
        trained.weight.copy_(torch.tensor([1.0, 2.0, -1.0, 0.5]))
        trained.bias.copy_(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    safetensors.torch.save_file(trained.state_dict(), str(tmp_path / "model.safetensors"))
    x = torch.randn(3, 4)
    expected = trained(x).detach().numpy()

    with parameters_on_meta():
        model = FrozenNorm()
    assert float(model.weight.abs().sum()) == 0.0  # the buffers of the initialization
    out = str(tmp_path / "model.onnx")
    to_onnx_from_checkpoint(str(tmp_path), (x,), filename=out, model=model)
    got = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, expected, atol=1e-6)
    # a buffer the checkpoint does not hold keeps its computed value, no error
    with parameters_on_meta():
        other = FrozenNorm()
    assert read_checkpoint_buffers(str(tmp_path), other, []) == ["bias", "weight"]
    assert other.steps.tolist() == [0.0, 1.0, 2.0, 3.0]
