"""Example inputs and dynamic shapes per task, from a model and its configuration.

Each builder reads the sizes from the configuration (image size and channels of the
vision part, frames of a video model, mel bins or raw samples of an audio model) and
returns the keyword inputs of the model's forward for a batch size; the dynamic
shapes name the batch ``batch`` (``texts`` for the text side of a two-tower model).
The tasks and their tiny models are in :mod:`fx2onnx.inputs.tasks`; the images of the image
tasks in :mod:`fx2onnx.inputs.image_inputs`, the audio of the audio tasks in
:mod:`fx2onnx.inputs.audio_inputs`, the prompts with images in :mod:`fx2onnx.inputs.vlm_inputs`.

.. code-block:: python

    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model
    from fx2onnx.inputs.task_inputs import build_task_inputs

    arch = get_task_architecture("image-classification", "vit")
    model, config = tiny_task_model(arch)
    inputs, dynamic_shapes = build_task_inputs(arch.task, model, config, batch=2)
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .audio_inputs import audio_text_inputs, encoder_features, is_audio_text_model, text_to_codes_inputs
from .common import (  # noqa: F401 (importable from here too)
    IMAGE_TASKS,
    _forward_parameters,
    _generator,
    _sub_config_value,
    _vision_config,
    image_shape,
)
from .image_inputs import _image_inputs, _image_text_inputs, _video_inputs, _vision_to_text_inputs  # noqa: F401


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
        return encoder_features(model, config, batch, seed)
    raise NotImplementedError(f"{type(model).__name__} takes neither input_values nor input_features")


def _speech_seq2seq_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    if is_audio_text_model(model, config):  # a speech language model: audio placeholders in a prompt
        return audio_text_inputs(model, config, batch, seed)
    if not {"input_features", "input_values"} & set(_forward_parameters(model)):  # text to audio codes (Dia)
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
