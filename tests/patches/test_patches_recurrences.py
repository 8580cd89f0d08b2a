"""Recurrent layers whose Python loop over the sequence runs as one scan
(RWKV, RecurrentGemma, xLSTM, MiniMax with a cache)."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")

from fx2onnx import to_onnx, torch_export_patches  # noqa: E402
from fx2onnx.inputs.discover import get_architecture, tiny_model  # noqa: E402
from fx2onnx.zoo.zoo_inputs import build_zoo_model  # noqa: E402
from fx2onnx.patches.recurrences import wkv_scan  # noqa: E402
from fx2onnx.validation import validate  # noqa: E402


def _export_and_validate(zoo):
    """Exports the zoo model with its first input set; the second one (other batch, sequence
    and cache) matches eager."""
    with torch_export_patches(patch_transformers=True), torch.no_grad():
        onx = to_onnx(zoo.model, (), zoo.copy_inputs(0), dynamic_shapes=zoo.dynamic_shapes)
    assert validate(onx, zoo.model, (), zoo.copy_inputs(1), atol=1e-4).ok
    return onx


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("seq", [1, 5])
def test_wkv_scan_is_the_loop(with_state, seq):
    from transformers.models.rwkv.modeling_rwkv import rwkv_linear_attention_cpu

    g = torch.Generator().manual_seed(seq)
    batch, hidden = 2, 6
    decay, first = torch.randn(hidden, generator=g), torch.randn(hidden, generator=g)
    key, value = torch.randn(batch, seq, hidden, generator=g), torch.randn(batch, seq, hidden, generator=g)
    state = None
    if with_state:
        state = [torch.rand(batch, hidden, generator=g), torch.rand(batch, hidden, generator=g) + 1,
                 torch.randn(batch, hidden, generator=g)]
    expected, expected_state = rwkv_linear_attention_cpu(decay, first, key, value, state=state, return_state=True)
    got, got_state = wkv_scan(decay, first, key, value, state)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
    for a, b in zip(got_state, expected_state):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_rwkv_with_its_state_exports_with_a_dynamic_sequence():
    """Before the patch, torch.export unrolled the loop: the sequence length was specialized.
    Without a state, the scan starts from zeros (test_wkv_scan_is_the_loop)."""
    zoo = build_zoo_model(get_architecture("rwkv"), with_cache=True)
    assert "state" in zoo.inputs
    # other batch, sequence (and state): the second input set
    onx = _export_and_validate(zoo)
    assert any(n.op_type == "Scan" for n in onx.graph.node) or any(
        n.op_type == "Scan" for f in onx.functions for n in f.node
    )


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("seq", [1, 4])
def test_linear_recurrence_scan_is_the_loop(with_state, seq):
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import RecurrentGemmaRglru

    g = torch.Generator().manual_seed(seq)
    hidden = torch.randn(2, seq, 6, generator=g)
    gate = torch.rand(2, seq, 6, generator=g)
    reset = torch.rand(2, seq, 1, generator=g) < 0.3
    state = torch.randn(2, 6, generator=g) if with_state else None
    # the original: a Python loop, or a shortcut for one token
    expected = RecurrentGemmaRglru._rnn_scan(None, hidden, gate, reset, state)
    with torch_export_patches(patch_transformers=True):
        got = RecurrentGemmaRglru._rnn_scan(None, hidden, gate, reset, state)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_recurrent_gemma_exports_with_a_dynamic_sequence():
    zoo = build_zoo_model(get_architecture("recurrent_gemma"), with_cache=False)
    _export_and_validate(zoo)


@pytest.mark.parametrize("seq", [1, 5, 40])
def test_mlstm_scan_is_the_backend(seq):
    """Chunk size 16: 40 tokens go through two chunks then a loop of 8 steps in eager."""
    from transformers.models.xlstm.modeling_xlstm import xLSTMBackend

    _, config = tiny_model(get_architecture("xlstm"))
    assert config.chunk_size == 16 and "inference" in config.mode
    backend = xLSTMBackend(config)
    g = torch.Generator().manual_seed(seq)
    batch, heads, dqk, dhv = 2, 3, 4, 5
    q, k = torch.randn(batch, heads, seq, dqk, generator=g), torch.randn(batch, heads, seq, dqk, generator=g)
    v = torch.randn(batch, heads, seq, dhv, generator=g)
    i, f = torch.randn(batch, heads, seq, generator=g), torch.randn(batch, heads, seq, generator=g) + 2
    initial = (torch.randn(batch, heads, dqk, dhv, generator=g), torch.randn(batch, heads, dqk, generator=g),
               torch.randn(batch, heads, 1, generator=g))
    expected = backend(q, k, v, i, f, *initial)
    with torch_export_patches(patch_transformers=True):
        got = backend(q, k, v, i, f, *initial)
    torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=1e-5)
    for a, b in zip(got[1], expected[1]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_xlstm_exports_with_a_dynamic_sequence():
    zoo = build_zoo_model(get_architecture("xlstm"), with_cache=False)
    _export_and_validate(zoo)


@pytest.mark.slow
def test_minimax_with_a_cache_is_the_loop_and_exports():
    """MiniMax decodes token by token in a Python loop when its cache holds a state: the
    sequence length was specialized."""
    zoo = build_zoo_model(get_architecture("minimax"), with_cache=True)
    for seq in (1, 4):
        inputs = zoo.copy_inputs(1)
        inputs["input_ids"] = inputs["input_ids"][:, :seq]
        inputs["attention_mask"] = inputs["attention_mask"][:, : inputs["attention_mask"].shape[1] - 4 + seq]
        with torch.no_grad():
            expected = zoo.model(**copy.deepcopy(inputs)).logits
            with torch_export_patches(patch_transformers=True):
                got = zoo.model(**copy.deepcopy(inputs)).logits
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    _export_and_validate(zoo)
