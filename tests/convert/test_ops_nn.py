"""Converters of nn operators: linear, matmul, softmax, dropout, embedding."""

from __future__ import annotations

import torch
from helpers import check_export


def test_linear_relu_dynamic_batch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    check_export(model, (torch.randn(2, 4),), dynamic_shapes=({0: "batch"},), inputs2=((torch.randn(5, 4),), None))
