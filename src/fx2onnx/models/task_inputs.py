"""Inputs and dynamic shapes per task for the tiny models of :mod:`fx2onnx.models.tasks`.

Each builder reads the sizes from the configuration (image size and channels of the
vision part, frames of a video model, mel bins or raw samples of an audio model) and
returns the keyword inputs of the model's forward for a batch size; the dynamic
shapes name the batch ``batch`` (``texts`` for the text side of a two-tower model).
:func:`check_task_architecture` exports one architecture with :func:`fx2onnx.to_onnx`
(dynamic batch) and compares it with eager on another batch size.

.. code-block:: python

    from fx2onnx.models.tasks import get_task_architecture
    from fx2onnx.models.task_inputs import check_task_architecture

    row = check_task_architecture(get_task_architecture("image-classification", "vit"))
    print(row["status"], row.get("max_abs"))
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Callable

import torch

#: tasks whose inputs are a batch of images ``pixel_values [batch, channels, size, size]``
IMAGE_TASKS = (
    "image-classification",
    "object-detection",
    "semantic-segmentation",
    "instance-segmentation",
    "universal-segmentation",
    "depth-estimation",
)


def _vision_config(config: Any) -> Any:
    for key in ("vision_config", "backbone_config", "encoder_config"):
        sub = getattr(config, key, None)
        if sub is not None and hasattr(sub, "image_size"):
            return sub
    return config


def image_shape(config: Any) -> tuple[int, int, int]:
    """``(channels, height, width)`` of the images the configuration expects (32x32 by default)."""
    vision = _vision_config(config)
    size = getattr(vision, "image_size", None) or getattr(config, "image_size", None) or 32
    size = size[0] if isinstance(size, (list, tuple)) else size
    channels = getattr(vision, "num_channels", None) or getattr(config, "num_channels", 3)
    return channels, size, size


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _forward_parameters(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _image_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    channels, height, width = image_shape(config)
    pixels = torch.rand(batch, channels, height, width, generator=_generator(seed))
    return {"pixel_values": pixels}, {"pixel_values": {0: "batch"}}


def _video_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    channels, height, width = image_shape(config)
    frames = getattr(_vision_config(config), "num_frames", None) or getattr(config, "num_frames", 4)
    pixels = torch.rand(batch, frames, channels, height, width, generator=_generator(seed))
    return {"pixel_values": pixels}, {"pixel_values": {0: "batch"}}


def _audio_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    g = _generator(seed)
    names = _forward_parameters(model)
    if hasattr(config, "num_mel_bins") and hasattr(config, "max_length") and "input_values" in names:
        # spectrogram transformers: [batch, frames, mel bins]
        return {"input_values": torch.randn(batch, config.max_length, config.num_mel_bins, generator=g)}, {
            "input_values": {0: "batch"}
        }
    if "input_features" in names and hasattr(config, "input_feat_per_channel"):
        # Speech2Text: [batch, frames, features x channels]
        features = config.input_feat_per_channel * getattr(config, "input_channels", 1)
        return {"input_features": torch.randn(batch, 32, features, generator=g)}, {"input_features": {0: "batch"}}
    if "input_features" in names and hasattr(config, "num_mel_bins"):
        length = 2 * getattr(config, "max_source_positions", 32)
        return {"input_features": torch.randn(batch, config.num_mel_bins, length, generator=g)}, {
            "input_features": {0: "batch"}
        }
    if "input_values" in names:
        return {"input_values": torch.randn(batch, 4000, generator=g)}, {"input_values": {0: "batch"}}
    raise NotImplementedError(f"{type(model).__name__} takes neither input_values nor input_features")


def _speech_seq2seq_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    inputs, shapes = _audio_inputs(model, config, batch, seed)
    vocab = getattr(config, "vocab_size", 32)
    inputs["decoder_input_ids"] = torch.randint(3, vocab, (batch, 3), generator=_generator(seed + 1))
    shapes["decoder_input_ids"] = {0: "batch"}
    return inputs, shapes


def _two_tower_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Zero-shot image classification: ``texts`` label prompts against ``batch`` images."""
    text = getattr(config, "text_config", config)
    texts, seq = batch + 1, 5
    ids = torch.randint(3, min(getattr(text, "vocab_size", 64), 64), (texts, seq), generator=_generator(seed))
    inputs, shapes = _image_inputs(model, config, batch, seed)
    inputs.update(input_ids=ids, attention_mask=torch.ones_like(ids))
    shapes.update(input_ids={0: "texts"}, attention_mask={0: "texts"})
    return inputs, shapes


def _image_text_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A prompt per image: a text token, the image's placeholder tokens (as many as its
    features, counted by the model's ``get_image_features``), two text tokens."""
    token = getattr(config, "image_token_id", None)
    if token is None:
        token = getattr(config, "image_token_index", None)
    if token is None or not hasattr(model, "get_image_features"):
        raise NotImplementedError("no image_token_id or get_image_features: inputs not built generically")
    inputs, _ = _image_inputs(model, config, batch, seed)
    with torch.no_grad():
        features = model.get_image_features(inputs["pixel_values"], return_dict=True).pooler_output
    per_image = features[0].shape[-2] if isinstance(features, (list, tuple)) else features.shape[-2]
    vocab = config.get_text_config().vocab_size
    ids = torch.randint(1, min(vocab, token) if token < vocab else vocab, (batch, per_image + 3), generator=_generator(seed))
    ids[:, 1 : 1 + per_image] = token
    inputs.update(input_ids=ids, attention_mask=torch.ones_like(ids))
    shapes = {"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}, "pixel_values": {0: "batch"}}
    if "token_type_ids" in _forward_parameters(model):
        inputs["token_type_ids"] = (ids == token).to(torch.int64)
        shapes["token_type_ids"] = {0: "batch"}
    return inputs, shapes


def _document_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """LayoutLM: tokens and their boxes ``[x0, y0, x1, y1]`` in 0..1000 (x0 <= x1, y0 <= y1)."""
    if "pixel_values" in _forward_parameters(model) or "image" in _forward_parameters(model):
        raise NotImplementedError("the model takes the page image too: inputs not built yet")
    g = _generator(seed)
    seq = 6
    ids = torch.randint(3, config.vocab_size, (batch, seq), generator=g)
    corners = torch.randint(0, 500, (batch, seq, 2), generator=g)
    bbox = torch.cat([corners, corners + torch.randint(0, 500, (batch, seq, 2), generator=g)], dim=-1)
    inputs = {"input_ids": ids, "bbox": bbox, "attention_mask": torch.ones_like(ids)}
    return inputs, {k: {0: "batch"} for k in inputs}


#: task -> builder ``(model, config, batch, seed) -> (inputs, dynamic shapes)``
BUILDERS: dict[str, Callable[..., tuple[dict[str, Any], dict[str, Any]]]] = {
    **{task: _image_inputs for task in IMAGE_TASKS},
    "video-classification": _video_inputs,
    "audio-classification": _audio_inputs,
    "ctc": _audio_inputs,
    "speech-seq2seq": _speech_seq2seq_inputs,
    "zero-shot-image-classification": _two_tower_inputs,
    "image-text-to-text": _image_text_inputs,
    "document-question-answering": _document_inputs,
}


def build_task_inputs(task: str, model: Any, config: Any, batch: int = 2, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(inputs, dynamic_shapes)`` of ``model`` for ``task``; NotImplementedError for a
    task (text-to-audio, time-series) or a model whose inputs are not built yet."""
    if task not in BUILDERS:
        raise NotImplementedError(f"inputs for task {task!r} are not built yet")
    return BUILDERS[task](model, config, batch, seed)


def check_task_architecture(arch: Any, batch: int = 2, other_batch: int = 3, atol: float = 1e-4) -> dict[str, Any]:
    """Builds the tiny model of ``arch``, exports it with :func:`fx2onnx.to_onnx` (dynamic
    batch, inside ``torch_export_patches(patch_transformers=True)``) and compares it with
    eager on ``other_batch``. Returns a row: ``status`` (``ok``, ``mismatch``, ``inputs``:
    not built, ``model``: the tiny model or eager failed, ``export``, ``onnxruntime``),
    ``max_abs``, ``error``, ``export_s``."""
    from ..convert.api import to_onnx
    from ..patches import torch_export_patches
    from ..validation import validate
    from .tasks import tiny_task_model

    row: dict[str, Any] = {"task": arch.task, "name": arch.name, "status": "model"}
    try:
        model, config = tiny_task_model(arch)
        row["status"] = "inputs"
        inputs, shapes = build_task_inputs(arch.task, model, config, batch, seed=0)
        inputs2, _ = build_task_inputs(arch.task, model, config, other_batch, seed=1)
        row["status"] = "model"
        with torch.no_grad():
            model(**inputs2)
        row["status"] = "export"
        begin = time.perf_counter()
        with torch_export_patches(patch_transformers=True), torch.no_grad():
            onx = to_onnx(model, (), kwargs=inputs, dynamic_shapes=shapes)
        row["export_s"] = round(time.perf_counter() - begin, 1)
        row["status"] = "onnxruntime"
        report = validate(onx, model, (), inputs2, atol=atol, rtol=1e-3)
        row["max_abs"] = float(report.max_abs)
        row["status"] = "ok" if report.ok else "mismatch"
    except Exception as e:  # noqa: BLE001 - every failure is a result
        row["error"] = (type(e).__name__ + ": " + str(e)).splitlines()[0][:300]
    return row
