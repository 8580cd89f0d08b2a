"""Dtypes through the converters: float16, float64, int32, int64, bool inputs and outputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import Fn, check_export
from torch import nn


class MLP(nn.Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)
        self.approximate = approximate

    def forward(self, x):
        h = F.gelu(self.norm(self.fc1(x)), approximate=self.approximate)
        return F.softmax(self.fc2(h), dim=-1), h.mean(-1), h.sum(0)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        h = F.interpolate(h, scale_factor=2.0, mode="nearest")
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def _seeded(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for m in model.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    return model.eval()


# (dtype, atol, rtol)
FLOAT_DTYPES = {
    "float16": (torch.float16, 1e-2, 1e-2),
    "float64": (torch.float64, 1e-6, 1e-6),
    "float32": (torch.float32, 1e-4, 1e-3),
}


# onnxruntime's CPU provider has no double kernel for Erf and Conv: the float64
# MLP uses the tanh approximation of gelu and the float64 CNN is left out
MODELS = {
    "mlp": lambda dtype: MLP("tanh" if dtype == torch.float64 else "none"),
    "cnn": lambda dtype: CNN(),
}


@pytest.mark.parametrize(
    "model_name,dtype_name", [(m, d) for m in MODELS for d in FLOAT_DTYPES if (m, d) != ("cnn", "float64")]
)
def test_float_models(model_name, dtype_name):
    dtype, atol, rtol = FLOAT_DTYPES[dtype_name]
    model = _seeded(MODELS[model_name](dtype)).to(dtype)
    gen = torch.Generator().manual_seed(0)
    shape = (2, 8) if model_name == "mlp" else (2, 3, 8, 8)
    x, x2 = torch.randn(*shape, generator=gen).to(dtype), torch.randn(3, *shape[1:], generator=gen).to(dtype)
    check_export(model, (x,), dynamic_shapes=({0: "batch"},), inputs2=((x2,), None), atol=atol, rtol=rtol)


INT_CASES = {
    "embedding_ids": (
        lambda x: F.embedding(x, torch.arange(40.0).reshape(10, 4)),
        lambda: torch.randint(0, 10, (3, 4)),
    ),
    "arith_reductions": (
        lambda x: (x * 2 + 1, x.sum(1), x.argmax(1), x.cumsum(0), x.max(1)[0], x // 3, x % 3),
        lambda: torch.randint(-9, 9, (3, 4)),
    ),
    "comparisons_masks": (
        lambda x: (x > 2, (x == 1) | (x < 0), torch.where(x > 0, x, 0), x.masked_fill(x < 0, -1)),
        lambda: torch.randint(-5, 5, (3, 4)),
    ),
    "to_float": (
        lambda x: (x.float() / 3, x.to(torch.float16), torch.sigmoid(x.float())),
        lambda: torch.randint(-5, 5, (3, 4)),
    ),
}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("name", list(INT_CASES))
def test_integer_inputs(name, dtype):
    fn, make = INT_CASES[name]
    torch.manual_seed(0)
    x, x2 = make().to(dtype), make()[:2].to(dtype)
    check_export(Fn(fn), (x,), dynamic_shapes=({0: "batch"},), inputs2=((x2,), None), atol=1e-3)


def test_bool_inputs_and_outputs():
    class Masked(nn.Module):
        def forward(self, x, mask):
            scores = x.masked_fill(~mask, float("-inf"))
            return F.softmax(scores, -1), mask.any(-1), mask.sum(-1), mask.float().mean(), mask & (x > 0)

    gen = torch.Generator().manual_seed(0)
    x, mask = torch.randn(2, 5, generator=gen), torch.rand(2, 5, generator=gen) > 0.3
    mask[:, 0] = True
    x2, mask2 = torch.randn(4, 5, generator=gen), torch.rand(4, 5, generator=gen) > 0.3
    mask2[:, 0] = True
    check_export(Masked(), (x, mask), dynamic_shapes=({0: "b"}, {0: "b"}), inputs2=((x2, mask2), None))


def test_float16_elementwise_and_reductions():
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(0)).half()
    model = Fn(
        lambda x: (
            x.exp(),
            x.abs().sqrt(),
            x.sum(1),
            x.mean(),
            x.amax(1),
            F.log_softmax(x, 1),
            x.cumsum(1),
            x.var(1),
            x.topk(2)[0],
        )
    )
    check_export(model, (x,), atol=1e-2, rtol=1e-2)


def test_mixed_precision_inside_model():
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4).half()

        def forward(self, x):
            return self.fc(x.half()).float().softmax(-1)

    torch.manual_seed(0)
    check_export(Mixed().eval(), (torch.randn(2, 4),), atol=1e-2, rtol=1e-2)


def test_uint8_image_ops():
    img = torch.randint(0, 256, (1, 3, 6, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    model = Fn(
        lambda x: (
            F.interpolate(x, scale_factor=2),
            F.pad(x, (1, 1, 2, 0), value=7),
            x.flip(-1).float() / 255,
            x.max(),
            x.sum(1),
        )
    )
    check_export(model, (img,))
