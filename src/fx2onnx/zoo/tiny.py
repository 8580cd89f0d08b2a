"""Tiny transformers models built from configs in code, with inputs and dynamic shapes.

No model hub, no download: every model is built from a small configuration
(hidden size 32-64, 2-4 heads, a small vocabulary, one layer by default) with
seeded random weights. Each comes with two sets of inputs of different sizes
and the dynamic shapes to give to :func:`torch.export.export`.

.. code-block:: python

    import torch
    from fx2onnx.zoo import export_dynamic_shapes, get_tiny_model

    tiny = get_tiny_model("llama")
    expected = tiny.model(**tiny.inputs)
    ep = torch.export.export(
        tiny.model,
        (),
        kwargs=tiny.inputs,
        dynamic_shapes=export_dynamic_shapes(tiny.dynamic_shapes),
        strict=False,
    )

The dimension names are ``batch``, ``seq`` (new tokens), ``past_seq`` (length of
the cache), ``total_seq`` (``past_seq + seq``, the attention mask) and, for
encoder-decoder models, ``encoder_seq``. A cache input (``with_cache=True``) is a
:class:`transformers.cache_utils.DynamicCache` (an ``EncoderDecoderCache`` of two
of them for encoder-decoder models); its dynamic shapes are a list ``[key_0,
value_0, key_1, value_1, ...]`` (a pair of such lists), the flattening order
used by :func:`fx2onnx.register_cache_serialization`, followed by
``{1: "tokens_seen"}`` for a cache made only of sliding-window layers (its count
of tokens seen, see :func:`fx2onnx.patches.caches.carries_token_count`).

A forward pass updates a cache in place: give a copy
(``copy.deepcopy(tiny.inputs)``) to the model when the inputs are used again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from ..inputs.decoder import (  # noqa: F401 (importable from here)
    _decoder_inputs,
    _dynamic_shapes,
    _encoder_decoder_dynamic_shapes,
    _encoder_decoder_inputs,
    _encoder_inputs,
    _kv_shape,
    _num_layers,
    _random_ids,
    _random_kv_pairs,
    _vocab_size,
)


@dataclasses.dataclass
class TinyModel:
    """A tiny model, two sets of inputs and the dynamic shapes for torch.export."""

    model: torch.nn.Module
    inputs: dict[str, Any]
    inputs2: dict[str, Any]
    dynamic_shapes: dict[str, Any]
    config: Any
    name: str = ""

    def __repr__(self) -> str:
        return (
            f"TinyModel(name={self.name!r}, model={type(self.model).__name__}, "
            f"inputs={_describe(self.inputs)}, inputs2={_describe(self.inputs2)})"
        )


@dataclasses.dataclass(frozen=True)
class _Spec:
    config_class: str
    model_class: str
    kind: str  # "decoder", "encoder" or "encoder-decoder"
    config: dict[str, Any]
    position_ids: bool = True


_DECODER = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)

_SPECS: dict[str, _Spec] = {
    "llama": _Spec("LlamaConfig", "LlamaForCausalLM", "decoder", dict(_DECODER)),
    "mistral": _Spec("MistralConfig", "MistralForCausalLM", "decoder", dict(_DECODER, sliding_window=None)),
    "qwen2": _Spec("Qwen2Config", "Qwen2ForCausalLM", "decoder", dict(_DECODER)),
    "qwen3": _Spec("Qwen3Config", "Qwen3ForCausalLM", "decoder", dict(_DECODER, head_dim=8)),
    "phi": _Spec("PhiConfig", "PhiForCausalLM", "decoder", dict(_DECODER, partial_rotary_factor=0.5)),
    "phi3": _Spec("Phi3Config", "Phi3ForCausalLM", "decoder", dict(_DECODER, sliding_window=None)),
    "gemma": _Spec("GemmaConfig", "GemmaForCausalLM", "decoder", dict(_DECODER, head_dim=8)),
    "gemma2": _Spec(
        "Gemma2Config", "Gemma2ForCausalLM", "decoder", dict(_DECODER, head_dim=8, sliding_window=32)
    ),
    "gemma3": _Spec(
        "Gemma3TextConfig", "Gemma3ForCausalLM", "decoder", dict(_DECODER, head_dim=8, sliding_window=32)
    ),
    "olmo": _Spec("OlmoConfig", "OlmoForCausalLM", "decoder", dict(_DECODER)),
    "granite": _Spec("GraniteConfig", "GraniteForCausalLM", "decoder", dict(_DECODER)),
    "smollm3": _Spec("SmolLM3Config", "SmolLM3ForCausalLM", "decoder", dict(_DECODER)),
    "gpt2": _Spec(
        "GPT2Config",
        "GPT2LMHeadModel",
        "decoder",
        dict(vocab_size=128, n_embd=32, n_layer=1, n_head=4, n_positions=256, bos_token_id=1, eos_token_id=2),
    ),
    "bart": _Spec(
        "BartConfig",
        "BartForConditionalGeneration",
        "encoder-decoder",
        dict(
            vocab_size=128,
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=256,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=2,
        ),
        position_ids=False,
    ),
    "bert": _Spec(
        "BertConfig",
        "BertModel",
        "encoder",
        dict(
            vocab_size=128,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            max_position_embeddings=256,
            pad_token_id=0,
        ),
        position_ids=False,
    ),
}

# sizes of the two sets of inputs: (batch, seq, past_seq); none is 0 or 1 so that
# torch.export does not specialize them
_SIZES = ((2, 3, 5), (3, 4, 7))


def list_tiny_models() -> list[str]:
    """Returns the names :func:`get_tiny_model` accepts (those the installed transformers has)."""
    import transformers

    return sorted(
        name
        for name, spec in _SPECS.items()
        if hasattr(transformers, spec.config_class) and hasattr(transformers, spec.model_class)
    )


def get_tiny_model(
    name: str,
    *,
    with_cache: bool = False,
    num_hidden_layers: int = 1,
    attn_implementation: str = "eager",
    seed: int = 0,
    **config_overrides: Any,
) -> TinyModel:
    """Builds a tiny model with random weights, its inputs and dynamic shapes.

    :param name: one of :func:`list_tiny_models` (``"llama"``, ``"phi3"``, ``"bert"``...)
    :param with_cache: adds a ``past_key_values`` input (a ``DynamicCache`` of
        past length > 0) for decoder models
    :param num_hidden_layers: number of layers
    :param attn_implementation: ``"eager"`` or ``"sdpa"``
    :param seed: seed of the weights and of the inputs
    :param config_overrides: other configuration values
    :return: a :class:`TinyModel`

    .. code-block:: python

        tiny = get_tiny_model("phi3", with_cache=True, num_hidden_layers=2)
        print(tiny)
    """
    import transformers

    if name not in _SPECS:
        raise ValueError(f"Unknown tiny model {name!r}, choose one of {sorted(_SPECS)}.")
    spec = _SPECS[name]
    config_class = getattr(transformers, spec.config_class, None)
    model_class = getattr(transformers, spec.model_class, None)
    if config_class is None or model_class is None:
        raise ValueError(
            f"Tiny model {name!r} needs transformers.{spec.config_class} and "
            f"transformers.{spec.model_class}, missing from transformers {transformers.__version__}; "
            f"choose one of {list_tiny_models()}."
        )
    if with_cache and spec.kind == "encoder":
        raise ValueError(f"Tiny model {name!r} is an encoder: it has no cache, use with_cache=False.")

    kwargs = dict(spec.config)
    if "n_layer" in kwargs:
        kwargs["n_layer"] = num_hidden_layers
    elif "decoder_layers" in kwargs:
        kwargs["encoder_layers"] = kwargs["decoder_layers"] = num_hidden_layers
    else:
        kwargs["num_hidden_layers"] = num_hidden_layers
    kwargs.update(config_overrides)
    config = config_class(**kwargs)
    config._attn_implementation = attn_implementation
    config.use_cache = with_cache

    torch.manual_seed(seed)
    model = model_class(config).eval()

    generator = torch.Generator().manual_seed(seed + 1)
    make: Callable[..., dict[str, Any]] = {
        "decoder": _decoder_inputs,
        "encoder": _encoder_inputs,
        "encoder-decoder": _encoder_decoder_inputs,
    }[spec.kind]
    inputs = make(
        config, *_SIZES[0], with_cache=with_cache, position_ids=spec.position_ids, generator=generator
    )
    inputs2 = make(
        config, *_SIZES[1], with_cache=with_cache, position_ids=spec.position_ids, generator=generator
    )
    dynamic_shapes = _dynamic_shapes(inputs, config)
    return TinyModel(model, inputs, inputs2, dynamic_shapes, config, name=name)


def export_dynamic_shapes(dynamic_shapes: Any) -> Any:
    """Replaces the dimension names (strings) by ``torch.export.Dim.DYNAMIC``.

    :func:`torch.export.export` does not take strings; :func:`torch.onnx.export`
    and :func:`fx2onnx.to_onnx` do (and keep the names in the ONNX model).

    .. code-block:: python

        ds = export_dynamic_shapes({"input_ids": {0: "batch", 1: "seq"}})
        # {"input_ids": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}}
    """
    if isinstance(dynamic_shapes, str):
        return torch.export.Dim.DYNAMIC
    if isinstance(dynamic_shapes, dict):
        return {k: export_dynamic_shapes(v) for k, v in dynamic_shapes.items()}
    if isinstance(dynamic_shapes, (list, tuple)):
        return type(dynamic_shapes)(export_dynamic_shapes(v) for v in dynamic_shapes)
    return dynamic_shapes


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return f"T{list(value.shape)}"
    if isinstance(value, dict):
        return {k: _describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_describe(v) for v in value)
    if hasattr(value, "self_attention_cache"):
        return f"{type(value).__name__}({_describe(value.self_attention_cache)}, {_describe(value.cross_attention_cache)})"
    if hasattr(value, "layers"):
        return (
            f"{type(value).__name__}[" + ", ".join(f"{_describe(layer.keys)}" for layer in value.layers) + "]"
        )
    return type(value).__name__
