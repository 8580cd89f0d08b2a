"""The four files transformers.js loads for an encoder-decoder merging the image into its encoder's prompt
(Florence-2: its ``Florence2ForConditionalGeneration``, an ``ImageTextToText`` model with ``is_encoder_decoder``),
and which our loop (:class:`fx2onnx.runtime.image_seq2seq.Seq2SeqImageGenerator`) runs too:

* ``onnx/vision_encoder.onnx``: ``pixel_values`` -> ``image_features (batch, image tokens, hidden)``, the model's
  ``get_image_features`` (the vision tower and its projection);
* ``onnx/embed_tokens.onnx``: ``input_ids`` -> ``inputs_embeds``, the text embeddings the encoder and the decoder
  share (scaled where the model scales them);
* ``onnx/encoder_model.onnx``: ``inputs_embeds`` (the prompt's embeddings, the image features over its
  placeholders), ``attention_mask`` -> ``last_hidden_state``;
* ``onnx/decoder_model_merged.onnx``: the merged decoder of :mod:`fx2onnx.deploy.seq2seq_generic` on
  ``inputs_embeds`` (the decoder's tokens through ``embed_tokens.onnx``) instead of ``input_ids``.

transformers.js concatenates the image features before the embeddings of its processor's ids (no placeholders);
transformers' processor writes the placeholders first, so both give the encoder the same rows. The pieces are
built from the generic split's (:func:`fx2onnx.deploy.seq2seq_generic.generic_merged_pieces`): its encoder and
decoder step replaced, the vision and embedding pieces added after them.

.. code-block:: python

    from fx2onnx.deploy.prompt_merging_split import four_file_pieces
    pieces, facts = four_file_pieces(model, config, features, torch.float32)
"""

from __future__ import annotations

import os
import types
from typing import Any

import torch

from .check import check_against_eager
from .seq2seq import BATCH, DECODER_SEQ, ENCODER_SEQ
from .speech import Piece
from .speech_generic import GenericSpeechDecoderPiece, UnsplittableEncoderDecoder, _OnModel

#: the files of the split besides the encoder and the merged decoder, by piece name
VISION_FILE, EMBED_FILE = "onnx/vision_encoder.onnx", "onnx/embed_tokens.onnx"
#: ``fx2onnx.json``'s ``layout`` of such a folder
LAYOUT = "vision_encoder + embed_tokens + encoder_model + decoder_model_merged"


def _merging_model(piece: _OnModel) -> Any:
    """The transformers model behind a :class:`fx2onnx.deploy.captioner.PromptMergingAsEncoderDecoder`."""
    return piece.model._model[0]


class ImageFeaturesPiece(_OnModel):
    """``pixel_values`` -> the projected image features the prompt's placeholders receive."""

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return _merging_model(self).get_image_features(pixel_values).pooler_output


class EmbedTokensPiece(_OnModel):
    """``input_ids`` -> the text embeddings (those the encoder and the decoder read)."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return _merging_model(self).get_input_embeddings()(input_ids)


class EmbedsEncoderPiece(_OnModel):
    """The text encoder on the merged embeddings: ``inputs_embeds``, ``attention_mask`` -> ``last_hidden_state``."""

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        encoder = _merging_model(self).get_encoder()
        return encoder(inputs_embeds=inputs_embeds, attention_mask=attention_mask, return_dict=True).last_hidden_state


def text_decoder(model: Any) -> torch.nn.Module:
    """The text decoder of a prompt-merging model (Florence-2's ``model.language_model.decoder``)."""
    return model.model.language_model.decoder


def shared_embeddings_reason(model: Any) -> str | None:
    """Why the decoder of ``model`` cannot read ``embed_tokens.onnx``'s embeddings (None: it reads them): its
    own embeddings are not the encoder's (another matrix, another scale)."""
    ours, theirs = model.get_input_embeddings(), getattr(text_decoder(model), "embed_tokens", None)
    if theirs is None or theirs.weight is not ours.weight or getattr(theirs, "embed_scale", 1.0) != getattr(
            ours, "embed_scale", 1.0):
        return "its decoder's token embeddings are not its encoder's (transformers.js feeds both embed_tokens.onnx's)"
    return None


class EmbedsDecoderPiece(GenericSpeechDecoderPiece):
    """One decoder step on the embeddings of its tokens (``inputs_embeds``), both caches given, its inputs in
    optimum's order -> the logits of the last position and the new self-attention cache."""

    def _forward_model(self, encoder_outputs: Any, inputs_embeds: torch.Tensor, cache: Any,
                       features_mask: torch.Tensor | None) -> Any:
        # the text decoder and the head, as the model's forward runs them (which, given encoder_outputs and
        # decoder_inputs_embeds, still sizes a start token from the encoder's inputs_embeds it no longer has)
        model = _merging_model(self)
        out = text_decoder(model)(inputs_embeds=inputs_embeds, encoder_hidden_states=encoder_outputs.last_hidden_state,
                                  encoder_attention_mask=features_mask, past_key_values=cache, use_cache=True)
        return types.SimpleNamespace(logits=model.get_output_embeddings()(out.last_hidden_state[:, -1:]))

    def forward(self, inputs_embeds: torch.Tensor, encoder_hidden_states: torch.Tensor,
                encoder_attention_mask: torch.Tensor | None = None, past_keys: list[torch.Tensor] | None = None,
                past_values: list[torch.Tensor] | None = None, cross_keys: list[torch.Tensor] | None = None,
                cross_values: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
        return super().forward(inputs_embeds, past_keys, past_values, encoder_hidden_states, None,
                               encoder_attention_mask, cross_keys, cross_values)


def four_file_pieces(pieces: list[Piece], facts: dict[str, Any], model: Any,
                     features: list[dict[str, torch.Tensor]], dtype: torch.dtype,
                     seed: int = 0) -> list[Piece]:
    """The generic split's ``[encoder, cross, decoder step]`` of ``model`` (a prompt-merging model seen as an
    encoder-decoder) made the four-file split: ``[encoder on inputs_embeds, cross, decoder step on inputs_embeds,
    vision_encoder, embed_tokens]`` (the first three as :func:`fx2onnx.deploy.seq2seq.export_seq2seq_pieces`
    merges them)."""
    encoder, cross, step = pieces
    reason = shared_embeddings_reason(_merging_model(cross.module))
    if reason:
        raise UnsplittableEncoderDecoder(f"{getattr(model.config, 'model_type', type(model).__name__)}: {reason}.")
    g = torch.Generator().manual_seed(seed)
    layout = facts["layout"]
    embed_dim = int(_merging_model(cross.module).get_input_embeddings().weight.shape[1])
    encoder_sets = []
    for s, f in enumerate(features):
        mask = f["attention_mask"].to(torch.int64).clone()
        if s == 1:  # a padded row
            mask[-1, -1] = 0
        encoder_sets.append({"inputs_embeds": torch.randn(*mask.shape, embed_dim, generator=g).to(dtype),
                             "attention_mask": mask})
    axes = {0: BATCH, 1: ENCODER_SEQ}

    def on_embeds(inputs: dict[str, Any]) -> dict[str, Any]:
        ids = inputs["input_ids"]
        rest = {k: v for k, v in inputs.items() if k != "input_ids"}
        return {"inputs_embeds": torch.randn(*ids.shape, embed_dim, generator=g).to(dtype), **rest}

    step_dims = {("inputs_embeds" if k == "input_ids" else k): v for k, v in step.dynamic_shapes.items()}
    step_dims["inputs_embeds"] = {0: BATCH, 1: DECODER_SEQ}
    names = ["inputs_embeds" if n == "input_ids" else n for n in step.input_names]
    pixels = [{"pixel_values": f["pixel_values"].to(dtype)} for f in features]
    ids = [{"input_ids": f["input_ids"]} for f in features]
    # the image size is the processor's (one); the batch varies
    pixel_axes = {i: BATCH if i == 0 else f"pixels_dim{i}" for i, (a, b) in enumerate(
        zip(pixels[0]["pixel_values"].shape, pixels[1]["pixel_values"].shape)) if i == 0 or a != b}
    seen = cross.module.model  # the model seen as an encoder-decoder
    return [
        Piece("encoder", encoder.filename, EmbedsEncoderPiece(seen, layout), encoder_sets[0], encoder_sets[1],
              {"inputs_embeds": axes, "attention_mask": axes}, ["inputs_embeds", "attention_mask"],
              ["last_hidden_state"]),
        cross,
        Piece("decoder", step.filename, EmbedsDecoderPiece(seen, layout), on_embeds(step.inputs),
              on_embeds(step.inputs2), step_dims, names, step.output_names),
        Piece("vision_encoder", VISION_FILE, ImageFeaturesPiece(seen, layout), pixels[0], pixels[1],
              {"pixel_values": pixel_axes}, ["pixel_values"], ["image_features"]),
        Piece("embed_tokens", EMBED_FILE, EmbedTokensPiece(seen, layout), ids[0], ids[1],
              {"input_ids": {0: BATCH, 1: "sequence_length"}}, ["input_ids"], ["inputs_embeds"]),
    ]


def check_four_files(out_dir: str, pieces: list[Piece], seen: Any, layout: Any, dtype: torch.dtype, atol: float,
                     rtol: float) -> tuple[list[Any], list[str]]:
    """The vision, embedding and encoder files, each on its two input sets, against the same wrappers around
    ``seen`` (the eager float32 model seen as an encoder-decoder)."""
    checks, names = [], []
    references = {"encoder": EmbedsEncoderPiece, "vision_encoder": ImageFeaturesPiece,
                  "embed_tokens": EmbedTokensPiece}
    for piece in [pieces[0], *pieces[3:]]:
        reference = references[piece.name](seen, layout)
        checks += check_against_eager(os.path.join(out_dir, piece.filename), reference,
                                      [piece.inputs, piece.inputs2], dtype, atol=atol, rtol=rtol)
        label = os.path.splitext(os.path.basename(piece.filename))[0]
        names += [f"{label}, first input set", f"{label}, second input set"]
    return checks, names


def four_file_metadata(pieces: list[Piece]) -> dict[str, Any]:
    """``fx2onnx.json``'s entries of the vision and embedding files."""
    return {p.name: {"file": p.filename, "inputs": p.input_names, "outputs": p.output_names} for p in pieces[3:]}
