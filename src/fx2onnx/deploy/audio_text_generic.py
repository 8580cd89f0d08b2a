"""The pieces of any speech language model which writes its audio features over placeholder tokens
of a decoder LLM's prompt (Granite Speech, Fun-ASR-Nano, VibeVoice-ASR...), read from the model
instead of a list of families: the audio counterpart of :mod:`fx2onnx.deploy.image_text_generic`.

A model qualifies when its configuration names an audio placeholder (``audio_token_id`` or
``audio_token_index``), the model has ``get_audio_features``, a base model (``model.model``) with a
``language_model`` and an ``lm_head``, and is no encoder-decoder.

* ``audio.onnx``: the audio inputs ``get_audio_features`` names (``input_features`` with
  ``input_features_mask``, or ``input_values`` with ``padding_mask``) -> ``audio_features (rows,
  hidden)``, the features of every audio one after the other; a constant flag of the encoder is the
  one of the examples (VibeVoice's ``sample=False``: the mean of its variational encoder);
* ``decoder.onnx``: ``input_ids``, ``attention_mask``, ``position_ids``, the cache and
  ``audio_features`` -> ``logits`` of the last position and the new cache; the placeholders' ids
  become 0 before the embedding (Granite's audio token lies outside its LLM's vocabulary) and the
  features are written over them (``masked_scatter``), as the models do.

The loop is :class:`fx2onnx.runtime.audio_text.AudioTextGenerator`. What cannot be split this way
raises :class:`UnsplittableAudioModel` naming the reason.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import torch

from ..inputs.audio_inputs import audio_text_inputs, audio_token
from ..weights.empty import empty_weights
from .speech import Piece
from .vision import ImageTextDecoderPiece, decoder_piece, last_logits

#: the audio inputs an audio piece may take, in its signature's order
AUDIO_INPUTS = ("input_features", "input_values", "input_features_mask", "padding_mask")


class UnsplittableAudioModel(ValueError):
    """A speech language model the generic audio split does not cover, with the reason."""


def _named_parameters(fn: Any) -> set[str]:
    """The parameters ``fn`` names (transformers' decorators unwrapped), ``**kwargs`` left out."""
    return {n for n, p in inspect.signature(inspect.unwrap(fn)).parameters.items()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def audio_split_reason(model: Any, config: Any) -> str | None:
    """Why ``model`` cannot be split into an audio piece and a decoder writing its features over
    placeholder tokens, None when it can."""

    if getattr(config, "is_encoder_decoder", False):
        return "it is an encoder-decoder (the generic encoder-decoder split takes it)"
    if audio_token(config) is None:
        return "its configuration names no audio placeholder token (the audio is not written over the prompt)"
    base = getattr(model, "model", None)
    if not callable(getattr(base, "get_audio_features", None)):
        return "its base model has no get_audio_features"
    if getattr(base, "language_model", None) is None or getattr(model, "lm_head", None) is None:
        return "it has no base model with a language_model and no lm_head"
    if not set(AUDIO_INPUTS[:2]) & _named_parameters(base.get_audio_features):
        return "its get_audio_features takes neither input_features nor input_values"
    return None


class GenericAudioPiece(torch.nn.Module):
    """``get_audio_features`` on the audio inputs: ``(rows, hidden)``, every audio's features one
    after the other; ``constants``: keywords of the examples which are no tensors (a flag)."""

    def __init__(self, model: Any, constants: dict[str, Any] | None = None):
        super().__init__()
        self.model = model.model
        self.base_model_prefix = "model"
        self.constants = dict(constants or {})

    def forward(self, input_features: torch.Tensor | None = None, input_values: torch.Tensor | None = None,
                input_features_mask: torch.Tensor | None = None,
                padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        given = {"input_features": input_features, "input_values": input_values,
                 "input_features_mask": input_features_mask, "padding_mask": padding_mask}
        out = self.model.get_audio_features(**{k: v for k, v in given.items() if v is not None}, **self.constants,
                                            return_dict=True)
        features = out.pooler_output
        if isinstance(features, (list, tuple)):
            return torch.cat([f.reshape(-1, f.shape[-1]) for f in features], dim=0)
        return features.reshape(-1, features.shape[-1])


class AudioTextDecoderPiece(ImageTextDecoderPiece):
    """The language model on token ids whose audio placeholders take the audio features."""

    def __init__(self, model: Any, token: int):
        torch.nn.Module.__init__(self)
        self.model = model.model
        self.lm_head = model.lm_head
        self.base_model_prefix = "model"
        self.image_token_id, self.token_types, self.video_token_id = int(token), False, None
        #: the placeholder the graph writes the features over, read by the loop from ``fx2onnx.json``
        self.audio_token_id = int(token)

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, audio_features):
        found = input_ids == self.image_token_id
        # the placeholders' embeddings are overwritten: id 0 keeps an id outside the LLM's vocabulary valid
        embeds = self.model.get_input_embeddings()(torch.where(found, torch.zeros_like(input_ids), input_ids))
        embeds = embeds.masked_scatter(found.unsqueeze(-1).expand_as(embeds), audio_features.to(embeds.dtype))
        out = self.model.language_model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids,
                                        past_key_values=past_key_values, use_cache=True)
        return {"logits": last_logits(self.lm_head, out.last_hidden_state), "past_key_values": out.past_key_values}


def example_audio(model: Any, config: Any, dtype: torch.dtype, seed: int = 0) -> list[dict[str, Any]]:
    """Two sets of audio inputs of batch 2 and 3 (the task zoo's: :func:`fx2onnx.inputs.audio_inputs.audio_text_inputs`,
    on uninitialized CPU storage for a model on the meta device), the second one twice as long when the
    encoder takes it (else its length is the only one the piece takes: Whisper's 30 s window), keyed as
    the audio piece's inputs, the flags which are no tensors under ``"constants"``."""

    meta = any(p.is_meta for p in model.parameters())
    sets = []
    with empty_weights(model) if meta else contextlib.nullcontext():
        for batch in (2, 3):
            try:
                inputs, _ = audio_text_inputs(model, config, batch, seed + batch, longer=batch - 1)
            except NotImplementedError:  # an encoder of one length
                inputs, _ = audio_text_inputs(model, config, batch, seed + batch)
            audio = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in inputs.items()
                     if k in AUDIO_INPUTS and isinstance(v, torch.Tensor)}
            audio["constants"] = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
            sets.append(audio)
    return sets


def audio_axes(first: torch.Tensor, second: torch.Tensor) -> dict[int, str]:
    """The dynamic axes of an audio input from its two example sets: the batch, and every axis of
    another size in the second set (the audio's length), named by its first size so that the
    features and their mask share it."""
    axes = {0: "batch"}
    for axis in range(1, first.dim()):
        if first.shape[axis] != second.shape[axis]:
            axes[axis] = f"audio_{first.shape[axis]}"
    return axes


def generic_audio_pieces(model: Any, config: Any, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[Piece]:
    """The audio and decoder pieces of a speech language model (:func:`audio_split_reason` is None), with
    example inputs of two shapes: two audios then three for the audio piece, the decoder on a prompt
    holding one audio's placeholders then on one later token.

    :raises UnsplittableAudioModel: with :func:`audio_split_reason`, or when the audio encoder does not run
    """

    model_type = getattr(config, "model_type", type(model).__name__)
    reason = audio_split_reason(model, config)
    if reason:
        raise UnsplittableAudioModel(f"{model_type}: {reason}.")
    try:
        first, second = example_audio(model, config, dtype, seed)
    except Exception as e:  # noqa: BLE001 - said in one line
        raise UnsplittableAudioModel(f"{model_type}: its audio inputs could not be built ({type(e).__name__}: "
                                     f"{str(e).splitlines()[0][:200] if str(e) else ''}).") from None
    constants = first.pop("constants")
    second.pop("constants")
    audio = GenericAudioPiece(model, constants)
    meta = any(p.is_meta for p in model.parameters())
    with torch.no_grad(), empty_weights(model) if meta else contextlib.nullcontext():
        per_audio = audio(**{k: v.float() if v.is_floating_point() else v for k, v in first.items()}).shape[0] // 2
    names = [n for n in AUDIO_INPUTS if n in first]
    shapes = {n: audio_axes(first[n], second[n]) for n in names}
    pieces = Piece("audio", "audio.onnx", audio, first, second, shapes, names, ["audio_features"])
    g = torch.Generator().manual_seed(seed)
    token = int(audio_token(config))
    decoder = decoder_piece(model, config, dtype, g, per_audio, token=token, features="audio_features",
                            module=AudioTextDecoderPiece(model, token))
    return [pieces, decoder]
