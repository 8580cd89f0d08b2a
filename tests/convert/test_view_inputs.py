"""Example inputs which are views (slices, transposes, expands) or not contiguous (channels_last):
the capture copies the views (:func:`fx2onnx.convert.capture.without_views`), the exported model
matches eager on other shapes."""

from __future__ import annotations

import copy

import pytest
import torch

import fx2onnx
from fx2onnx.convert.capture import without_views


def _validate(onx, model, args=(), kwargs=None) -> None:
    report = fx2onnx.validate(onx, model, args, copy.deepcopy(kwargs or {}), atol=1e-4)
    assert report.ok, report


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, image, scale):
        return torch.relu(self.bn(self.conv(image))).mean((2, 3)) * scale


def _conv_inputs(batch: int, size: int, layout: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if layout == "channels_last":
        image = torch.randn(batch, 3, size, size, generator=g).to(memory_format=torch.channels_last)
    elif layout == "transposed":
        image = torch.randn(batch, 3, size, size, generator=g).transpose(2, 3)
    else:  # a slice along the batch and the width
        image = torch.randn(batch + 2, 3, size, size + 3, generator=g)[1 : batch + 1, :, :, 2 : size + 2]
    scale = torch.randn(4, batch, generator=g).t()  # a transposed view
    return image, scale


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "slice"])
def test_conv_model(layout):
    torch.manual_seed(0)
    model = ConvNet().eval()
    args = _conv_inputs(2, 8, layout, seed=0)
    ds = ({0: "batch", 2: "height", 3: "width"}, {0: "batch"})
    onx = fx2onnx.to_onnx(model, args, dynamic_shapes=ds)
    _validate(onx, model, args)
    _validate(onx, model, _conv_inputs(3, 10, layout, seed=1))


def _decoder_inputs(config, batch: int, seq: int, past: int, seed: int) -> dict:
    from transformers.cache_utils import DynamicCache

    g = torch.Generator().manual_seed(seed)
    heads, dim = config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    ids = torch.randint(3, config.vocab_size, (batch, seq + 4), generator=g)[:, :seq]  # a slice
    mask = torch.ones(past + seq, batch, dtype=torch.int64).t()  # a transpose
    layers = []
    for _ in range(config.num_hidden_layers):
        # the cache tensors are slices of a larger buffer, as a preallocated cache gives them
        buffer = torch.randn(2, batch, heads, past + 5, dim, generator=g)
        layers.append((buffer[0, :, :, :past], buffer[1, :, :, :past]))
    return {"input_ids": ids, "attention_mask": mask, "past_key_values": DynamicCache(layers, config=config)}


def _decoder(family: str):
    transformers = pytest.importorskip("transformers")
    common = dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    torch.manual_seed(0)
    if family == "mixtral":  # a mixture of experts: failed in run_decompositions on a slice of input_ids
        config = transformers.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2)
        return transformers.MixtralForCausalLM(config).eval()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common)).eval()


@pytest.mark.parametrize("family", [pytest.param("mixtral", marks=pytest.mark.slow), "llama"])
@pytest.mark.slow
def test_decoder_with_cache(family):
    model = _decoder(family)
    inputs = _decoder_inputs(model.config, 2, 3, 4, seed=0)
    assert inputs["input_ids"]._base is not None and not inputs["attention_mask"].is_contiguous()
    ds = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total_seq"},
        "past_key_values": [{0: "batch", 2: "past_seq"}] * (2 * model.config.num_hidden_layers),
    }
    # the inputs themselves (a deep copy of a view is no view)
    onx = fx2onnx.to_onnx(model, (), inputs, dynamic_shapes=ds)
    _validate(onx, model, (), _decoder_inputs(model.config, 2, 3, 4, seed=0))
    _validate(onx, model, (), _decoder_inputs(model.config, 3, 5, 6, seed=1))


def test_without_views_keeps_what_is_not_a_view():
    x, y = torch.randn(4, 6), torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    args, kwargs = (x, [y, 3]), {"z": None}
    assert without_views(args, kwargs) == (args, kwargs)  # no copy without a view
    base = torch.randn(4, 6)
    view = base.t()
    (copied, rest), _ = without_views((view, [y, 3]), {})
    assert copied._base is None and copied.stride() == view.stride() and torch.equal(copied, view)
    assert rest[0] is y and rest[1] == 3
