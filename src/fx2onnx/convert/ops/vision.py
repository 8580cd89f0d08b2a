"""Vision layers: convolutions, pooling, batch/group/instance norms, upsampling, padding."""

from __future__ import annotations

import torch

from ..registry import converter  # noqa: F401

aten = torch.ops.aten
