"""Inputs of the vision-language models of the ``image-text-to-text`` task.

A prompt per image: a text token, the image's placeholder tokens (as many as the features
the model's own ``get_image_features`` gives for one image), two text tokens. The images
take the form the model's signature asks for, one *kind* per family
(:func:`image_kind`), every size read from the configuration:

* ``images``: ``pixel_values [batch, channels, size, size]`` (LLaVA, Gemma 3, PaliGemma);
* ``grid_thw``: the flattened patches of Qwen2-VL and the models built like it
  (``pixel_values [batch * t * h * w, channels * temporal_patch * patch * patch]``) with
  ``image_grid_thw [batch, 3]`` (``image_grid_hw [batch, 2]``, ``image_merge_sizes``), the
  grid two merged tokens wide and high (``2 * spatial_merge_size`` patches), and
  ``mm_token_type_ids`` (1 on the image placeholders) for the multimodal rotary positions; a
  model with a ``get_rope_index`` (Qwen-VL) gets those positions as ``position_ids``, computed by
  it before the export, as the generation loop computes them (:mod:`fx2onnx.runtime.mrope`): they
  depend on the values of the grid and of the prompt's tokens, which no graph of fixed shapes reads;
* ``image_sizes``: LLaVA-Next / OneVision tiles (``pixel_values [batch, tiles, channels, size,
  size]``, the number of tiles the model's own ``image_size_to_num_patches`` computes) or
  Pixtral-like towers (``pixel_values [batch, channels, size, size]``), with
  ``image_sizes [batch, 2]``;
* ``naflex``: SigLIP 2's patch sequences (``pixel_values [batch, patches, channels * patch *
  patch]``, ``spatial_shapes``, ``pixel_attention_mask``);
* ``pixel_attention_mask``: Idefics 2 / 3 images per prompt (``pixel_values [batch, 1, channels,
  size, size]`` and their pixel mask);
* ``pixel_mask``: Aria's pixel mask ``[batch, size, size]``.

.. code-block:: python

    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model
    from fx2onnx.inputs.vlm_inputs import image_text_inputs

    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "qwen2_vl"))
    inputs, dynamic_shapes = image_text_inputs(model, config, batch=2)
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

from .common import image_shape

#: configuration attributes naming the image placeholder token
IMAGE_TOKENS = ("image_token_id", "image_token_index")
#: special tokens the random text tokens avoid
SPECIAL_TOKENS = (
    "image_token_id", "image_token_index", "video_token_id", "video_token_index", "boi_token_index",
    "eoi_token_index", "boi_token_id", "eoi_token_id", "vision_start_token_id", "vision_end_token_id",
    "audio_token_id", "audio_token_index", "audio_bos_token_id", "audio_eos_token_id", "image_start_token_id",
    "image_end_token_id",
)
#: the inputs describing images (the others, a text's attention mask, are not for get_image_features)
IMAGE_PREFIXES = ("pixel_", "image_", "spatial_", "target_sizes")
#: the grid of a Qwen2-VL-like image, in merged tokens per side
GRID_MERGED = 2
#: the layouts of the patches of a grid, tried in this order until ``get_image_features`` takes one:
#: rows of ``channels * temporal_patch_size * patch * patch`` values (Qwen2-VL), the same with two
#: frames where the configuration does not say (MuseGlimmer), a convolution's
#: ``[patches, channels, patch, patch]`` (Kimi-K2.5), one sequence of patches per image (PaddleOCR-VL)
GRID_LAYOUTS = ("rows", "rows_temporal_2", "patches", "images")
#: patches per side of a SigLIP 2 (naflex) image
NAFLEX_SIDE = 4


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _parameters(fn: Callable | None) -> dict[str, inspect.Parameter]:
    if fn is None:
        return {}
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def image_token(config: Any) -> int | None:
    """The placeholder token of an image, None when the configuration names none."""
    for key in IMAGE_TOKENS:
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def image_features_function(model: Any) -> Callable | None:
    """``get_image_features`` of the model, else of its base model (``model.model``)."""
    for owner in (model, getattr(model, "model", None)):
        fn = getattr(owner, "get_image_features", None)
        if fn is not None:
            return fn
    return None


def rope_positions(model: Any, inputs: dict[str, Any]) -> torch.Tensor | None:
    """The multimodal rotary positions ``get_rope_index`` (of the model or of its base model) computes for
    ``inputs``, None when the model has none."""
    for owner in (model, getattr(model, "model", None)):
        fn = getattr(owner, "get_rope_index", None)
        if fn is not None:
            try:
                with torch.no_grad():
                    positions = fn(**{k: v for k, v in inputs.items() if k in _parameters(fn)})
            except (TypeError, ValueError):  # it needs what the forward prepares: left to the forward
                return None
            return positions[0] if isinstance(positions, tuple) else positions
    return None


def _vision(config: Any) -> Any:
    return getattr(config, "vision_config", None) or config


def _int(value: Any, default: int) -> int:
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return int(value) if isinstance(value, int) else default


def _channels(vision: Any) -> int:
    return _int(getattr(vision, "in_channels", None) or getattr(vision, "num_channels", None), 3)


def image_kind(model: Any) -> str:
    """Which form the images take, from the forward's and ``get_image_features``' parameters."""
    features = _parameters(image_features_function(model))
    names = set(_parameters(model.forward)) | set(features)
    if "image_grid_thw" in names or "image_grid_hw" in names:
        return "grid_thw"
    # LLaVA takes image_sizes as an option (for Pixtral towers): only where the features need them
    required = "image_sizes" in features and features["image_sizes"].default is inspect.Parameter.empty
    if required or getattr(model.config, "image_grid_pinpoints", None):
        return "image_sizes"
    if "spatial_shapes" in names:
        return "naflex"
    if "target_sizes" in names:  # MiniCPM-V: the patches of every image packed in one row, their sizes
        return "target_sizes"
    if "pixel_attention_mask" in names:
        return "pixel_attention_mask"
    if "pixel_mask" in names:
        return "pixel_mask"
    return "images"


def _grid_thw(model: Any, config: Any, batch: int, g: torch.Generator, names: set[str],
              layout: int = 0) -> tuple[dict, dict]:
    r"""The patches of ``batch`` images (:data:`GRID_LAYOUTS`\ ``[layout]``) and their grids."""
    vision = _vision(config)
    patch = _int(getattr(vision, "patch_size", None), 14)
    temporal = _int(getattr(vision, "temporal_patch_size", None), 1)
    merge = _int(getattr(vision, "spatial_merge_size", None) or getattr(vision, "merge_size", None), 1)
    side = GRID_MERGED * merge
    channels = _channels(vision)
    shape, axis = {
        "rows": ((batch * side * side, channels * temporal * patch * patch), "patches"),
        "rows_temporal_2": ((batch * side * side, channels * 2 * patch * patch), "patches"),
        "patches": ((batch * side * side, channels, patch, patch), "patches"),
        "images": ((batch, side * side, channels, patch, patch), "batch"),
    }[GRID_LAYOUTS[layout]]
    inputs: dict[str, Any] = {"pixel_values": torch.randn(*shape, generator=g)}
    # the patches of all images are one axis: its own name (batch * patches per image)
    shapes: dict[str, Any] = {"pixel_values": {0: axis}}
    if "image_grid_thw" in names:
        inputs["image_grid_thw"] = torch.tensor([[1, side, side]] * batch, dtype=torch.int64)
    else:
        inputs["image_grid_hw"] = torch.tensor([[side, side]] * batch, dtype=torch.int64)
    shapes[next(k for k in inputs if k.startswith("image_grid"))] = {0: "batch"}
    if "image_merge_sizes" in names:  # VideoLLaMA 3: the merge of each image
        inputs["image_merge_sizes"] = torch.full((batch,), merge, dtype=torch.int64)
        shapes["image_merge_sizes"] = {0: "batch"}
    return inputs, shapes


def _image_sizes(model: Any, config: Any, batch: int, g: torch.Generator) -> tuple[dict, dict]:
    channels, height, width = image_shape(config)
    pinpoints = getattr(config, "image_grid_pinpoints", None)
    if pinpoints:  # LLaVA-Next tiles: the base image and the tiles of the best resolution
        tiles = inspect.getmodule(type(model)).__dict__.get("image_size_to_num_patches")
        if tiles is None:
            raise NotImplementedError(f"{type(model).__name__} has image_grid_pinpoints but no image_size_to_num_patches")
        n = tiles(image_size=(height, width), grid_pinpoints=pinpoints, patch_size=height)
        pixels = torch.randn(batch, n, channels, height, width, generator=g)
    else:  # Pixtral-like towers: one image of its own size
        pixels = torch.randn(batch, channels, height, width, generator=g)
    sizes = torch.tensor([[height, width]] * batch, dtype=torch.int64)
    return {"pixel_values": pixels, "image_sizes": sizes}, {"pixel_values": {0: "batch"}, "image_sizes": {0: "batch"}}


def _naflex(model: Any, config: Any, batch: int, g: torch.Generator) -> tuple[dict, dict]:
    vision = _vision(config)
    patch = _int(getattr(vision, "patch_size", None), 16)
    n = NAFLEX_SIDE * NAFLEX_SIDE
    inputs = {
        "pixel_values": torch.randn(batch, n, _channels(vision) * patch * patch, generator=g),
        "spatial_shapes": torch.tensor([[NAFLEX_SIDE, NAFLEX_SIDE]] * batch, dtype=torch.int64),
        "pixel_attention_mask": torch.ones(batch, n, dtype=torch.int64),
    }
    return inputs, {k: {0: "batch"} for k in inputs}


#: the side, in patches, of a MiniCPM-V image (the window merger halves it, the merger twice more)
PACKED_SIDE = 8


def _packed(model: Any, config: Any, batch: int, g: torch.Generator) -> tuple[dict, dict]:
    """MiniCPM-V's images: the patches of all of them in one row ``(1, channels, patch, patches * patch)``,
    ``target_sizes`` their sides in patches."""
    vision = _vision(config)
    patch = _int(getattr(vision, "patch_size", None), 14)
    n = PACKED_SIDE * PACKED_SIDE * batch
    inputs = {"pixel_values": torch.randn(1, _channels(vision), patch, n * patch, generator=g),
              "target_sizes": torch.tensor([[PACKED_SIDE, PACKED_SIDE]] * batch, dtype=torch.int32)}
    return inputs, {"pixel_values": {3: "patches"}, "target_sizes": {0: "batch"}}


def image_inputs(model: Any, config: Any, batch: int, seed: int = 0,
                 layout: int = 0) -> tuple[dict[str, Any], dict[str, Any], str]:
    """``(inputs, dynamic shapes, kind)`` of the images of ``batch`` prompts, one image each
    (``layout``: the index in :data:`GRID_LAYOUTS` of a grid's patches)."""
    g = _generator(seed)
    kind = image_kind(model)
    names = set(_parameters(model.forward)) | set(_parameters(image_features_function(model)))
    if kind == "grid_thw":
        inputs, shapes = _grid_thw(model, config, batch, g, names, layout)
    elif kind == "image_sizes":
        inputs, shapes = _image_sizes(model, config, batch, g)
    elif kind == "naflex":
        inputs, shapes = _naflex(model, config, batch, g)
    elif kind == "target_sizes":
        inputs, shapes = _packed(model, config, batch, g)
    else:
        channels, height, width = image_shape(config)
        if kind == "pixel_attention_mask":  # Idefics: images per prompt, a mask of their valid pixels
            inputs = {"pixel_values": torch.rand(batch, 1, channels, height, width, generator=g),
                      "pixel_attention_mask": torch.ones(batch, 1, height, width, dtype=torch.bool)}
        elif kind == "pixel_mask":
            inputs = {"pixel_values": torch.rand(batch, channels, height, width, generator=g),
                      "pixel_mask": torch.ones(batch, height, width, dtype=torch.bool)}
        else:
            inputs = {"pixel_values": torch.rand(batch, channels, height, width, generator=g)}
        shapes = {k: {0: "batch"} for k in inputs}
    return inputs, shapes, kind


def flat_image_features(fn: Callable, pixel_values: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """``fn`` (a ``get_image_features``) on the images: the features of every image one after the other,
    ``(rows, hidden)`` (its ``pooler_output``, a list of per-image tensors concatenated)."""
    out = fn(pixel_values, **kwargs, return_dict=True)
    features = getattr(out, "pooler_output", out)
    if isinstance(features, (list, tuple)):
        return torch.cat([f.reshape(-1, f.shape[-1]) for f in features], dim=0)
    return features.reshape(-1, features.shape[-1])


def features_per_image(model: Any, images: dict[str, Any], batch: int) -> int:
    """The number of features ``get_image_features`` gives for one image: the number of
    placeholder tokens a prompt needs for it."""
    fn = image_features_function(model)
    if fn is None:
        raise NotImplementedError(f"{type(model).__name__} has no get_image_features: inputs not built generically")
    params = _parameters(fn)
    forwarded = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in images.items() if k != "pixel_values" and (
        k in params or forwarded and k in _parameters(model.forward) and k.startswith(IMAGE_PREFIXES))}
    with torch.no_grad():
        total = flat_image_features(fn, images["pixel_values"], **kwargs).shape[0]
    if total % batch:
        raise ValueError(f"{total} image features for {batch} images")
    return total // batch


def text_token_range(config: Any) -> tuple[int, int]:
    """The ids random text tokens are drawn from: below every special token of the configuration."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    high = text.vocab_size
    for key in SPECIAL_TOKENS:
        for owner in (config, text):
            value = getattr(owner, key, None)
            if isinstance(value, int) and 3 < value < high:
                high = value
    return min(3, high - 1), high


def image_text_inputs(model: Any, config: Any, batch: int, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(inputs, dynamic shapes)`` of ``batch`` prompts of one image each."""
    token = image_token(config)
    if token is None:
        raise NotImplementedError("no image_token_id or get_image_features: inputs not built generically")
    images, shapes, kind = image_inputs(model, config, batch, seed)
    try:
        # BLIP-2 / InstructBLIP: the Q-Former's queries stand for the image
        queries = getattr(config, "num_query_tokens", None)
        per_image = queries if isinstance(queries, int) else features_per_image(model, images, batch)
    except (RuntimeError, ValueError) as e:
        if kind != "grid_thw":
            raise
        for layout in range(1, len(GRID_LAYOUTS)):  # the first layout the vision tower takes
            images, shapes, kind = image_inputs(model, config, batch, seed, layout)
            try:
                per_image = features_per_image(model, images, batch)
                break
            except (RuntimeError, ValueError):
                continue
        else:
            raise e
    low, high = text_token_range(config)
    ids = torch.randint(low, high, (batch, per_image + 3), generator=_generator(seed))
    ids[:, 1 : 1 + per_image] = token
    names = _parameters(model.forward)
    inputs = {"input_ids": ids, **{k: v for k, v in images.items() if k in names}, "attention_mask": torch.ones_like(ids)}
    shapes = {"input_ids": {0: "batch"}, **{k: v for k, v in shapes.items() if k in names}, "attention_mask": {0: "batch"}}
    for name in ("token_type_ids", "mm_token_type_ids"):  # 1 on the image tokens
        if name in names:
            inputs[name] = (ids == token).to(torch.int64)
            shapes[name] = {0: "batch"}
    positions = rope_positions(model, inputs)
    if positions is not None and "position_ids" in names:
        inputs["position_ids"], shapes["position_ids"] = positions, {1: "batch"}
    for name, p in names.items():  # another required prompt (InstructBLIP's qformer_input_ids) and its mask
        if name.endswith("_input_ids") and name not in inputs and p.default is inspect.Parameter.empty:
            inputs[name] = torch.randint(low, high, (batch, 4), generator=_generator(seed + 1))
            shapes[name] = {0: "batch"}
            mask = name.replace("input_ids", "attention_mask")
            if mask in names:
                inputs[mask], shapes[mask] = torch.ones_like(inputs[name]), {0: "batch"}
    return inputs, shapes
