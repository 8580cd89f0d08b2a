"""Indexing operators: index, index_put, gather, scatter, masked_fill, *_scatter, nonzero."""

from __future__ import annotations

import torch

from ..registry import converter  # noqa: F401

aten = torch.ops.aten
