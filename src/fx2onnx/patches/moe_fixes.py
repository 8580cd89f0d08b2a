"""Mixture-of-experts layers of transformers made exportable.

transformers 5 runs the experts of a mixture-of-experts layer with a grouped
matrix multiplication (``experts_implementation="grouped_mm"``, the default):
the tokens sorted by expert, ``offs`` the cumulative number of tokens per
expert. On CPU and in float32, ``transformers.integrations.moe._grouped_mm``
calls the custom operator ``transformers::grouped_mm_fallback``, a Python loop
over ``offs.tolist()``: :func:`torch.export.export` keeps it as an opaque
operator no ONNX exporter knows.

The patch computes the same product with standard operators: the expert of
each row is the number of offsets at or below its index, each row is
multiplied by the weight of its expert (a gather then a batched matmul). The
result is the same for every number of tokens and every routing; a row beyond
the last offset (expert parallelism's sentinels) uses the last expert instead
of being left uninitialized.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Patch


def _make_grouped_mm(original: Any) -> Any:
    def _grouped_mm(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(input.shape[0], device=input.device, dtype=offs.dtype)
        expert = (rows.unsqueeze(1) >= offs.unsqueeze(0)).to(torch.int64).sum(dim=1)
        expert = expert.clamp(max=weight.shape[0] - 1)
        return torch.bmm(input.to(weight.dtype).unsqueeze(1), weight[expert]).squeeze(1)

    _grouped_mm.__wrapped__ = original  # type: ignore[attr-defined]
    return _grouped_mm


def moe_patches() -> list[Patch]:
    """The patches of the mixture-of-experts layers."""
    return [
        Patch(
            name="moe._grouped_mm",
            kind="transformers",
            target="transformers.integrations.moe._grouped_mm",
            make=_make_grouped_mm,
            expected_args=("input", "weight", "offs"),
            doc="experts' grouped matmul as a gather of each row's expert weight and a batched matmul "
            "(no transformers::grouped_mm_fallback custom op)",
        )
    ]
