"""Every task of transformers' auto mappings beyond text, with tiny configurations.

:mod:`fx2onnx.inputs.discover` covers the text models (causal, masked, seq2seq).
This module reads the other auto mappings a user exports (:data:`TASKS`: vision-language,
speech, audio and image classification, detection, segmentation, depth, zero-shot image
classification, video, text-to-audio, documents, time series) and builds a tiny
configuration for each architecture: the generic overrides of the text zoo
(:data:`fx2onnx.inputs.discover.GENERIC_OVERRIDES`) and small image and audio sizes
(:data:`MEDIA_OVERRIDES`), applied to the configuration and, recursively, to each of
its sub-configurations (``text_config``, ``vision_config``, ``audio_config``,
``backbone_config``...). The inputs per task are built by :mod:`fx2onnx.zoo.task_inputs`.

.. code-block:: python

    from fx2onnx.inputs.tasks import discover_tasks, tiny_task_model

    archs = discover_tasks(["image-classification"])
    vit = next(a for a in archs if a.name == "vit")
    model, config = tiny_task_model(vit)
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from .discover import (ARCHITECTURE_OVERRIDES, GENERIC_OVERRIDES, TransformersClasses, _has, _small_layer_types,
                       latent_attention_values)

#: task -> the auto mappings of transformers listing its architectures
TASKS: dict[str, tuple[str, ...]] = {
    "image-text-to-text": ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES"),
    "speech-seq2seq": ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",),
    "ctc": ("MODEL_FOR_CTC_MAPPING_NAMES",),
    "audio-classification": ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",),
    "image-classification": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",),
    "object-detection": ("MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",),
    "semantic-segmentation": ("MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",),
    "instance-segmentation": ("MODEL_FOR_INSTANCE_SEGMENTATION_MAPPING_NAMES",),
    "universal-segmentation": ("MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES",),
    "depth-estimation": ("MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",),
    "zero-shot-image-classification": ("MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",),
    "video-classification": ("MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES",),
    "text-to-audio": ("MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES", "MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES"),
    "document-question-answering": ("MODEL_FOR_DOCUMENT_QUESTION_ANSWERING_MAPPING_NAMES",),
    "time-series": (
        "MODEL_FOR_TIME_SERIES_CLASSIFICATION_MAPPING_NAMES",
        "MODEL_FOR_TIME_SERIES_REGRESSION_MAPPING_NAMES",
        "MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES",
    ),
}

#: image and audio sizes, applied like the generic overrides (where a configuration has them)
MEDIA_OVERRIDES: dict[str, Any] = {
    "image_size": 32,
    "num_labels": 5,
    "num_frames": 4,
    "tubelet_size": 2,
    "num_mel_bins": 16,
    "max_length": 64,
    "max_source_positions": 32,
    "max_target_positions": 32,
    "classifier_proj_size": 32,
    "num_queries": 10,
    # the width a cross-attention (a Q-Former projector) reads: the hidden size every tiny tower has
    "encoder_hidden_size": 64,
    # the text tower's projection (SigLIP): the width of the image tower's output
    "projection_size": 64,
    # the vocoder reads the spectrogram of num_mel_bins (FastSpeech 2 + HiFi-GAN)
    "model_in_dim": 16,
    # the width of the backbone a depth decoder reads (CSM)
    "backbone_hidden_size": 64,
    # a codec's grouped upsampling (Mimi: one group per channel of its 64-wide tiny encoder) and a
    # vocoder's first width (HiFi-GAN: 512 channels, 26 M parameters)
    "upsample_groups": 64,
    "upsample_initial_channel": 32,
    # a decoder's cross-attention over the tiny encoder (Dia)
    "cross_hidden_size": 64,
    "cross_num_attention_heads": 4,
    "cross_num_key_value_heads": 4,
    "cross_head_dim": 16,
}

#: model type -> values replacing the generic ones (only where a configuration needs it)
TASK_OVERRIDES: dict[str, dict[str, Any]] = {
    # ViT-like towers: the default patch (16 or 32) leaves too few patches on 32x32 images
    "vit": dict(patch_size=8),
    "deit": dict(patch_size=8),
    "dinov2": dict(patch_size=8),
    # a checkpoint's language, as set_default_language() saves it in config.json (none: the forward refuses to run)
    "xmod": dict(default_language="en_XX"),
    # 4x4 patches pooled into 2x2 image tokens (the default 256 tokens need 16x16 patches at least)
    "gemma3": dict(mm_tokens_per_image=4, vision_config=dict(patch_size=8)),
    # the projector maps to projection_dim, which must be the text model's hidden size
    "paligemma": dict(projection_dim=64, vision_config=dict(projection_dim=64)),
    # four hidden states feed the four neck stages
    "dpt": dict(num_hidden_layers=4, backbone_out_indices=[0, 1, 2, 3]),
    # five stride-2 stages then the atrous pooling of the segmentation head: 32 pixels leave 1x1
    "mobilevitv2": dict(image_size=64),
    # the head reshapes the tokens with its own patch size and width: those of the tiny DINOv2 backbone
    "depth_anything": dict(patch_size=8, reassemble_hidden_size=64),
    "prompt_depth_anything": dict(patch_size=8, reassemble_hidden_size=64),
    # the semantic segmentation head takes four hidden states (the default indexes one, the 12th)
    "beit": dict(num_hidden_layers=4, out_indices=[1, 2, 3, 4]),
    "data2vec-vision": dict(num_hidden_layers=4, out_indices=[1, 2, 3, 4]),
    # DETR builds a timm ResNet-50 by default: the ResNet of transformers instead (one block per stage)
    # (and 8 heads: the mask head of the segmentation model takes hidden size + heads channels,
    # a multiple of 8 for its group norms)
    "detr": dict(use_timm_backbone=False, num_attention_heads=8),
    # the DETR family's backbone is timm's ResNet-50 (16 blocks, 23 M parameters; use_timm_backbone=False no
    # longer replaces it): timm's ResNet-10-T, one block per stage, the same strides and feature maps
    "table-transformer": dict(backbone_config=dict(backbone="resnet10t")),
    "conditional_detr": dict(backbone_config=dict(backbone="resnet10t")),
    "deformable_detr": dict(backbone_config=dict(backbone="resnet10t")),
    "dab-detr": dict(backbone_config=dict(backbone="resnet10t")),
    # the projector's queries are keyed by the number of patches (1225 or 4900 at 490 / 980 pixels):
    # the tiny tower's 32x32 image is one patch
    "aria": dict(projector_patch_to_query_dict={1: 4}),
    # the projector concatenates five hidden states of a 24-layer CLIP (-11 and 6): two of the tiny tower
    "vipllava": dict(vision_feature_layers=[-2, -1]),
    # the projector maps the vision output (7680) to 4096: the tiny tower's and text model's widths
    "llama4": dict(vision_config=dict(vision_output_dim=64, projector_input_dim=64, projector_output_dim=64)),
    # the vision projection (1024) feeds the text encoder: its width
    "florence2": dict(vision_config=dict(projection_dim=64)),
    # the adapter reads the vision layers 24 and 18 of 27: two of the tiny tower
    "molmo2": dict(adapter_config=dict(vision_feature_layer=[-1, -2])),
    # its key and value projections have num_attention_heads heads, not num_key_value_heads
    "granite_speech5_encoder": dict(num_key_value_heads=4),
    # the configuration checks that the adaptor's width is the text model's hidden size // 4
    "fun_asr_nano": dict(adaptor_config=dict(intermediate_size=16)),
    # no audio token by default (the checkpoints set 24): the prompt needs its placeholders
    "voxtral": dict(audio_token_id=24),
    # the top convolution's width is round_filters(1280) (2560 at the default width coefficient 2,
    # 320 at 0.25: four times fewer channels, 63 M parameters down to a few):
    # its batch norm takes hidden_dim channels, not the generic 128
    "efficientnet": dict(width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320),
    # the window shrinks to a stage's resolution at run time, its bias table does not: 2x2 windows
    # on 64x64 images leave stages of 16, 8, 4 and 2 patches, none below the window
    "swin": dict(image_size=64, window_size=2),
    "donut-swin": dict(image_size=64, window_size=2),
    # a context of 16384 steps by default: two patches of 32
    "timesfm2_5": dict(context_length=64),
    # windowed attention over a grid of patches: 14-pixel patches leave 2x2 on 32 pixels, less
    # than the 4x4 windows; 8-pixel patches and 2x2 windows of 2x2 patches
    "rf_detr": dict(backbone_config=dict(num_windows=2, patch_size=8)),
    # no projector scale by default, so no feature level and nothing for the encoder (the checkpoints set [1.0]);
    # 2x2 windows: the tiny 32-pixel images are no multiple of the default 4x4 windows' sides, the configuration
    # refused them and the default configuration was built instead
    # a threshold and a reading-order rank per label, none by default (the checkpoints list them): forward reads them
    "pp_doclayout_v2": dict(class_thresholds=[0.5, 0.5], class_order=[0, 1]),
    "lw_detr": dict(projector_scale_factors=[1.0],
                    backbone_config=dict(num_windows=4, num_windows_side=2, patch_size=8)),
    # the queries join the last num_blocks layers (4 by default): one of the two tiny layers
    "eomt": dict(num_blocks=1),
    "eomt_dinov3": dict(num_blocks=1),
    # page images of 32 pixels; the box embeddings (4 coordinates + 2 sizes) concatenate to the
    # hidden size: 4 x 10 + 2 x 12 = 64
    "layoutlmv3": dict(input_size=32, coordinate_size=10, shape_size=12),
    # the decoder reads num_key_value_heads, which the configuration class does not declare (the
    # checkpoints' config.json carry it)
    "moonshine_streaming": dict(num_key_value_heads=4),
    # its audio tokenizers double 32 filters over seven stages (2048 channels, 170 M parameters): 4
    "vibevoice_acoustic_tokenizer_encoder": dict(num_filters=4),
    # its classifier reads the logits of "yes" and "no", ids 10784 and 3771 by default (the modeling's,
    # the configuration does not declare them): two ids of the tiny vocabulary
    "shieldgemma2": dict(yes_token_index=1000, no_token_index=1001),
}


@dataclasses.dataclass
class TaskArchitecture(TransformersClasses):
    """An architecture of one task: model type, model class, or why it is skipped."""

    #: the task, a key of :data:`TASKS`
    task: str
    #: the model type (``llava``)
    name: str
    #: the name of the model class of that task
    model_class_name: str
    #: why the architecture is not built, None when it is
    skip: str | None = None


def _skip_reason(name: str, model_class_name: str) -> str | None:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    if name not in CONFIG_MAPPING_NAMES:
        return "no configuration class registered"
    if not hasattr(transformers, model_class_name):
        return f"transformers has no class {model_class_name}"
    try:
        CONFIG_MAPPING[name]
    except Exception as e:  # noqa: BLE001 - an optional dependency missing
        return f"configuration class cannot be imported ({type(e).__name__})"
    return None


def discover_tasks(tasks: Any = None) -> list[TaskArchitecture]:
    """Every architecture of each task of :data:`TASKS` (all of them by default), once per task,
    in the order of the mappings, with a skip reason where it cannot be built."""
    from transformers.models.auto import modeling_auto

    archs = []
    for task in tasks or TASKS:
        if task not in TASKS:
            raise ValueError(f"Unknown task {task!r}, expected one of {sorted(TASKS)}.")
        seen: set[str] = set()
        for mapping_name in TASKS[task]:
            for name, class_name in getattr(modeling_auto, mapping_name, {}).items():
                if name in seen:
                    continue
                seen.add(name)
                class_name = class_name if isinstance(class_name, str) else class_name[0]
                archs.append(TaskArchitecture(task, name, class_name, _skip_reason(name, class_name)))
    return archs


def get_task_architecture(task: str, name: str) -> TaskArchitecture:
    """The architecture ``name`` of ``task`` (a ValueError naming the task's architectures if absent)."""
    archs = discover_tasks([task])
    for arch in archs:
        if arch.name == name:
            return arch
    raise ValueError(f"{name!r} is not an architecture of {task!r}: {[a.name for a in archs]}")


def _scalar_over_list(current: Any, value: Any) -> bool:
    """True where a generic number would replace a list (Mamba's ``conv_kernel=4`` over the seven
    kernel sizes of wav2vec2's feature encoder): that override is not for this configuration."""
    return isinstance(current, (list, tuple)) and not isinstance(value, (list, tuple, dict))


def _tiny_values(config: Any, name: str | None = None) -> dict[str, Any]:
    """The overrides of one configuration, its sub-configurations given as dictionaries
    of their own overrides (recursively)."""

    if vars(config).get("_heterogeneity_spec") is not None:  # Gemma 4: per-layer attributes, read as global
        object.__setattr__(config, "allow_global_per_layer_attribute_access", True)
    values = {k: v for k, v in {**GENERIC_OVERRIDES, **MEDIA_OVERRIDES}.items()
              if _has(config, k) and not _scalar_over_list(getattr(config, k, None), v)}
    for key in ("num_attention_heads", "num_heads"):  # heads per stage (Swin): the same small number
        current = getattr(config, key, None) if _has(config, key) else None
        if isinstance(current, (list, tuple)) and key in GENERIC_OVERRIDES:
            values[key] = [GENERIC_OVERRIDES[key]] * len(current)
    if getattr(config, "sliding_window", 0) is None:
        values.pop("sliding_window", None)
    latent_attention_values(values, config)
    n_layers = next((values[k] for k in ("num_hidden_layers", "num_layers") if k in values), None)
    for key in [k for k in vars(config) if k.endswith("layer_types")]:  # layer_types, mlp_layer_types...
        layer_types = getattr(config, key, None)
        if isinstance(layer_types, (list, tuple)) and layer_types and n_layers and _has(config, key):
            values[key] = _small_layer_types(list(layer_types), n_layers)
    out_indices = getattr(config, "out_indices", None)
    if isinstance(out_indices, (list, tuple)) and out_indices and n_layers and (
            "out_indices" in vars(config) or "_out_indices" in vars(config)):  # a property of the backbones
        # a backbone feeding k hidden states to a neck: its k last layers (the defaults index the
        # 12 or 24 layers of the full model)
        n_layers = max(n_layers, len(out_indices))
        values["num_hidden_layers"] = n_layers
        values["out_indices"] = list(range(n_layers - len(out_indices) + 1, n_layers + 1))
        values["out_features"] = None
    for key in ("depths", "encoder_layers_per_stage"):
        if isinstance(getattr(config, key, None), (list, tuple)) and _has(config, key):
            values[key] = [1] * len(getattr(config, key))  # one block per stage
            # a staged network: its number of stages follows its lists (ConvNeXt maps
            # num_hidden_layers to num_stages)
            values.pop("num_hidden_layers", None)
            values.pop("num_layers", None)
    _dense_head_values(config, values)
    for key in getattr(type(config), "sub_configs", None) or {}:
        sub = getattr(config, key, None)
        if sub is not None and hasattr(sub, "to_dict") and key != "rope_parameters":
            values[key] = {**sub.to_dict(), **_tiny_values(sub, getattr(sub, "model_type", None))}
    _vision_language_values(config, values)
    # the fixes the causal zoo's tiny configuration of that model type needs (a hybrid's attention layer among the
    # two, rotary parameters per layer type...), then the tasks' own; ``...`` drops a generic value
    for key, value in (ARCHITECTURE_OVERRIDES.get(name, {}) if name else {}).items():
        if value is ...:
            values.pop(key, None)
        else:
            values[key] = value
    for key, value in (TASK_OVERRIDES.get(name, {}) if name else {}).items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}  # a sub-configuration: merged
        else:
            values[key] = value
    _placeholders_in_vocabulary(config, values)
    return values


def _vision_language_values(config: Any, values: dict[str, Any]) -> None:
    """Sizes a vision-language model ties to the tiny ones: the multimodal rotary sections
    (``mrope_section``, Qwen2-VL: halves of the head dimension) scaled to the tiny head, the
    width a tower projects to (``out_hidden_size``) set to the text model's, the lists of one entry
    per layer cut to the tiny layers, the image a whole number of Idefics 3 shuffles, Gemma 3's pool
    of image tokens small enough for the tiny image, and LLaVA-Next's tile resolutions
    (``image_grid_pinpoints``, 336 to 1008 pixels) replaced by one tile of the tiny image size."""
    rope = getattr(config, "rope_parameters", None)
    # a configuration without sections gets the modeling's default, [16, 24, 24] (Qwen2-VL)
    multimodal = "mrope_section" in (getattr(type(config), "ignore_keys_at_rope_validation", None) or ())
    flat = isinstance(rope, dict) and ("rope_type" in rope or "mrope_section" in rope)  # not one per layer type
    if flat and (isinstance(rope.get("mrope_section"), (list, tuple)) or multimodal):
        heads = values.get("num_attention_heads") or getattr(config, "num_attention_heads", None)
        head = values.get("head_dim") or (values.get("hidden_size") // heads if values.get("hidden_size") else None)
        sections = list(rope.get("mrope_section") or [16, 24, 24])
        # the rotated part of the head (GLM-4V MoE rotates half of it)
        factor = rope.get("partial_rotary_factor") or getattr(config, "partial_rotary_factor", None) or 1.0
        half = int(head * factor) // 2 if head else 0
        if half and sum(sections) != half:
            scaled = [max(1, s * half // sum(sections)) for s in sections]
            scaled[-1] += half - sum(scaled)
            values["rope_parameters"] = {**rope, "mrope_section": scaled}
    text = values.get("text_config")
    hidden = text.get("hidden_size") if isinstance(text, dict) else None
    vision = values.get("vision_config")
    rope = text.get("rope_parameters") if isinstance(text, dict) else None
    if isinstance(vision, dict) and "spatial_merge_size" in vision and isinstance(rope, dict) and hidden and (
            "rope_type" in rope and "mrope_section" not in rope and text.get("num_attention_heads")):
        # a grid tower (PaddleOCR-VL) whose text configuration leaves the sections to the modeling
        half = (text.get("head_dim") or hidden // text["num_attention_heads"]) // 2
        scaled = [half // 4, half // 4, half - 2 * (half // 4)]
        text["rope_parameters"] = {**rope, "mrope_section": scaled}
    for sub in values.values():  # a tower projecting to the text model's width (out_hidden_size, 3584)
        for key in ("out_hidden_size", "text_hidden_size"):
            if hidden and isinstance(sub, dict) and sub.get(key):
                sub[key] = hidden

    layers, n_layers = getattr(config, "num_hidden_layers", None), values.get("num_hidden_layers")
    for key, value in vars(config).items():  # one entry per layer (kv_source_layers, intermediate_size)
        if isinstance(layers, int) and n_layers and isinstance(value, list) and len(value) == layers > n_layers \
                and key not in values:
            small = GENERIC_OVERRIDES.get(key)
            values[key] = [small] * n_layers if isinstance(small, int) else list(value[:n_layers])
    if "image_token_index" in vars(config) and config.image_token_index is None and hidden and isinstance(
            getattr(config, "num_query_tokens", None), int):
        # BLIP-2 / InstructBLIP: no image token by default (the checkpoints set one), the prompt needs
        # num_query_tokens of them: the last id of the tiny vocabulary
        values["image_token_index"] = (text.get("vocab_size") or 1024) - 1
        if text.get("word_embed_proj_dim"):  # OPT's embeddings (768 wide) take the queries: the tiny width
            text["word_embed_proj_dim"] = hidden
    elif "image_token_id" in vars(config) and config.image_token_id is None and isinstance(text, dict) and \
            isinstance(values.get("vision_config"), dict):
        # a placeholder the checkpoints set and the default configuration leaves unset (MiniCPM-V): without
        # it the model drops the images silently; the last id of the tiny vocabulary
        values["image_token_id"] = (text.get("vocab_size") or 1024) - 1
    per_layer = config.to_dict().get("per_layer_config") if n_layers and hasattr(config, "to_dict") else None
    if isinstance(per_layer, dict):  # the overrides of the layers the tiny model keeps, sizes made tiny
        values["per_layer_config"] = {
            k: {a: GENERIC_OVERRIDES.get(a, v) if isinstance(v, int) else v for a, v in layer.items()}
            for k, layer in per_layer.items() if int(k) < n_layers}
    vision = values.get("vision_config")
    patch = vision.get("patch_size") if isinstance(vision, dict) else None
    if isinstance(patch, int) and isinstance(vision.get("image_size"), int):
        scale = getattr(config, "scale_factor", None)
        if isinstance(scale, int) and (vision["image_size"] // patch) % scale:
            # Idefics 3 shuffles scale x scale patches into one token: a side of scale patches
            vision["image_size"] = patch * scale
        side = vision["image_size"] // patch
        if isinstance(getattr(config, "mm_tokens_per_image", None), int) and side:
            # Gemma 3 pools the patches into mm_tokens_per_image tokens (256): at most a 2x2 pool
            values.setdefault("mm_tokens_per_image", min(4, side * side) if side % 2 == 0 or side == 1 else 1)
    if getattr(config, "image_grid_pinpoints", None) and isinstance(vision, dict) and vision.get("image_size"):
        size = vision["image_size"]
        values["image_grid_pinpoints"] = [[size, size]]


def _dense_head_values(config: Any, values: dict[str, Any]) -> None:
    """The widths of a DPT-like dense head (depth, segmentation), sized for the 64-wide tiny
    backbones: its fusion width 64 and its per-stage widths (``neck_hidden_sizes``,
    ``post_process_channels``: 96 to 1024 channels by default, 10 to 20 M parameters of the head
    alone, past the zoo's timeout) 16, 32, 64, 64..."""

    if not _has(config, "fusion_hidden_size"):
        return
    values["fusion_hidden_size"] = 64
    if _has(config, "bottleneck_features"):  # ZoeDepth: the fused features' width
        values["bottleneck_features"] = 64
    for key in ("neck_hidden_sizes", "post_process_channels"):
        current = getattr(config, key, None)
        if isinstance(current, (list, tuple)) and current and _has(config, key):
            values[key] = [min(64, 16 * 2**i) for i in range(len(current))]


#: the special tokens of a vision-language model which must be ids of the text vocabulary
_PLACEHOLDERS = (
    "image_token_id", "image_token_index", "video_token_id", "boi_token_index", "eoi_token_index",
    "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "audio_token_id", "audio_token_index",
)


def _placeholders_in_vocabulary(config: Any, values: dict[str, Any]) -> None:
    """Moves the placeholder tokens (``image_token_id``...) beyond the tiny vocabulary to its last ids."""
    text = values.get("text_config")
    vocab = text.get("vocab_size") if isinstance(text, dict) else values.get("vocab_size")
    if not vocab:
        return
    last = vocab - 1
    for key in _PLACEHOLDERS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value >= vocab:
            values[key] = last
            last -= 1


def tiny_task_config(arch: TaskArchitecture, **overrides: Any) -> Any:
    """The default configuration of ``arch`` with small sizes, its sub-configurations too.

    Falls back to the default configuration with ``num_labels=5`` only when the
    configuration class refuses the overrides (its validation ties sizes together).
    """
    config_class = arch.config_class()
    values = {**_tiny_values(config_class(), arch.name), **overrides}
    config = None
    for _ in range(4):  # a field the configuration's validation names is dropped, the others kept
        try:
            config = config_class(**values)
            break
        except Exception as e:  # noqa: BLE001 - a configuration validating its sizes otherwise
            field = re.search(r"error for field '(\w+)'", str(e))
            if not field or field.group(1) not in values or field.group(1) in overrides:
                break
            values.pop(field.group(1))
    if config is None:
        config = config_class(num_labels=5, **overrides)
    config._attn_implementation = "eager"
    return config


def tiny_task_model(arch: TaskArchitecture, seed: int = 0, **overrides: Any) -> tuple[Any, Any]:
    """``(model, config)`` of ``arch`` in eval mode, weights seeded: the matrices get a
    variance of 1 / fan-in (with the small initializations of transformers the outputs of
    deep convolutional networks vanish and any export would compare as right). The padding row of
    an embedding stays zero, as training leaves it (transformers' initialization of some models,
    Funnel's, zeroes it again after ``from_pretrained`` loads it: a random one would make the
    reference differ from its own checkpoint)."""
    import torch

    config = tiny_task_config(arch, **overrides)
    torch.manual_seed(seed)
    model = arch.model_class()(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and p.dtype.is_floating_point:
                if p.numel():  # (an empty parameter: LW-DETR's unused projections)
                    p.copy_(torch.randn(p.shape, generator=generator) / p[0].numel() ** 0.5)
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding) and module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
    return model, config


def count_by_task(archs: list[TaskArchitecture]) -> dict[str, tuple[int, int]]:
    """task -> (architectures discovered, of which buildable: no skip reason)."""
    counts: dict[str, tuple[int, int]] = {}
    for arch in archs:
        total, ok = counts.get(arch.task, (0, 0))
        counts[arch.task] = (total + 1, ok + (arch.skip is None))
    return counts
