"""A tiny configuration for every text architecture of transformers' auto mappings.

The architectures come from transformers itself, not from a hand list: every
model type of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` (decoders, mixtures of
experts, state-space models, hybrids), then those only found in
``MODEL_FOR_MASKED_LM_MAPPING_NAMES`` (encoders) and
``MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES`` (encoder-decoders). A
multimodal or non-text architecture is kept with the reason it is skipped.

Each configuration is the default one of its class with generic overrides
(:data:`GENERIC_OVERRIDES`: hidden size 64, 2 layers, 4 heads, 2 key-value
heads, head dimension 16, vocabulary 1024, sliding window 8, experts and
state-space sizes scaled down), applied only to the attributes the class has;
:data:`ARCHITECTURE_OVERRIDES` holds the few per-architecture fixes.

.. code-block:: python

    from fx2onnx.inputs.discover import discover_architectures, tiny_config

    archs = discover_architectures()
    llama = next(a for a in archs if a.name == "llama")
    config = tiny_config(llama)
    model = llama.model_class()(config)
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: the three kinds of architecture, in the order mappings are read
KINDS = ("causal", "masked", "seq2seq")

#: value given to every attribute of that name a configuration has
GENERIC_OVERRIDES: dict[str, Any] = {
    # sizes
    "vocab_size": 1024,
    "hidden_size": 64,
    "d_model": 64,
    "n_embd": 64,
    "dim": 64,
    "embed_dim": 64,
    "embedding_size": 64,
    "intermediate_size": 128,
    "ffn_dim": 128,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "d_ff": 128,
    "n_inner": 128,
    "hidden_dim": 128,
    "head_dim": 16,
    "d_kv": 16,
    "kv_channels": 16,
    "rotary_dim": 8,
    # embeddings beside the tokens
    "entity_vocab_size": 64,
    "vocab_size_per_layer_input": 1024,
    "hidden_size_per_layer_input": 16,
    "num_kv_shared_layers": 0,
    "pronunciation_vocab_size": 64,
    "shape_vocab_size": 64,
    "num_latents": 16,
    "d_latents": 64,
    # layers and heads
    "num_hidden_layers": 2,
    "num_layers": 2,
    "n_layer": 2,
    "n_layers": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "num_decoder_layers": 2,
    "num_attention_heads": 4,
    "n_head": 4,
    "n_heads": 4,
    "num_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "num_key_value_heads": 2,
    "n_kv_heads": 2,
    "multi_query_group_num": 2,
    # positions
    "max_position_embeddings": 128,
    "n_positions": 128,
    "n_ctx": 128,
    "max_seq_len": 128,
    "sliding_window": 8,
    "attention_window": 8,
    # mixtures of experts
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    # multi-head latent attention
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    # state-space layers
    "state_size": 8,
    "ssm_state_size": 8,
    "mamba_d_state": 8,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_n_heads": 8,
    "mamba_d_head": 16,
    "mamba_d_ssm": 128,
    "mamba_n_groups": 1,
    "mamba_chunk_size": 16,
    "chunk_size": 16,
    "time_step_rank": 8,
    "conv_kernel": 4,
    "n_groups": 1,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
}

#: model type -> values replacing the generic ones (only where a configuration needs it)
ARCHITECTURE_OVERRIDES: dict[str, dict[str, Any]] = {
    # heads x head_dim must be expand x hidden
    "mamba2": dict(num_heads=8),
    # an attention layer and an expert layer among the two layers
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"]),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=8),
    # no grouped-query attention in these
    "dots3_note_text": dict(num_key_value_heads=4),
    "esmc": dict(num_key_value_heads=4),
    "zaya": dict(num_experts_per_tok=1),
    # the default configuration has no rotary parameters for its layer type
    # hybrids: one attention layer among the two
    "bamba": dict(attn_layer_indices=[1]),
    "granitemoehybrid": dict(layer_types=["linear_attention", "full_attention"]),
    "recurrent_gemma": dict(block_types=["recurrent", "attention"], attention_window_size=8),
    # the shared transformer is tied between hybrid layers: two of them at least (its layer types from the period,
    # not the generic shortening of the default's 76, which left 2 types for 4 layers and the tiny values refused)
    "zamba": dict(attn_layer_period=1, attn_layer_offset=0, num_hidden_layers=4, layers_block_type=...),
    "zamba2": dict(hybrid_layer_ids=[1]),
    # its cache sizes the query/key states with the hidden size times qk_dim_factor rounded up to 64, its layers
    # without rounding: the two agree where that product is a multiple of 64 (hidden 64: a factor of 1)
    "xlstm": dict(num_blocks=2, qk_dim_factor=1.0),
    # two blocks of one layer (one pooling): three poolings leave too few positions for its class mask
    "funnel": dict(block_sizes=[1, 1]),
    "reformer": dict(axial_pos_embds_dim=[32, 32], axial_pos_shape=[8, 16], attn_layers=["local", "lsh"]),
    # sliding_window is set per layer there
    "neomme": dict(sliding_window=...),
    "cohere_compass_text": dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
}

#: model type -> why it is not run although it is a text model
UNBUILDABLE: dict[str, str] = {
    "qwen4_exp_text": "the default configuration leaves token_budget and compress_ratio of its indexer unset",
    "xmod": "the model needs a language chosen with set_default_language() before a forward pass",
}

#: names of sub-configurations which make an architecture multimodal
_NON_TEXT_SUBCONFIGS = ("vision_config", "audio_config", "speech_config", "image_config", "video_config",
                        "vq_config", "encoder_config", "depth_decoder_config", "audio_encoder_config")


class TransformersClasses:
    """The configuration and model classes of a model type ``name`` with a ``model_class_name``."""

    #: the model type (``llama``), the key of transformers' configuration mapping
    name: str
    #: the name of the model class in transformers (``LlamaForCausalLM``)
    model_class_name: str

    def config_class(self) -> type:
        """The configuration class (imported from transformers)."""
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return CONFIG_MAPPING[self.name]

    def model_class(self) -> type:
        """The model class (imported from transformers)."""
        import transformers

        return getattr(transformers, self.model_class_name)


@dataclasses.dataclass
class Architecture(TransformersClasses):
    """An architecture of transformers: its model type, kind and classes, or why it is skipped."""

    #: the model type (``llama``)
    name: str
    #: the kind of model, ``causal``, ``masked`` or ``seq2seq``
    kind: str
    #: the name of the configuration class (``LlamaConfig``)
    config_class_name: str
    #: the name of the model class (``LlamaForCausalLM``)
    model_class_name: str
    #: why the architecture is not built, None when it is
    skip: str | None = None


def _mappings() -> list[tuple[str, dict[str, str]]]:
    from transformers.models.auto import modeling_auto

    return [
        ("causal", modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
        ("masked", modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES),
        ("seq2seq", modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES),
    ]


def _skip_reason(name: str, model_class_name: str) -> str | None:
    """Why an architecture is not a text model (None if it is one)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if name not in CONFIG_MAPPING_NAMES:
        return "no configuration class registered"
    if not hasattr(transformers, model_class_name):
        return f"transformers has no class {model_class_name}"
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        config_class = CONFIG_MAPPING[name]
    except Exception as e:  # noqa: BLE001 - an optional dependency missing
        return f"configuration class cannot be imported ({type(e).__name__})"
    sub = getattr(config_class, "sub_configs", None) or {}
    non_text = sorted(k for k in sub if k in _NON_TEXT_SUBCONFIGS)
    if non_text:
        return f"multimodal: the configuration has {', '.join(non_text)}"
    if "text_config" in sub and name + "_text" in CONFIG_MAPPING_NAMES:
        return f"multimodal wrapper of {name}_text (run on its own)"
    if "text_config" in sub and not name.endswith("_text"):
        return "wraps a text_config (a multimodal or an assistant model)"
    if any(k for k in sub if k not in ("text_config", "rope_parameters")) and not name.endswith("_text"):
        return f"composite configuration ({', '.join(sorted(sub))})"
    return None


def discover_architectures(kinds: tuple[str, ...] = KINDS) -> list[Architecture]:
    """Every architecture of the auto mappings, once, with a skip reason for the non-text ones.

    A model type listed in several mappings is kept with the first kind of
    :data:`KINDS` listing it (a causal LM before a masked LM).
    """
    seen: dict[str, Architecture] = {}
    for kind, mapping in _mappings():
        if kind not in kinds:
            continue
        for name, model_class_name in mapping.items():
            if name in seen:
                continue
            from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

            seen[name] = Architecture(
                name=name,
                kind=kind,
                config_class_name=CONFIG_MAPPING_NAMES.get(name, ""),
                model_class_name=model_class_name,
                skip=UNBUILDABLE.get(name) or _skip_reason(name, model_class_name),
            )
    return sorted(seen.values(), key=lambda a: (KINDS.index(a.kind), a.name))


def get_architecture(name: str) -> Architecture:
    """The architecture of a model type (``"llama"``, ``"mamba"``...)."""
    for arch in discover_architectures():
        if arch.name == name:
            return arch
    raise ValueError(f"Unknown architecture {name!r}: it is in none of transformers' auto mappings "
                     "for causal LM, masked LM or seq2seq.")


def _has(config: Any, key: str) -> bool:
    """Tells if ``key`` is a settable attribute of the configuration (not a computed property)."""
    key = getattr(type(config), "attribute_map", {}).get(key, key)
    if isinstance(getattr(type(config), key, None), property):
        return False
    return key in config.__dict__ or key in getattr(type(config), "attribute_map", {})


def _period(types: list[str]) -> list[str]:
    """The shortest list whose repetition gives ``types``, a last period cut short included (Gemma 3's five
    sliding layers for one global: a period of 6 in 26 layers)."""
    for size in range(1, len(types) + 1):
        if all(types[i] == types[i % size] for i in range(len(types))):
            return types[:size]
    return types


def _small_layer_types(types: list[str], n: int) -> list[str]:
    """``n`` layer types repeating the pattern of the original list: its period where three of them fit in ``n``
    layers (stamping captures two periods and copies the others, :mod:`fx2onnx.weights.repeat_layers`), else one
    layer of each kind in their order of first appearance as the period (Gemma 3's five sliding layers for one
    global become a sliding and a global one alternating), so that a tiny model keeps every kind and repeats."""
    period = _period(list(types))
    if 3 * len(period) > n:
        period = list(dict.fromkeys(types))[:n]
    return [period[i % len(period)] for i in range(n)]


#: per-layer lists an override may give for two layers: repeated periodically to the number of layers asked
_PER_LAYER_LISTS = ("layer_types", "block_types", "attn_layers")


def _repeat_layer_lists(values: dict[str, Any], n_layers: int | None) -> None:
    """Repeats the per-layer lists of ``values`` (``layer_types``, GPT-Neo's ``attention_types`` periods) to
    ``n_layers`` layers: an override written for two layers then holds for six (three periods)."""
    if not n_layers:
        return
    for key in _PER_LAYER_LISTS:
        kinds = values.get(key)
        if isinstance(kinds, (list, tuple)) and kinds and len(kinds) != n_layers:
            values[key] = [kinds[i % len(kinds)] for i in range(n_layers)]
    periods = values.get("attention_types")  # GPT-Neo: [[pattern, repeats], ...]
    if (isinstance(periods, list) and len(periods) == 1 and isinstance(periods[0], list)
            and n_layers % len(periods[0][0]) == 0):
        values["attention_types"] = [[periods[0][0], n_layers // len(periods[0][0])]]


def latent_attention_values(values: dict[str, Any], default: Any = None) -> None:
    """The tiny sizes of multi-head latent attention (DeepSeek V2/V3) made consistent in place: its rotary size is
    ``head_dim`` times the rotary factor of the ``default`` configuration (Mistral 4 rotates half of it), its keys are
    per head."""
    if "qk_rope_head_dim" in values and "head_dim" in values:
        rope = getattr(default, "rope_parameters", None)
        factor = rope.get("partial_rotary_factor") if isinstance(rope, dict) else None
        values["head_dim"] = int(values["qk_rope_head_dim"] / (factor or 1.0))
    if "kv_lora_rank" in values and "num_key_value_heads" in values:
        values["num_key_value_heads"] = values.get("num_attention_heads", 4)


def tiny_config(arch: Architecture, **overrides: Any) -> Any:
    """The configuration of ``arch`` with the generic overrides, the architecture's ones, then ``overrides``."""
    config_class = arch.config_class()
    default = config_class()
    values = {key: value for key, value in GENERIC_OVERRIDES.items() if _has(default, key)}
    try:
        sliding = getattr(default, "sliding_window", 0)
    except Exception:  # noqa: BLE001 - a per-layer attribute (neomme): not a global one
        sliding = None
    if sliding is None:
        values.pop("sliding_window", None)  # sliding attention disabled by default: kept so
    latent_attention_values(values, default)
    if arch.kind == "causal" and _has(default, "is_decoder"):
        values["is_decoder"] = True  # encoders listed as causal LM (BERT...) are decoders then
    values.update(ARCHITECTURE_OVERRIDES.get(arch.name, {}))
    values.update(overrides)
    if "num_hidden_layers" in overrides and not _has(default, "num_hidden_layers"):
        # a read-only num_hidden_layers (ProphetNet's sums its encoder's and decoder's): the decoder's count
        layers = values.pop("num_hidden_layers")
        for key in ("num_decoder_layers", "decoder_layers"):
            if _has(default, key):
                values[key] = layers
    values = {k: v for k, v in values.items() if v is not ...}  # ... removes a generic override
    for token in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        value = getattr(default, token, None)
        if isinstance(value, int) and value >= values.get("vocab_size", 1 << 30):
            values[token] = {"pad_token_id": 0, "bos_token_id": 1}.get(token, 2)
    layer_types = getattr(default, "layer_types", None)
    n_layers = next((values[k] for k in ("num_hidden_layers", "num_layers", "n_layer") if k in values), None)
    _repeat_layer_lists(values, n_layers)
    if (
        isinstance(layer_types, (list, tuple)) and layer_types and n_layers
        and "layer_types" not in values and _has(default, "layer_types")
    ):
        values["layer_types"] = _small_layer_types(list(layer_types), n_layers)
    config = config_class(**values)
    config._attn_implementation = "eager"
    return config


def tiny_model(arch: Architecture, seed: int = 0, **overrides: Any) -> tuple[Any, Any]:
    """``(model, config)``: the model of ``arch`` with seeded random weights, in eval mode.

    A weight matrix the model's initialization sets to zero (the router of a
    mixture of experts, such as AFMoE's) gets random values too: with a zero
    router every token scores the same on every expert, the experts chosen
    depend on how ``topk`` breaks ties, which torch and onnxruntime do
    differently, and a right export would compare as wrong.
    """
    import torch

    config = tiny_config(arch, **overrides)
    torch.manual_seed(seed)
    model = arch.model_class()(config).eval()
    randomize_zero_matrices(model, seed)
    return model, config


def randomize_zero_matrices(model: Any, seed: int = 0, std: float = 0.02) -> list[str]:
    """Gives seeded random values (normal, ``std``) to the floating point parameters of
    two dimensions or more which are all zeros; returns their names."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    names = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2 and param.is_floating_point() and param.numel() and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float32).to(param.dtype) * std)
                names.append(name)
    return names
