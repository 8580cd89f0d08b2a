"""A folder's layers are stamped only when the short model (two periods of layers) reads the checkpoint's weights
outside the layers as they are: a weight sized by the number of layers (Gemma 3n's per-layer embeddings) is not."""

from __future__ import annotations

import pytest
import torch

from fx2onnx.deploy.text_generation import _same_weights_outside
from fx2onnx.weights.repeat_layers import LayersNotRepeatable


class Stack(torch.nn.Module):
    def __init__(self, layers: int, per_layer: bool):
        super().__init__()
        self.embed = torch.nn.Embedding(8, 4 * (layers if per_layer else 1))
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(layers))


def test_a_weight_sized_by_the_layer_count_is_not_stamped():
    _same_weights_outside(Stack(2, per_layer=False), Stack(6, per_layer=False), "layers")
    with pytest.raises(LayersNotRepeatable, match=r"embed.weight has the shape \[8, 8\] with fewer layers"):
        _same_weights_outside(Stack(2, per_layer=True), Stack(6, per_layer=True), "layers")
