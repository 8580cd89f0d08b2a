"""Inputs of the speech models :mod:`fx2onnx.zoo.task_inputs` does not build from the configuration alone.

Two kinds:

* an encoder whose feature size is not ``num_mel_bins`` (w2v-BERT and Seamless take
  ``feature_projection_input_dim`` features, Granite Speech 5 stacks four mel frames): the
  candidate layouts ``[batch, frames, features]`` and ``[batch, features, frames]`` over the
  feature sizes the configuration names (and small multiples of the mel bins) are tried on the
  model's audio encoder, the first it accepts is kept (:func:`audio_features`);
* a speech language model (Granite Speech, Qwen3-ASR, Voxtral, FunASR-Nano): a prompt
  with as many ``audio_token_id`` placeholders as the audio encoder gives embeddings for the
  features of one sample, counted by the model's own ``get_audio_features``
  (:func:`audio_text_inputs`).

.. code-block:: python

    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model
    from fx2onnx.zoo.task_inputs import build_task_inputs

    arch = get_task_architecture("speech-seq2seq", "qwen3_asr")
    model, config = tiny_task_model(arch)
    inputs, dynamic_shapes = build_task_inputs(arch.task, model, config, batch=2)
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

#: frames of the example features (a multiple of the usual subsampling factors 2, 4, 8)
FRAMES = 64
#: sub-configurations holding the audio encoder's sizes
AUDIO_SUBCONFIGS = ("audio_config", "encoder_config", "speech_config", "audio_encoder_config")
#: special tokens standing for audio embeddings in a prompt
AUDIO_TOKENS = ("audio_token_id", "audio_token_index", "audio_pad_token_id")


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _parameters(fn: Callable) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def _configs(config: Any) -> list[Any]:
    """The configuration and its audio sub-configurations."""
    found = [config]
    for name in AUDIO_SUBCONFIGS:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            found.append(sub)
    return found


def feature_sizes(config: Any) -> list[int]:
    """Candidate sizes of one feature frame, most likely first: the sizes the configurations
    name (``feature_projection_input_dim``, ``input_dim``, ``num_mel_bins``, ``feature_size``),
    the model's width (hidden features given as they are), then stacked mel frames
    (``num_stacked_frames``, 2x, 4x, 8x)."""
    sizes: list[int] = []
    for c in _configs(config):
        for key in ("feature_projection_input_dim", "input_dim", "num_mel_bins", "feature_size", "input_feat_per_channel"):
            value = getattr(c, key, None)
            if isinstance(value, int) and value > 0 and value not in sizes:
                sizes.append(value)
    for key in ("d_model", "hidden_size"):  # hidden features given as they are (Pop2Piano)
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0 and value not in sizes:
            sizes.append(value)
    mels = [getattr(c, "num_mel_bins", None) for c in _configs(config)]
    stacked = [getattr(c, "num_stacked_frames", None) for c in _configs(config)]
    for mel in [m for m in mels if isinstance(m, int) and m > 0]:
        for k in [*(s for s in stacked if isinstance(s, int) and s > 1), 2, 4, 8]:
            if k * mel not in sizes:
                sizes.append(k * mel)
    return sizes


def _feature_mask(fn: Callable, features: torch.Tensor, frames_axis: int) -> dict[str, torch.Tensor]:
    """``input_features_mask`` (all frames valid) where ``fn`` requires it."""
    p = _parameters(fn).get("input_features_mask")
    if p is not None and p.default is inspect.Parameter.empty:
        return {"input_features_mask": torch.ones(features.shape[0], features.shape[frames_axis], dtype=torch.int64)}
    return {}


def _frames(config: Any, frames: int) -> int:
    """``frames`` rounded up to the chunk an encoder splits its features in (Qwen3-ASR: ``2 * n_window``)."""
    for c in _configs(config):
        window = getattr(c, "n_window", None)
        if isinstance(window, int) and window > 0:
            return -(-frames // (2 * window)) * 2 * window
    return frames


def audio_features(try_fn: Callable[[torch.Tensor, dict], Any], config: Any, batch: int, seed: int,
                   frames: int = FRAMES, signature: Callable | None = None,
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor], Any]:
    """``(features, extra inputs, output of try_fn)``: the first layout ``[batch, frames, size]`` or
    ``[batch, size, frames]`` over :func:`feature_sizes` that ``try_fn(features[:1], extra)`` accepts;
    ``extra`` holds ``input_features_mask`` where ``signature`` (the function ``try_fn`` calls)
    requires one."""
    errors = []
    frames = _frames(config, frames)
    for size in feature_sizes(config):
        for axis, shape in ((1, (batch, frames, size)), (2, (batch, size, frames))):
            features = torch.randn(*shape, generator=_generator(seed))
            extra = _feature_mask(signature or try_fn, features, axis)
            try:
                with torch.no_grad():
                    out = try_fn(features[:1], {k: v[:1] for k, v in extra.items()})
            except Exception as e:  # noqa: BLE001 - another layout
                errors.append(f"{list(shape)}: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                continue
            return features, extra, out
    raise NotImplementedError("no feature layout accepted by the audio encoder: " + "; ".join(errors[:4]))


def encoder_features(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``input_features`` of an encoder (CTC, classification, speech-to-text) whose feature size is
    not ``num_mel_bins``: the first layout the model's forward accepts, with a decoder start
    where the forward takes one."""
    names = _parameters(model.forward)
    start = {"decoder_input_ids": torch.full((1, 1), 3)} if "decoder_input_ids" in names else {}

    def run(features: torch.Tensor, extra: dict) -> Any:
        return model(input_features=features, **extra, **start)

    features, extra, _ = audio_features(run, config, batch, seed)
    inputs = {"input_features": features, **extra}
    return inputs, {k: {0: "batch"} for k in inputs}


def audio_token(config: Any) -> int | None:
    for key in AUDIO_TOKENS:
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def _count_embeddings(out: Any, hidden: int) -> int:
    """Audio embeddings the encoder's output holds for one sample."""
    if hasattr(out, "pooler_output") and out.pooler_output is not None:
        out = out.pooler_output
    elif hasattr(out, "last_hidden_state"):
        out = out.last_hidden_state
    if isinstance(out, (list, tuple)):
        out = torch.cat([o.reshape(-1, o.shape[-1]) for o in out])
    return out.numel() // out.shape[-1] if out.shape[-1] == hidden or hidden is None else out.numel() // hidden


def audio_text_inputs(model: Any, config: Any, batch: int, seed: int,
                      longer: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    """A speech language model: ``input_features`` and a prompt per sample, a text token, as many
    ``audio_token_id`` placeholders as the encoder gives embeddings for one sample (counted by
    ``get_audio_features``), two text tokens; ``longer`` times the frames (or samples) of the default."""
    token = audio_token(config)
    if token is None or not hasattr(model, "get_audio_features"):
        raise NotImplementedError(f"{type(model).__name__}: no audio token or get_audio_features")
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = getattr(text, "hidden_size", None)
    names = _parameters(model.forward)
    # a flag choosing between sampling and the mean of a variational encoder (VibeVoice): the mean
    deterministic = {"sample": False} if "sample" in names else {}
    if "input_features" not in names:  # raw audio (VibeVoice): the first length the encoder takes
        errors = []
        for shape in [(batch, c, n * longer) for n in (3200, 4000, 16000) for c in (None, 1)]:
            values = torch.randn(*[d for d in shape if d is not None], generator=_generator(seed))
            length = list(values.shape[1:])
            try:
                with torch.no_grad():
                    out = model.get_audio_features(values[:1], **deterministic)
            except Exception as e:  # noqa: BLE001 - another length
                errors.append(f"{length}: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                continue
            features, extra = values, {}
            break
        else:
            raise NotImplementedError("no audio length accepted by the audio encoder: " + "; ".join(errors))
        key = "input_values"
    else:
        def run(features: torch.Tensor, extra: dict) -> Any:
            return model.get_audio_features(features, **extra)

        features, extra, out = audio_features(run, config, batch, seed, frames=FRAMES * longer,
                                              signature=model.get_audio_features)
        key = "input_features"
    per_sample = _count_embeddings(out, hidden)
    vocab = text.vocab_size
    high = min(vocab, token) if token < vocab else vocab
    ids = torch.randint(3, max(high, 4), (batch, per_sample + 3), generator=_generator(seed + 1))
    ids[:, 1:1 + per_sample] = token
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), key: features, **extra}
    shapes = {k: {0: "batch"} for k in inputs}
    if deterministic:  # a constant
        inputs.update(deterministic)
        shapes.update({k: None for k in deterministic})
    return inputs, shapes


def is_audio_text_model(model: Any, config: Any) -> bool:
    """A model taking ``input_ids`` and ``input_features`` (or raw ``input_values``) merged through
    audio placeholder tokens."""
    names = _parameters(model.forward)
    return ("input_ids" in names and ("input_features" in names or "input_values" in names)
            and audio_token(config) is not None and hasattr(model, "get_audio_features"))


def text_to_codes_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A text-to-speech model the speech-to-text mappings list (Dia): text tokens for the encoder
    and a few frames of audio codes for the decoder, ``[batch, frames, channels]``."""
    names = _parameters(model.forward)
    if "input_ids" not in names or "decoder_input_ids" not in names:
        raise NotImplementedError(f"{type(model).__name__} takes no audio and no text and audio codes")
    g = _generator(seed)
    encoder = getattr(config, "encoder_config", config)
    decoder = getattr(config, "decoder_config", config)
    channels = getattr(decoder, "num_channels", None) or 1
    ids = torch.randint(3, min(getattr(encoder, "vocab_size", 64), 64), (batch, 6), generator=g)
    codes = torch.randint(3, min(getattr(decoder, "vocab_size", 64), 64), (batch, 3, channels), generator=g)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": codes}
    return inputs, {k: {0: "batch"} for k in inputs}
