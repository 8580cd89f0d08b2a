"""Inputs and dynamic shapes per task for the tiny models of :mod:`fx2onnx.models.tasks`.

Each builder reads the sizes from the configuration (image size and channels of the
vision part, frames of a video model, mel bins or raw samples of an audio model) and
returns the keyword inputs of the model's forward for a batch size; the dynamic
shapes name the batch ``batch`` (``texts`` for the text side of a two-tower model).
:func:`build_task_case` makes the tiny model and its two input sets a row of the ``tasks``
library of :mod:`fx2onnx.models.library_zoo` needs (``python -m fx2onnx.models.library_zoo
tasks``); :func:`check_task_architecture` runs one such row.

.. code-block:: python

    from fx2onnx.models.tasks import get_task_architecture
    from fx2onnx.models.task_inputs import check_task_architecture

    row = check_task_architecture(get_task_architecture("image-classification", "vit"))
    print(row["success"], row["step"], row["max_abs"])
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
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
    from .image_inputs import needs_other_image_inputs, other_image_inputs

    if needs_other_image_inputs(model):  # patches (NaFlex), videos, a task prompt, pixel tokens
        return other_image_inputs(model, config, batch, seed)
    channels, height, width = image_shape(config)
    pixels = torch.rand(batch, channels, height, width, generator=_generator(seed))
    return {"pixel_values": pixels}, {"pixel_values": {0: "batch"}}


def _video_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    channels, height, width = image_shape(config)
    frames = getattr(_vision_config(config), "num_frames", None) or getattr(config, "num_frames", 4)
    pixels = torch.rand(batch, frames, channels, height, width, generator=_generator(seed))
    name = "pixel_values_videos" if "pixel_values_videos" in _forward_parameters(model) else "pixel_values"
    return {name: pixels}, {name: {0: "batch"}}


def _sub_config_value(config: Any, key: str) -> Any:
    """``config.<key>``, else the first sub-configuration's (encoder, audio...)."""
    value = getattr(config, key, None)
    if value is not None:
        return value
    for name in ("encoder_config", "audio_config", "speech_config"):
        sub = getattr(config, name, None)
        if sub is not None and getattr(sub, key, None) is not None:
            return getattr(sub, key)
    return None


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
    mel = _sub_config_value(config, "num_mel_bins")
    if "input_features" in names and mel:
        # an audio encoder in a sub-configuration (Parakeet, Canary, Granite Speech): its layout,
        # [batch, frames, mel] or [batch, mel, frames], is the first one its forward accepts
        start = {"decoder_input_ids": torch.full((1, 1), 3)} if "decoder_input_ids" in names else {}
        for shape in ((batch, 64, mel), (batch, mel, 64)):
            features = torch.randn(*shape, generator=g)
            try:
                with torch.no_grad():
                    model(input_features=features[:1], **start)
            except Exception:  # noqa: BLE001 - the other layout
                continue
            return {"input_features": features}, {"input_features": {0: "batch"}}
    if "input_values" in names:
        return {"input_values": torch.randn(batch, 4000, generator=g)}, {"input_values": {0: "batch"}}
    if "input_features" in names:  # another feature size (w2v-BERT, stacked mel frames): the one the model takes
        from .audio_inputs import encoder_features

        return encoder_features(model, config, batch, seed)
    raise NotImplementedError(f"{type(model).__name__} takes neither input_values nor input_features")


def _speech_seq2seq_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    from .audio_inputs import audio_text_inputs, is_audio_text_model

    if is_audio_text_model(model, config):  # a speech language model: audio placeholders in a prompt
        return audio_text_inputs(model, config, batch, seed)
    if not {"input_features", "input_values"} & set(_forward_parameters(model)):  # text to audio codes (Dia)
        from .audio_inputs import text_to_codes_inputs

        return text_to_codes_inputs(model, config, batch, seed)
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


def _vision_to_text_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A model without image placeholders (BLIP, GIT, Pix2Struct, vision encoder-decoders): the
    images, and the text it conditions on or the decoder's start where its forward takes them."""
    inputs, shapes = _image_inputs(model, config, batch, seed)
    names = _forward_parameters(model)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None) or 64
    g = _generator(seed + 1)
    for name in ("input_ids", "decoder_input_ids"):
        if name in names and (name == "input_ids" or getattr(config, "is_encoder_decoder", False)):
            inputs[name] = torch.randint(3, min(vocab, 64), (batch, 4), generator=g)
            shapes[name] = {0: "batch"}
    return inputs, shapes


def _image_text_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A prompt per image: a text token, the image's placeholder tokens (as many as its
    features, counted by the model's ``get_image_features``), two text tokens; the images in the
    form the model takes (:mod:`fx2onnx.models.vlm_inputs`)."""
    token = getattr(config, "image_token_id", None)
    if token is None:
        token = getattr(config, "image_token_index", None)
    if token is None and "pixel_values" in _forward_parameters(model):
        return _vision_to_text_inputs(model, config, batch, seed)
    from .vlm_inputs import image_text_inputs

    return image_text_inputs(model, config, batch, seed)


def _document_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """LayoutLM: tokens and their boxes ``[x0, y0, x1, y1]`` in 0..1000 (x0 <= x1, y0 <= y1)."""
    if "image" in _forward_parameters(model):
        raise NotImplementedError("the model takes the page image too: inputs not built yet")
    g = _generator(seed)
    seq = 6
    ids = torch.randint(3, config.vocab_size, (batch, seq), generator=g)
    corners = torch.randint(0, 500, (batch, seq, 2), generator=g)
    bbox = torch.cat([corners, corners + torch.randint(0, 500, (batch, seq, 2), generator=g)], dim=-1)
    inputs = {"input_ids": ids, "bbox": bbox, "attention_mask": torch.ones_like(ids)}
    if "pixel_values" in _forward_parameters(model):  # LayoutLMv3: the page image, input_size pixels
        size = getattr(config, "input_size", None) or image_shape(config)[1]
        inputs["pixel_values"] = torch.rand(batch, getattr(config, "num_channels", 3), size, size, generator=g)
    return inputs, {k: {0: "batch"} for k in inputs}


def _time_series_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``past_values [batch, context (+ the largest lag), channels]`` and, where the forward takes
    them, the observed mask (all observed) and the time features of the same length."""
    g = _generator(seed)
    names = _forward_parameters(model)
    length = getattr(config, "context_length", None) or 32
    lags = getattr(config, "lags_sequence", None)
    if lags:
        length += max(lags)
    channels = getattr(config, "num_input_channels", None) or getattr(config, "input_size", None) or 1
    # one series per row where the model has no channels (TimesFM) or a single one
    univariate = not any(hasattr(config, k) for k in ("num_input_channels", "input_size"))
    shape = (batch, length) if "freq" in names or univariate or channels == 1 and hasattr(config, "input_size") else (
        batch, length, channels)
    inputs = {"past_values": torch.randn(*shape, generator=g)}
    if "past_observed_mask" in names:
        inputs["past_observed_mask"] = torch.ones(*shape)
    if "past_time_features" in names:
        inputs["past_time_features"] = torch.randn(batch, length, config.num_time_features, generator=g)
    if "future_time_features" in names and getattr(config, "prediction_length", None):
        inputs["future_time_features"] = torch.randn(
            batch, config.prediction_length, config.num_time_features, generator=g)
    if "freq" in names:  # TimesFM: a frequency class per series
        inputs["freq"] = torch.zeros(batch, dtype=torch.int64)
    return inputs, {k: {0: "batch"} for k in inputs}


def _text_to_audio_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A few tokens of text; the decoder's start where the forward needs one (mel frames for
    SpeechT5, tokens for the others) and a speaker embedding where it takes one."""
    g = _generator(seed)
    names = _forward_parameters(model)
    if "input_ids" not in names:
        raise NotImplementedError(f"{type(model).__name__} takes no input_ids: inputs not built generically")
    try:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
    except ValueError:  # MusicGen: a text encoder and a decoder, the ids are the encoder's
        text = getattr(config, "text_encoder", config)
    vocab = getattr(text, "vocab_size", None) or getattr(config, "vocab_size", 32)
    ids = torch.randint(3, min(vocab, 64), (batch, 6), generator=g)
    inputs = {"input_ids": ids}
    if "attention_mask" in names:
        inputs["attention_mask"] = torch.ones_like(ids)
    if "decoder_input_values" in names and hasattr(config, "num_mel_bins"):
        inputs["decoder_input_values"] = torch.randn(batch, 4, config.num_mel_bins, generator=g)
    elif "decoder_input_ids" in names:
        # MusicGen: one row of audio codes per codebook, [batch x codebooks, seq]
        decoder = getattr(config, "decoder", None)
        codebooks = getattr(decoder, "num_codebooks", None) or 1
        inputs["decoder_input_ids"] = torch.randint(3, min(vocab, 64), (batch * codebooks, 3), generator=g)
    if "speaker_embeddings" in names and getattr(config, "speaker_embedding_dim", None):
        inputs["speaker_embeddings"] = torch.randn(batch, config.speaker_embedding_dim, generator=g)
    shapes = {k: {0: "batch"} for k in inputs}
    if inputs.get("decoder_input_ids") is not None and inputs["decoder_input_ids"].shape[0] != batch:
        shapes["decoder_input_ids"] = {0: "batch_codebooks"}  # batch x codebooks
    return inputs, shapes


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
    "time-series": _time_series_inputs,
    "text-to-audio": _text_to_audio_inputs,
}


def build_task_inputs(task: str, model: Any, config: Any, batch: int = 2, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(inputs, dynamic_shapes)`` of ``model`` for ``task``; NotImplementedError for a
    task or a model whose inputs are not built yet."""
    if task not in BUILDERS:
        raise NotImplementedError(f"inputs for task {task!r} are not built yet")
    return BUILDERS[task](model, config, batch, seed)


def check_task_architecture(arch: Any, exporter: str = "to_onnx") -> dict[str, Any]:
    """One row of the ``tasks`` library of :mod:`fx2onnx.models.library_zoo` for ``arch``: its
    tiny model exported by ``exporter`` with a dynamic batch (2) under
    ``torch_export_patches(patch_transformers=True)`` and compared with eager on a batch of 3.
    The row says ``success``, the ``step`` which failed (``config``, ``model``: the tiny model,
    its inputs or its eager forward, ``capture``, ``conversion``, ``validation``), ``error``
    and ``max_abs``."""
    from .library_zoo import run_row

    key = task_key(arch.task, arch.name)
    return run_row(TASKS_LIBRARY, key, arch.model_class_name, exporter, "batch")


#: the name of the transformers tasks in :mod:`fx2onnx.models.library_zoo`
TASKS_LIBRARY = "tasks"


def task_key(task: str, name: str) -> str:
    """The architecture key of a row: ``task/model_type``."""
    return f"{task}/{name}"


def task_entries() -> dict[str, str]:
    """``{"task/model_type": model class}`` of every (task, architecture) pair discovered."""
    from .tasks import discover_tasks

    return {task_key(a.task, a.name): a.model_class_name for a in discover_tasks()}


@dataclass
class TaskCase:
    """A tiny transformers model of one task with the inputs of a zoo row (keyword inputs only)."""

    #: the task
    family: str
    #: the model type
    name: str
    #: the tiny model, in eval mode
    model: torch.nn.Module
    #: the keyword inputs of the export
    export_kwargs: dict
    #: keyword inputs of other shapes, to check the dynamic model
    check_kwargs: dict
    #: the dynamic shapes of the inputs, by input name
    dynamic_shapes: dict
    #: the number of parameters of the model
    parameters: int = 0
    #: a positional input of the export (None for keyword inputs only)
    export_input: Any = None
    #: the positional input of the check (None for keyword inputs only)
    check_input: Any = None
    #: what the row should say about the model's inputs or configuration
    notes: list = field(default_factory=list)
    #: exported under ``torch_export_patches(patch_transformers=True)`` by both exporters
    patch_transformers: bool = True


def _at_step(e: Exception, step: str) -> Exception:
    with contextlib.suppress(AttributeError):
        e.step = step
    return e


class RandomEagerError(ValueError):
    """The eager model gives two results on the same inputs (dropout or noise in eval mode):
    no export can be compared with it."""


def _check_deterministic(model: torch.nn.Module, inputs: dict[str, Any]) -> None:
    from ..validation import compare_outputs, flatten_outputs

    first = flatten_outputs(model(**inputs))
    report = compare_outputs(first, flatten_outputs(model(**inputs)), atol=0.0, rtol=0.0)
    if not report.ok:
        raise RandomEagerError(
            f"eager gives another result on the same inputs (max abs diff {report.max_abs:.3g}): the model "
            "samples noise or applies dropout in eval mode, no export can be compared with it")


def build_task_case(key: str, shapes: str = "batch", seed: int = 0) -> TaskCase:
    """The tiny model of ``key`` (``task/model_type``) and its inputs: exported with a batch of 2
    (dynamic), checked on a batch of 3. An exception raised after the configuration was built
    carries ``step="model"`` (the model, its inputs or its eager forward failed)."""
    from .tasks import get_task_architecture, tiny_task_config, tiny_task_model

    if shapes != "batch":
        raise ValueError(f"the tasks rows only make the batch dynamic, got shapes={shapes!r}.")
    task, name = key.split("/", 1)
    arch = get_task_architecture(task, name)
    if arch.skip:
        raise ValueError(f"skipped: {arch.skip}")
    tiny_task_config(arch)
    try:
        model, config = tiny_task_model(arch, seed=seed)
        inputs, dynamic = build_task_inputs(task, model, config, 2, seed=seed)
        check, _ = build_task_inputs(task, model, config, 3, seed=seed + 1)
        with torch.no_grad():
            model(**inputs)
            _check_deterministic(model, check)
    except Exception as e:
        raise _at_step(e, "model") from None
    return TaskCase(family=task, name=name, model=model, export_kwargs=inputs, check_kwargs=check,
                    dynamic_shapes=dynamic, parameters=sum(p.numel() for p in model.parameters()))
