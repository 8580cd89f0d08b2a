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

LongCat-Flash's experts (``LongcatFlashExperts.forward``) still loop in Python
over the experts hit (``int(expert_idx_tensor.item())``): a data-dependent loop.
The patch computes every (token, chosen expert) pair at once, with the weights
of its expert gathered like above; the "zero-computation" experts (an index past
the routed ones) return the token unchanged, as in the original.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Patch, patch_if_imported


def _make_grouped_mm(original: Any) -> Any:
    def _grouped_mm(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(input.shape[0], device=input.device, dtype=offs.dtype)
        expert = (rows.unsqueeze(1) >= offs.unsqueeze(0)).to(torch.int64).sum(dim=1)
        expert = expert.clamp(max=weight.shape[0] - 1)
        return torch.bmm(input.to(weight.dtype).unsqueeze(1), weight[expert]).squeeze(1)

    _grouped_mm.__wrapped__ = original  # type: ignore[attr-defined]
    return _grouped_mm


def _make_longcat_experts_forward(original: Any) -> Any:
    def forward(self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        tokens, hidden = hidden_states.shape
        chosen = top_k_index.shape[-1]
        expert = top_k_index.reshape(-1)
        states = hidden_states.unsqueeze(1).expand(tokens, chosen, hidden).reshape(-1, hidden)
        if self.gate_up_proj is None:
            outputs = states
        else:
            routed = expert < self.num_routed_experts
            index = expert.clamp(max=self.num_routed_experts - 1)
            gate_up = torch.bmm(states.unsqueeze(1), self.gate_up_proj[index].transpose(1, 2)).squeeze(1)
            gate, up = gate_up.chunk(2, dim=-1)
            computed = torch.bmm((self.act_fn(gate) * up).unsqueeze(1), self.down_proj[index].transpose(1, 2))
            outputs = torch.where(routed.unsqueeze(1), computed.squeeze(1), states)
        weighted = outputs.reshape(tokens, chosen, hidden) * top_k_weights.unsqueeze(-1)
        return weighted.sum(dim=1).to(hidden_states.dtype)

    return forward


def moe_patches() -> list[Patch]:
    """The patches of the mixture-of-experts layers (and of the model modules imported so far)."""
    patches = [
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
    patches.extend(patch_if_imported(
        "transformers.models.longcat_flash.modeling_longcat_flash", "LongcatFlashExperts.forward",
        name="LongcatFlashExperts.forward",
        make=_make_longcat_experts_forward,
        expected_args=("self", "hidden_states", "top_k_index", "top_k_weights"),
        doc="every (token, chosen expert) pair computed at once, no Python loop over the experts hit",
    ))
    return patches
