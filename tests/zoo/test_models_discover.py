"""Discovery: every text architecture of transformers' auto mappings gets a tiny configuration."""

from __future__ import annotations

import pytest

from fx2onnx.inputs.discover import (
    GENERIC_OVERRIDES,
    KINDS,
    discover_architectures,
    get_architecture,
    tiny_config,
)


@pytest.fixture(scope="module")
def architectures():
    return discover_architectures()


def test_counts(architectures):
    text = [a for a in architectures if not a.skip]
    assert len(architectures) >= 200
    assert len(text) >= 150
    kinds = {a.kind for a in text}
    assert kinds == set(KINDS)
    names = [a.name for a in architectures]
    assert len(names) == len(set(names))
    for name in ("llama", "mixtral", "mamba", "falcon", "gemma3_text", "bert", "t5"):
        assert name in names, name


def test_skipped_have_reasons(architectures):
    skipped = {a.name: a.skip for a in architectures if a.skip}
    assert "multimodal" in skipped["gemma3"]
    assert "gemma3_text" not in skipped
    assert all(isinstance(reason, str) and reason for reason in skipped.values())


def test_every_text_architecture_has_a_tiny_config(architectures):
    failures = {}
    for arch in architectures:
        if arch.skip:
            continue
        try:
            config = tiny_config(arch)
        except Exception as e:  # noqa: BLE001 - collected, asserted below
            failures[arch.name] = f"{type(e).__name__}: {e}"
            continue
        for key in ("hidden_size", "vocab_size"):
            if key in type(config).__dict__.get("attribute_map", {}) or key in config.__dict__:
                assert getattr(config, key) <= max(GENERIC_OVERRIDES[key], 1024), (arch.name, key)
    assert not failures, failures


def test_tiny_config_values():
    config = tiny_config(get_architecture("mistral"))
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 2, 4)
    assert config.num_key_value_heads == 2 and config.sliding_window == 8
    assert config.vocab_size == 1024
    # a hybrid keeps one layer of each kind
    hybrid = tiny_config(get_architecture("granitemoehybrid"))
    assert sorted(set(hybrid.layer_types)) == ["full_attention", "linear_attention"]


def test_unknown_architecture():
    with pytest.raises(ValueError, match="Unknown architecture 'not-a-model'"):
        get_architecture("not-a-model")
