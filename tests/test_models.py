"""Tiny models: they run in eager and export with dynamic shapes."""

from __future__ import annotations

import copy

import pytest
import torch

from fx2onnx.zoo import TinyModel, export_dynamic_shapes, get_tiny_model, list_tiny_models
from fx2onnx.patches.caches import carries_token_count

REQUIRED = {"llama", "mistral", "qwen2", "phi", "phi3", "gemma", "gpt2", "bert", "bart"}


def test_list_tiny_models():
    names = list_tiny_models()
    assert REQUIRED <= set(names)


@pytest.mark.parametrize("name", list_tiny_models())
@pytest.mark.parametrize("with_cache", [False, True])
def test_eager(name, with_cache):
    if name == "bert" and with_cache:
        with pytest.raises(ValueError, match="encoder"):
            get_tiny_model(name, with_cache=True)
        return
    tiny = get_tiny_model(name, with_cache=with_cache)
    assert isinstance(tiny, TinyModel) and name in repr(tiny)
    assert not tiny.model.training
    assert set(tiny.dynamic_shapes) == set(tiny.inputs) == set(tiny.inputs2)
    ids = "decoder_input_ids" if "decoder_input_ids" in tiny.inputs else "input_ids"
    batch, seq = tiny.inputs[ids].shape
    batch2, seq2 = tiny.inputs2[ids].shape
    assert min(batch, seq) > 1 and batch != batch2 and seq != seq2
    with torch.no_grad():
        for inputs in (tiny.inputs, tiny.inputs2):
            out = tiny.model(**copy.deepcopy(inputs))
            logits = out[0]
            assert logits.shape[:2] == inputs[ids].shape
            assert torch.isfinite(logits).all()
    if with_cache:
        cache = tiny.inputs["past_key_values"]
        cache = getattr(cache, "self_attention_cache", cache)
        past = cache.layers[0].keys.shape[2]
        cache2 = tiny.inputs2["past_key_values"]
        cache2 = getattr(cache2, "self_attention_cache", cache2)
        assert past > 1 and past != cache2.layers[0].keys.shape[2]
        if ids == "input_ids":
            assert tiny.inputs["attention_mask"].shape[1] == past + seq
            # a cache of sliding layers only carries its count of tokens seen as one more tensor
            extra = int(carries_token_count(cache))
            assert len(tiny.dynamic_shapes["past_key_values"]) == 2 * len(cache.layers) + extra
        else:
            assert [len(s) for s in tiny.dynamic_shapes["past_key_values"]] == [2 * len(cache.layers)] * 2


def test_seeded():
    a = get_tiny_model("llama", seed=3)
    b = get_tiny_model("llama", seed=3)
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(pa, pb)
    torch.testing.assert_close(a.inputs["input_ids"], b.inputs["input_ids"])


def test_overrides_and_errors():
    tiny = get_tiny_model("llama", num_hidden_layers=2, hidden_size=64)
    assert tiny.config.num_hidden_layers == 2 and tiny.config.hidden_size == 64
    with pytest.raises(ValueError, match="Unknown tiny model"):
        get_tiny_model("not-a-model")


@pytest.mark.parametrize(
    "name", ["llama", *(pytest.param(name, marks=pytest.mark.slow) for name in ["phi", "gpt2", "bert", "bart"])]
)
def test_export_no_cache(name):
    tiny = get_tiny_model(name)
    ep = torch.export.export(
        tiny.model,
        (),
        kwargs=copy.deepcopy(tiny.inputs),
        dynamic_shapes=export_dynamic_shapes(tiny.dynamic_shapes),
        strict=False,
    )
    # the exported program runs on other sizes and matches eager
    with torch.no_grad():
        expected = tiny.model(**tiny.inputs2)[0]
        got = ep.module()(**tiny.inputs2)[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_first_line_keeps_the_first_item_of_an_announced_list():
    from fx2onnx.runner import first_line

    error = ValueError("Found the following conflicts:\n- Received Dim.DYNAMIC, but tracing inferred 3\n- other")
    assert first_line(error) == "ValueError: Found the following conflicts: - Received Dim.DYNAMIC, but tracing inferred 3"
    assert first_line(RuntimeError("plain\nsecond")) == "RuntimeError: plain"
    wrapped = RuntimeError("wrapper")
    wrapped.__cause__ = error
    assert first_line(wrapped).startswith("RuntimeError <- ValueError: Found the following conflicts: - Received")
