"""A cache made only of sliding-window layers takes the dynamic shapes every other decoder
takes, one spec per key and value: the spec of its extra tensor ``tokens_seen`` is derived."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import fx2onnx  # noqa: E402
from fx2onnx.zoo import get_tiny_model  # noqa: E402
from fx2onnx.patches.caches import carries_token_count  # noqa: E402

WINDOW = 4


def _tiny(name: str):
    layers = 2
    overrides = dict(sliding_window=WINDOW)
    if name == "gemma3":
        overrides["layer_types"] = ["sliding_attention"] * layers
    return get_tiny_model(name, with_cache=True, num_hidden_layers=layers, **overrides)


def _inputs(config, batch: int, seq: int, past: int, seed: int) -> dict:
    """Inputs whose DynamicCache is built with the config (the sliding layers keep window - 1 positions)."""
    from transformers.cache_utils import DynamicCache

    g = torch.Generator().manual_seed(seed)
    shape = (batch, config.num_key_value_heads, past, config.head_dim)
    data = [(torch.randn(shape, generator=g), torch.randn(shape, generator=g)) for _ in range(config.num_hidden_layers)]
    return dict(
        input_ids=torch.randint(3, config.vocab_size, (batch, seq), generator=g),
        attention_mask=torch.ones(batch, past + seq, dtype=torch.int64),
        past_key_values=DynamicCache(data, config=config),
    )


def _spec(layers: int) -> dict:
    return {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total_seq"},
        "past_key_values": [{0: "batch", 2: "past"}] * (2 * layers),
    }


@pytest.mark.parametrize("name", [pytest.param("gemma3", marks=pytest.mark.slow), pytest.param("mistral", marks=pytest.mark.slow)])
def test_per_layer_spec_is_accepted(name):
    tiny = _tiny(name)
    config = tiny.config
    inputs = _inputs(config, 2, 3, 10, seed=1)
    assert carries_token_count(inputs["past_key_values"])
    onx = fx2onnx.to_onnx(tiny.model, (), inputs, dynamic_shapes=_spec(config.num_hidden_layers))
    # the count of tokens seen is an input with its own dynamic dimension
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in onx.graph.input}
    seen = [dims[k] for k in dims if "tokens_seen" in k]
    assert seen == [[0, "tokens_seen"]], dims
    # below and above the window, other batch and sequence lengths
    for batch, seq, past, seed in [(3, 2, 1, 2), (1, 4, 7, 3), (2, 1, 20, 4)]:
        report = fx2onnx.validate(onx, tiny.model, (), _inputs(config, batch, seq, past, seed), atol=1e-4)
        assert report.ok, (batch, seq, past, report)


def test_a_spec_really_wrong_is_refused():
    tiny = _tiny("gemma3")
    inputs = _inputs(tiny.config, 2, 3, 10, seed=1)
    ds = _spec(tiny.config.num_hidden_layers)
    ds["past_key_values"] = ds["past_key_values"][:-1]
    with pytest.raises(ValueError, match=r"list of 5 specs.*got 3.*tokens_seen.*derived"):
        fx2onnx.to_onnx(tiny.model, (), inputs, dynamic_shapes=ds)


def test_static_length_gives_a_static_count():
    from fx2onnx.convert.capture import _with_token_count_spec

    tiny = _tiny("mistral")
    cache = _inputs(tiny.config, 2, 3, 10, seed=1)["past_key_values"]
    with fx2onnx.torch_export_patches(patch_transformers=True):
        assert _with_token_count_spec(cache, [{0: "batch"}] * 4) == [{0: "batch"}] * 4 + [None]
        assert _with_token_count_spec(cache, [[None, None, "past", None]] * 4)[-1] == {1: "tokens_seen"}
