"""The gated delta rule of linear-attention layers as one scan over the tokens.

Gated DeltaNet layers (Qwen3-Next, Qwen3.5, OLMo hybrid...) and Kimi delta attention keep a
state ``S`` of ``(batch, heads, key_dim, value_dim)`` updated at each token::

    S = S * exp(g)                       # g per head, or per key channel
    S = S + k (beta * (v - k^T S))^T     # the delta rule
    o = q^T S

Without the ``fla`` kernels, transformers computes a prompt by chunks of 64 tokens: in each
chunk a triangular system is solved by a Python loop of 63 row updates (always for Kimi,
while exporting for the others), then a Python loop runs over the chunks. Captured by
:func:`torch.export.export`, each layer unrolls into thousands of nodes (a capture of
minutes per layer), the number of chunks is frozen, and the explicit inverse built by the
row updates loses precision on ill-conditioned chunks (1e-4 on tiny random models).

The patch runs the recurrence itself, token by token, in one :func:`scan`: one node
whatever the length (an ONNX ``Scan``), the prompt and a decoding step in the same graph,
the state carried from a filled cache. It is the computation of transformers' own
recurrent form (``torch_recurrent_gated_delta_rule``, ``recurrent_kimi_delta_attention``),
equal to the chunked form up to rounding.

The functions are found by their signature, not by their name: every function of an
imported modeling file of transformers taking ``query, key, value, g, beta, chunk_size,
initial_state, output_final_state, use_qk_l2norm_in_kernel``. The queries and keys are
normalized by the modeling file's own ``l2norm`` (their formulas differ by family).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch

from .registry import Patch

#: the parameters of a chunked gated delta rule
CHUNKED_ARGS = (
    "query", "key", "value", "g", "beta", "chunk_size", "initial_state", "output_final_state",
    "use_qk_l2norm_in_kernel",
)


def _delta_step(state: torch.Tensor, x: Any) -> tuple[torch.Tensor, torch.Tensor]:
    query, key, value, decay, beta = x  # (batch, heads, dk), (.., dk), (.., dv), (.., dk or 1, 1), (.., 1)
    state = state * decay
    kv_mem = (state * key.unsqueeze(-1)).sum(dim=-2)
    delta = (value - kv_mem) * beta
    state = state + key.unsqueeze(-1) * delta.unsqueeze(-2)
    return state, (state * query.unsqueeze(-1)).sum(dim=-2)


def gated_delta_scan(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule over the sequence as one scan, in float32.

    :param query: ``(batch, seq, heads, dk)``, normalized and scaled; ``key`` the same
    :param value: ``(batch, seq, heads, dv)``
    :param g: the log decay, ``(batch, seq, heads)`` or per key channel ``(batch, seq, heads, dk)``
    :param beta: ``(batch, seq, heads)``
    :param initial_state: ``(batch, heads, dk, dv)`` or None (zeros)
    :return: the outputs ``(batch, seq, heads, dv)`` and the last state
    """
    from torch._higher_order_ops.scan import scan

    batch, _, heads, dk = key.shape
    dv = value.shape[-1]
    if initial_state is None:
        state = torch.zeros((batch, heads, dk, dv), dtype=torch.float32, device=value.device)
    else:
        state = initial_state.to(torch.float32).contiguous()
    decay = g.float().exp()
    decay = decay.unsqueeze(-1) if decay.dim() == 4 else decay[..., None, None]
    xs = (
        query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1),
        decay.transpose(0, 1), beta.float().unsqueeze(-1).transpose(0, 1),
    )
    last, outputs = scan(_delta_step, state, tuple(x.contiguous() for x in xs))
    return outputs.transpose(0, 1), last


def _module_l2norm(original: Any) -> Any:
    """The ``l2norm`` of the modeling file defining ``original`` (its decorator's wrapper lives
    elsewhere, its ``__module__`` is the modeling file's)."""
    return getattr(sys.modules.get(getattr(original, "__module__", ""), None), "l2norm", None)


def _make_chunked(original: Any) -> Any:
    l2norm = _module_l2norm(original)

    def chunk_gated_delta_rule(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        chunk_size: int = 64,
        initial_state: torch.Tensor | None = None,
        output_final_state: bool = False,
        use_qk_l2norm_in_kernel: bool = False,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        initial_dtype = query.dtype
        key_heads, value_heads = key.shape[2], value.shape[2]
        if key_heads != value_heads:
            # each query/key head serves consecutive value heads
            query = query.repeat_interleave(value_heads // key_heads, dim=2)
            key = key.repeat_interleave(value_heads // key_heads, dim=2)
        query, key, value = (x.to(torch.float32) for x in (query, key, value))
        if use_qk_l2norm_in_kernel:
            query = l2norm(query, dim=-1, eps=1e-6)
            key = l2norm(key, dim=-1, eps=1e-6)
        query = query * query.shape[-1] ** -0.5
        output, last = gated_delta_scan(query, key, value, g, beta, initial_state)
        return output.to(initial_dtype), (last if output_final_state else None)

    chunk_gated_delta_rule.__wrapped__ = original  # type: ignore[attr-defined]
    return chunk_gated_delta_rule


def _has_l2norm(original: Any) -> str | None:
    return None if callable(_module_l2norm(original)) else "no l2norm in its modeling file"


def chunked_delta_rules() -> list[tuple[str, str]]:
    """``(module, function)`` of every chunked gated delta rule in the imported modeling files."""
    found = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("transformers.models.") or ".modeling_" not in name or module is None:
            continue
        for attribute, value in list(vars(module).items()):
            if not inspect.isfunction(value) or value.__module__ != name:
                continue
            try:
                parameters = tuple(inspect.signature(value).parameters)
            except (TypeError, ValueError):
                continue
            if parameters[: len(CHUNKED_ARGS)] == CHUNKED_ARGS:
                found.append((name, attribute))
    return found


def delta_rule_patches() -> list[Patch]:
    """One patch per chunked gated delta rule of the modeling files already imported."""
    return [
        Patch(
            name=f"{module.rsplit('.', 1)[-1].removeprefix('modeling_')}.{function}",
            kind="transformers",
            target=f"{module}.{function}",
            make=_make_chunked,
            expected_args=CHUNKED_ARGS,
            guard=_has_l2norm,
            doc="the chunked gated delta rule (a Python loop solving each chunk's triangular system, "
            "a loop over the chunks) as one torch scan of its recurrent step (ONNX Scan): a short "
            "capture, a dynamic sequence, the state of a filled cache carried",
        )
        for module, function in chunked_delta_rules()
    ]
