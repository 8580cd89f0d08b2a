"""Example inputs of a decoder, an encoder or an encoder-decoder read from its configuration: token ids, masks,
positions and a cache of random keys and values, with their dynamic shapes.

The dimension names are ``batch``, ``seq`` (new tokens), ``past_seq`` (length of the cache), ``total_seq``
(``past_seq + seq``, the attention mask) and, for encoder-decoder models, ``encoder_seq``. Used by the tiny
models of :mod:`fx2onnx.zoo.tiny` and by the export of a folder.

.. code-block:: python

    import torch, transformers
    from fx2onnx.inputs.decoder import _decoder_inputs, _dynamic_shapes

    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, vocab_size=99)
    inputs = _decoder_inputs(config, 2, 3, 5, with_cache=True, position_ids=True,
                             generator=torch.Generator())
    print(_dynamic_shapes(inputs, config)["attention_mask"])  # {0: 'batch', 1: 'total_seq'}
"""

from __future__ import annotations

from typing import Any

import torch

from ..patches.caches import carries_token_count


def _vocab_size(config: Any) -> int:
    return int(config.vocab_size)


def _kv_shape(config: Any, batch: int, past: int) -> tuple[int, int, int, int]:
    text = config
    if hasattr(config, "get_text_config") and not hasattr(config, "decoder_attention_heads"):
        # (for BART, get_text_config returns a configuration with default values)
        text = config.get_text_config(decoder=True)
    heads = (
        getattr(text, "decoder_attention_heads", None)
        or getattr(text, "num_attention_heads", None)
        or text.n_head
    )
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    hidden = getattr(text, "d_model", None) or getattr(text, "hidden_size", None) or text.n_embd
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    return batch, kv_heads, past, head_dim


def _num_layers(config: Any) -> int:
    for name in ("decoder_layers", "num_hidden_layers", "n_layer"):
        if getattr(config, name, None):
            return int(getattr(config, name))
    raise ValueError(f"Cannot find the number of layers in {type(config).__name__}.")


def _random_ids(config: Any, batch: int, seq: int, generator: torch.Generator) -> torch.Tensor:
    """Random token ids [batch, seq] in [3, vocab_size)."""
    return torch.randint(3, _vocab_size(config), (batch, seq), generator=generator)


def _random_kv_pairs(
    config: Any, batch: int, length: int, generator: torch.Generator
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One random (key, value) pair of cache tensors per layer, ``length`` positions long."""
    shape = _kv_shape(config, batch, length)
    return [
        (torch.randn(shape, generator=generator), torch.randn(shape, generator=generator))
        for _ in range(_num_layers(config))
    ]


def _decoder_inputs(
    config: Any,
    batch: int,
    seq: int,
    past: int,
    *,
    with_cache: bool,
    position_ids: bool,
    generator: torch.Generator,
) -> dict[str, Any]:
    from transformers.cache_utils import DynamicCache  # deferred: transformers is heavy

    past = past if with_cache else 0
    inputs: dict[str, Any] = {
        "input_ids": _random_ids(config, batch, seq, generator),
        "attention_mask": torch.ones((batch, past + seq), dtype=torch.int64),
    }
    if position_ids:
        inputs["position_ids"] = (
            torch.arange(past, past + seq, dtype=torch.int64).expand(batch, -1).contiguous()
        )
    if with_cache:
        data = _random_kv_pairs(config, batch, past, generator)
        inputs["past_key_values"] = DynamicCache(data, config=config)
    return inputs


def _encoder_inputs(
    config: Any,
    batch: int,
    seq: int,
    past: int,
    *,
    with_cache: bool,
    position_ids: bool,
    generator: torch.Generator,
) -> dict[str, Any]:
    return {
        "input_ids": _random_ids(config, batch, seq, generator),
        "attention_mask": torch.ones((batch, seq), dtype=torch.int64),
        "token_type_ids": torch.zeros((batch, seq), dtype=torch.int64),
    }


def _encoder_decoder_inputs(
    config: Any,
    batch: int,
    seq: int,
    past: int,
    *,
    with_cache: bool,
    position_ids: bool,
    generator: torch.Generator,
) -> dict[str, Any]:
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    encoder_seq = seq + 2
    inputs: dict[str, Any] = {
        "input_ids": _random_ids(config, batch, encoder_seq, generator),
        "attention_mask": torch.ones((batch, encoder_seq), dtype=torch.int64),
        "decoder_input_ids": _random_ids(config, batch, seq, generator),
    }
    if with_cache:
        inputs["past_key_values"] = EncoderDecoderCache(
            DynamicCache(_random_kv_pairs(config, batch, past, generator)),
            DynamicCache(_random_kv_pairs(config, batch, encoder_seq, generator)),
        )
    return inputs


def _dynamic_shapes(inputs: dict[str, Any], config: Any) -> dict[str, Any]:
    with_cache = "past_key_values" in inputs
    if "decoder_input_ids" in inputs:
        return _encoder_decoder_dynamic_shapes(inputs, config)
    shapes: dict[str, Any] = {}
    for key in inputs:
        if key == "attention_mask":
            shapes[key] = {0: "batch", 1: "total_seq" if with_cache else "seq"}
        elif key == "past_key_values":
            kv = {0: "batch", 2: "past_seq"}
            shapes[key] = [dict(kv) for _ in range(2 * _num_layers(config))]
            if carries_token_count(inputs[key]):
                # sliding layers only: the count of tokens seen travels apart (patches.caches)
                shapes[key].append({1: "tokens_seen"})
        else:
            shapes[key] = {0: "batch", 1: "seq"}
    return shapes


def _encoder_decoder_dynamic_shapes(inputs: dict[str, Any], config: Any) -> dict[str, Any]:
    shapes: dict[str, Any] = {
        "input_ids": {0: "batch", 1: "encoder_seq"},
        "attention_mask": {0: "batch", 1: "encoder_seq"},
        "decoder_input_ids": {0: "batch", 1: "seq"},
    }
    if "past_key_values" in inputs:
        n = 2 * _num_layers(config)
        shapes["past_key_values"] = [
            [{0: "batch", 2: "past_seq"} for _ in range(n)],
            [{0: "batch", 2: "encoder_seq"} for _ in range(n)],
        ]
    return shapes
