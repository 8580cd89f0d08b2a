"""A parameter a constructor makes outside the meta device although the model is built under
``torch.device("meta")`` (``torch.normal(mean, std, size=...)`` ignores the device context: DiffLlama's lambdas)
is read from the checkpoint when the model is exported from it: the export kept the constructor's random values
and DiffLlama's folder differed from eager by 12.7."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import safetensors.torch
import torch
import transformers

from fx2onnx.weights.export import model_from_config, to_onnx_from_checkpoint


class RandomScale(torch.nn.Module):
    """A linear layer scaled by a parameter drawn by ``torch.normal`` with a size, as DiffLlama draws its lambdas."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.scale = torch.nn.Parameter(torch.normal(0, 0.1, size=(4,)))

    def forward(self, x):
        return self.linear(x) * self.scale


def test_constructor_parameter_read_from_checkpoint(tmp_path):
    torch.manual_seed(0)
    trained = RandomScale()
    with torch.no_grad():
        trained.scale.copy_(torch.tensor([1.0, 2.0, -1.0, 0.5]))
    safetensors.torch.save_file(trained.state_dict(), str(tmp_path / "model.safetensors"))
    x = torch.randn(3, 4)
    expected = trained(x).detach().numpy()

    with torch.device("meta"):
        model = RandomScale()
    assert not model.scale.is_meta and model.linear.weight.is_meta  # the factory ignored the device context
    out = str(tmp_path / "model.onnx")
    to_onnx_from_checkpoint(str(tmp_path), (x,), filename=out, model=model)
    got = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_model_from_config_has_every_parameter_on_meta():
    config = transformers.DiffLlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                          num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    config.architectures = ["DiffLlamaForCausalLM"]
    model = model_from_config(config)
    assert [n for n, p in model.named_parameters() if not p.is_meta] == []
    assert model.model.layers[0].self_attn.lambda_q1.is_meta
