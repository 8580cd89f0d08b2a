"""The chunked gated delta rules (Gated DeltaNet, Kimi delta attention) run as one scan of
their recurrent step: the same values as the chunks, one ONNX Scan for every length."""

from __future__ import annotations

import importlib

import numpy as np
import onnxruntime as ort
import pytest
import torch

pytest.importorskip("transformers")

from fx2onnx import to_onnx, torch_export_patches  # noqa: E402
from fx2onnx.patches.delta_rule import chunked_delta_rules  # noqa: E402

#: (modeling file, chunked function, decay per key channel)
RULES = [
    ("transformers.models.qwen3_next.modeling_qwen3_next", "torch_chunk_gated_delta_rule", False),
    ("transformers.models.kimi_linear.modeling_kimi_linear", "chunk_kimi_delta_attention", True),
]


def _inputs(seq: int, per_channel: bool, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """query, key (2 heads), value (4 heads: grouped, or 2 for Kimi), g, beta and a state."""
    g = torch.Generator().manual_seed(seed)
    batch, key_heads, dk, dv = 2, 2, 8, 6
    value_heads = key_heads if per_channel else 4
    query = torch.randn(batch, seq, key_heads, dk, generator=g)
    key = torch.randn(batch, seq, key_heads, dk, generator=g)
    value = torch.randn(batch, seq, value_heads, dv, generator=g)
    decay_shape = (batch, seq, value_heads, dk) if per_channel else (batch, seq, value_heads)
    log_decay = -torch.rand(*decay_shape, generator=g)
    beta = torch.rand(batch, seq, value_heads, generator=g)
    state = torch.randn(batch, value_heads, dk, dv, generator=g)
    return query, key, value, log_decay, beta, state


class _Rule(torch.nn.Module):
    def __init__(self, module: str, function: str):
        super().__init__()
        self.module, self.function = module, function

    def forward(self, query, key, value, g, beta, state):
        rule = getattr(importlib.import_module(self.module), self.function)
        return rule(query, key, value, g, beta, initial_state=state, output_final_state=True,
                    use_qk_l2norm_in_kernel=True)


def test_rules_found_by_their_signature():
    for module, function, _ in RULES:
        importlib.import_module(module)
    assert {(m, f) for m, f, _ in RULES} <= set(chunked_delta_rules())


@pytest.mark.parametrize(("seq", "with_state"), [(1, True), (70, False), (70, True)])
@pytest.mark.parametrize("rule", RULES, ids=["gated_deltanet", "kimi"])
def test_scan_is_the_chunked_rule(rule, seq, with_state):
    """One token from a state (a decoding step); 70 tokens: two chunks of 64, the second padded."""
    module, function, per_channel = rule
    chunked = getattr(importlib.import_module(module), function)
    query, key, value, g, beta, state = _inputs(seq, per_channel)
    state = state if with_state else None
    expected = chunked(query, key, value, g, beta, initial_state=state, output_final_state=True,
                       use_qk_l2norm_in_kernel=True)
    with torch_export_patches(patch_transformers=True) as context:
        patched = getattr(importlib.import_module(module), function)
        got = patched(query, key, value, g, beta, initial_state=state, output_final_state=True,
                      use_qk_l2norm_in_kernel=True)
    assert patched is not chunked
    assert any(r.status == "applied" and r.target.endswith(function) for r in context.reports)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("rule", [RULES[0], pytest.param(RULES[1], marks=pytest.mark.slow)],
                         ids=["gated_deltanet", "kimi"])
def test_one_scan_for_every_length(rule):
    """Exported with 5 tokens, the model runs 1 token (a decoding step) and 70."""
    module, function, per_channel = rule
    model = _Rule(module, function)
    seq = torch.export.Dim("seq", min=1, max=4096)
    batch = torch.export.Dim("batch", min=1, max=64)
    dynamic = ({0: batch, 1: seq},) * 5 + ({0: batch},)
    with torch_export_patches(patch_transformers=True), torch.no_grad():
        onx = to_onnx(model, _inputs(5, per_channel), dynamic_shapes=dynamic)
    assert [n.op_type for n in onx.graph.node].count("Scan") == 1
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    for length in (1, 70):
        inputs = _inputs(length, per_channel, seed=length)
        expected = model(*inputs)
        got = sess.run(None, {n: t.numpy() for n, t in zip(names, inputs)})
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b.numpy(), atol=2e-5, rtol=1e-4)
