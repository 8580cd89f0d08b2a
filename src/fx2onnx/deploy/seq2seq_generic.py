"""The encoder-decoders the generic split reads from the model (Speech2Text, Moonshine, TrOCR, Donut, any
``VisionEncoderDecoderModel``, BLIP's captioner, Florence-2) in the layout transformers.js and optimum load, as
:mod:`fx2onnx.deploy.seq2seq` writes Whisper's and T5's:

* ``onnx/encoder_model.onnx``: the processor's inputs (``input_features``, ``input_values`` or ``pixel_values``;
  ``attention_mask`` where the model reads it) -> ``last_hidden_state``; Florence-2's on ``inputs_embeds``, beside
  ``vision_encoder.onnx`` and ``embed_tokens.onnx`` (the four files of :mod:`fx2onnx.deploy.prompt_merging_split`);
* ``onnx/decoder_model_merged.onnx``: ``input_ids``, ``encoder_attention_mask`` (the processor's mask, as
  transformers.js and optimum feed it, where the model's forward derives the encoder's mask from it: Speech2Text,
  Florence-2), ``encoder_hidden_states``, ``use_cache_branch`` and the two caches of every layer
  (``past_key_values.i.decoder.key``, ``past_key_values.i.encoder.key``...) -> ``logits`` (the last position) and
  the same names with ``present``.

The pieces are found by :func:`fx2onnx.deploy.speech_generic.probe_layout` (one run of the model on its start token
with an empty ``EncoderDecoderCache``): the encoder, the cross keys and values from the encoder's output and one
decoder step with both caches given, the last two merged into one file
(:func:`fx2onnx.deploy.seq2seq.merge_decoder`). A model whose encoder returns a mask of its own (Moonshine's,
subsampled from the audio's) has a decoder without the audio's mask, as transformers.js and optimum run it (one
audio, or audios of one length); its encoder takes the audio's mask where that mask changes it on an unpadded audio
(Moonshine Streaming, Cohere ASR), as transformers' ASR pipeline passes it. A decoder which does not cache its
cross-attention keeps the previous pair (``encoder.onnx`` / ``decoder.onnx``): :func:`merged_layout_reason` says why.

.. code-block:: python

    from fx2onnx.deploy.seq2seq_generic import merged_layout_reason
    print(merged_layout_reason(layout))  # None: the merged layout applies
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import time
from typing import Any

import torch

from ..formats import FOLDER_METADATA
from ..weights.empty import empty_weights
from .captioner import as_encoder_decoder, captioner_generation, is_cross_attention_captioner
from .check import check_against_eager, eager_float32
from .prompt_merging_split import LAYOUT as FOUR_FILE_LAYOUT
from .prompt_merging_split import EmbedsDecoderPiece, check_four_files, four_file_metadata, four_file_pieces
from .seq2seq import (
    BATCH,
    DECODER_SEQ,
    ENCODER_SEQ,
    PAST,
    MergedReference,
    export_seq2seq_pieces,
    finish_merged_folder,
    merged_decoder_names,
    merged_input_sets,
)
from .speech import Piece
from .speech_generic import (
    GenericSpeechDecoderPiece,
    GenericSpeechEncoderPiece,
    SpeechLayout,
    _empty_cache,
    _OnModel,
    example_features,
    generic_split_reason,
    probe_layout,
    UnsplittableEncoderDecoder,
)
from .transformersjs import transformersjs_dtype, write_transformersjs_config


class MergedEncoderPiece(GenericSpeechEncoderPiece):
    """The encoder alone: the processor's inputs -> ``last_hidden_state``."""

    def forward(self, input_features: torch.Tensor | None = None, input_values: torch.Tensor | None = None,
                pixel_values: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                input_ids: torch.Tensor | None = None) -> torch.Tensor:
        encoder = self.model.get_encoder()
        kwargs = {k: v for k, v in (("input_features", input_features), ("input_values", input_values),
                                    ("pixel_values", pixel_values), ("input_ids", input_ids)) if v is not None}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        return encoder(**kwargs, return_dict=True).last_hidden_state


class MergedCrossPiece(_OnModel):
    """The cross-attention keys and values of every decoder layer (``k0, v0, k1...``) from the encoder's output:
    one step of the model on its start token with an empty cache, the cross part of the cache read."""

    def forward(self, encoder_hidden_states: torch.Tensor,
                encoder_attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        cache = _empty_cache()
        start = torch.full((encoder_hidden_states.shape[0], 1), self.layout.start, dtype=torch.int64,
                           device=encoder_hidden_states.device)
        self._forward_model(self.layout.encoder_output(last_hidden_state=encoder_hidden_states), start, cache,
                            encoder_attention_mask)
        return tuple(t for layer in cache.cross_attention_cache.layers for t in (layer.keys, layer.values))


class MergedDecoderPiece(GenericSpeechDecoderPiece):
    """One decoder step, both caches given, its inputs in optimum's order -> the logits of the last position and
    the new self-attention cache."""

    def forward(self, input_ids: torch.Tensor, encoder_hidden_states: torch.Tensor,
                encoder_attention_mask: torch.Tensor | None = None, past_keys: list[torch.Tensor] | None = None,
                past_values: list[torch.Tensor] | None = None, cross_keys: list[torch.Tensor] | None = None,
                cross_values: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
        return super().forward(input_ids, past_keys, past_values, encoder_hidden_states, None,
                               encoder_attention_mask, cross_keys, cross_values)


def merged_layout_reason(layout: SpeechLayout) -> str | None:
    """Why the merged layout does not apply to a model of ``layout`` (None: it does)."""
    if not layout.cross_layers:
        return "its decoder does not cache its cross-attention keys and values"
    if layout.encoder_mask:
        return "its encoder returns a mask the decoder reads (computed from the features' mask)"
    return None


def merged_layout(model: Any, config: Any, features: list[dict[str, torch.Tensor]]) -> tuple[
        SpeechLayout, list[dict[str, Any]], list[dict[str, torch.Tensor]]]:
    """``(layout, shapes of each set, features)`` of the merged split: an encoder returning a mask of its own
    (Moonshine) is probed again with a decoder given no mask; its encoder keeps the features' mask where that mask
    changes its output on an unpadded input (:func:`mask_changes_encoder`), as transformers' ASR pipeline passes it."""
    # the masks in int64, as transformers.js and optimum feed them
    features = [{k: v.to(torch.int64) if k == "attention_mask" else v for k, v in f.items()} for f in features]
    found = [probe_layout(model, config, f) for f in features]
    if found[0][0].encoder_mask and any("attention_mask" in f for f in features):
        unmasked = [{k: v for k, v in f.items() if k != "attention_mask"} for f in features]
        found = [probe_layout(model, config, f) for f in unmasked]
        if mask_changes_encoder(model, features[0]):
            found = [(dataclasses.replace(layout, features=(*layout.features, "attention_mask")), shapes)
                     for layout, shapes in found]
        else:
            features = unmasked
    reason = merged_layout_reason(found[0][0])
    if reason:
        raise UnsplittableEncoderDecoder(f"{getattr(config, 'model_type', type(model).__name__)}: {reason}.")
    return found[0][0], [f[1] for f in found], features


def mask_changes_encoder(model: Any, features: dict[str, torch.Tensor]) -> bool:
    """Whether the encoder of ``model`` gives another output on the longest sound of ``features`` (unpadded) with the
    feature extractor's mask than with none (Moonshine Streaming's sliding windows apply only with a mask, Cohere ASR's
    extractor masks frames of an unpadded sound; Moonshine's mask only hides the pads). A model on the meta device
    runs on seeded random weights."""
    encoder = model.get_encoder()
    if "attention_mask" not in inspect.signature(encoder.forward).parameters:
        return False
    row = int(features["attention_mask"].sum(dim=-1).argmax())
    inputs = {k: v[row:row + 1] for k, v in features.items() if k != "attention_mask"}
    mask = features["attention_mask"][row:row + 1]

    def differs() -> bool:
        with torch.no_grad():
            bare = encoder(**inputs, return_dict=True).last_hidden_state
            masked = encoder(**inputs, attention_mask=mask, return_dict=True).last_hidden_state
        return bare.shape != masked.shape or not torch.allclose(bare, masked, rtol=1e-3, atol=1e-5)

    if not any(p.is_meta for p in model.parameters()):
        return differs()
    generator = torch.Generator().manual_seed(0)
    with empty_weights(model) as empty:
        empty = set(empty)
        tensors = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
        for name, tensor in tensors:
            if name in empty and tensor.is_floating_point():
                tensor.data.copy_(torch.randn(tensor.shape, generator=generator) * 0.1)
        return differs()


def _axes(first: tuple[int, ...], second: tuple[int, ...], names: dict[int, str]) -> dict[int, str]:
    """Axis 0 and every axis of another size in the two sets, named by ``names``."""
    return {i: names.get(i, f"dim{i}") for i, (a, b) in enumerate(zip(first, second)) if i == 0 or a != b}


def generic_merged_pieces(model: Any, config: Any, features: list[dict[str, torch.Tensor]], dtype: torch.dtype,
                          seed: int = 0) -> tuple[list[Piece], dict[str, Any]]:
    """The encoder, cross and decoder pieces of ``model`` (seen as an encoder-decoder) with two input sets each,
    and the facts of the merge (:func:`fx2onnx.deploy.seq2seq.merge_decoder`)."""
    layout, shapes, features = merged_layout(model, config, features)
    g = torch.Generator().manual_seed(seed)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = int(getattr(text, "vocab_size", None) or 8)
    mask = layout.features_mask
    names = list(layout.features)
    encoder_sets = [{k: f[k] for k in names} for f in features]
    prompt = "input_ids" in names
    encoder_dims = {k: {i: (BATCH if i == 0 else ("prompt_length" if prompt and k in ("input_ids", "attention_mask")
                                                   else "frames")) for i in _axes(
        tuple(encoder_sets[0][k].shape), tuple(encoder_sets[1][k].shape), {})} for k in names}
    hidden = [s["encoder"][0] for s in shapes]
    hidden_axes = {i: d for i, d in _axes(hidden[0], hidden[1], {0: BATCH, 1: ENCODER_SEQ}).items() if i < 2}
    cross_shapes = [s["encoder"][1:] for s in shapes]
    heads, head_dim = cross_shapes[0][0][1], cross_shapes[0][0][3]
    cross_axis = {i: d for i, d in _axes(cross_shapes[0][0], cross_shapes[1][0], {0: BATCH, 2: ENCODER_SEQ}).items()
                  if i in (0, 2)}
    layers = len(shapes[0]["presents"]) // 2

    def hidden_and_mask(s: int) -> dict[str, torch.Tensor]:
        inputs = {"encoder_hidden_states": torch.randn(hidden[s], generator=g).to(dtype)}
        if mask:
            inputs["encoder_attention_mask"] = features[s]["attention_mask"]
        return inputs

    cross_dims: dict[str, Any] = {"encoder_hidden_states": hidden_axes}
    if mask:
        cross_dims["encoder_attention_mask"] = encoder_dims["attention_mask"]

    def step(s: int, seq: int, past: int) -> dict[str, Any]:
        inputs: dict[str, Any] = {"input_ids": torch.randint(0, vocab, (hidden[s][0], seq), generator=g),
                                  **hidden_and_mask(s)}
        present = shapes[s]["presents"][0]

        def kv(shape: tuple[int, ...]) -> list[torch.Tensor]:
            return [torch.randn(shape, generator=g).to(dtype) for _ in range(layers)]

        self_shape = (present[0], present[1], past, present[3])
        inputs.update(past_keys=kv(self_shape), past_values=kv(self_shape), cross_keys=kv(cross_shapes[s][0]),
                      cross_values=kv(cross_shapes[s][1]))
        return inputs

    past_axes = [{0: BATCH, 2: PAST}] * layers
    decoder_dims = {"input_ids": {0: BATCH, 1: DECODER_SEQ}, **cross_dims, "past_keys": past_axes,
                    "past_values": past_axes, "cross_keys": [cross_axis] * layers,
                    "cross_values": [cross_axis] * layers}
    decoder_inputs, decoder_outputs, cross_names = merged_decoder_names(layers, bool(mask))
    cross_sets = [hidden_and_mask(0), hidden_and_mask(1)]
    pieces = [
        Piece("encoder", "onnx/encoder_model.onnx", MergedEncoderPiece(model, layout), encoder_sets[0],
              encoder_sets[1], encoder_dims, names, ["last_hidden_state"]),
        Piece("cross", "onnx/cross.onnx", MergedCrossPiece(model, layout), cross_sets[0], cross_sets[1], cross_dims,
              list(cross_sets[0]), [f"cross_branch/{n}" for n in cross_names]),
        Piece("decoder", "onnx/decoder_step.onnx", MergedDecoderPiece(model, layout), step(0, 3, 4),
              step(1, 1, 6), decoder_dims, decoder_inputs, decoder_outputs),
    ]
    return pieces, {"layers": layers, "mask": mask, "speech": True, "heads": heads, "head_dim": head_dim,
                    "start": layout.start, "layout": layout}


def _make(folder: str, config: Any, dtype: torch.dtype) -> Any:
    """``make(model)`` of :func:`fx2onnx.deploy.seq2seq.export_seq2seq_pieces` for the generic split."""
    def make(model: Any) -> tuple[list[Piece], dict[str, Any]]:
        model = as_encoder_decoder(model)  # a captioner (BLIP, Florence-2) seen as an encoder-decoder
        seen = getattr(model, "config", config)
        reason = generic_split_reason(model, seen)
        if reason:  # before the example features are built
            raise UnsplittableEncoderDecoder(f"{getattr(config, 'model_type', type(model).__name__)}: {reason}.")
        features = example_features(folder, model, seen, dtype)
        pieces, facts = generic_merged_pieces(model, seen, features, dtype)
        if getattr(model, "merges_prompt", False):  # Florence-2: the four files transformers.js loads
            pieces = four_file_pieces(pieces, facts, model, features, dtype)
        facts["pieces_module"] = model
        return pieces, facts

    return make


def check_generic_merged(folder: str, out_dir: str, pieces: list[Piece], facts: dict[str, Any],
                         dtype: torch.dtype, atol: float, rtol: float) -> tuple[list[Any], list[str]]:
    """The encoder on its two input sets and the merged decoder on four (two sets, each branch) against the same
    wrappers around the eager float32 model."""
    eager = eager_float32(folder)
    layout = facts["layout"]
    seen = as_encoder_decoder(eager)
    encoder = pieces[0]
    four_files = len(pieces) > 3  # Florence-2's vision and embedding files (fx2onnx.deploy.prompt_merging_split)
    if four_files:
        checks, names = check_four_files(out_dir, pieces, seen, layout, dtype, atol, rtol)
    else:
        checks = check_against_eager(os.path.join(out_dir, encoder.filename), MergedEncoderPiece(seen, layout),
                                     [encoder.inputs, encoder.inputs2], dtype, atol=atol, rtol=rtol)
        names = ["encoder, first input set", "encoder, second input set"]
    eager.to(torch.float32)
    decoder = (EmbedsDecoderPiece if four_files else MergedDecoderPiece)(seen, layout)
    reference = MergedReference(MergedCrossPiece(seen, layout), decoder, facts["layers"])
    checks += check_against_eager(os.path.join(out_dir, facts["decoder_file"]), reference,
                                  merged_input_sets(pieces, facts), dtype, atol=atol, rtol=rtol)
    names += [f"decoder_model_merged, {s} input set, {b}" for s in ("first", "second")
              for b in ("use_cache_branch true", "use_cache_branch false (cross keys computed)")]
    return checks, names


def write_generic_seq2seq_folder(folder: str, out_dir: str, filename: str, config: Any, task: str,
                                 dtype: torch.dtype, begin: float, say: Any, **options: Any) -> Any:
    """Writes the merged layout of an encoder-decoder the generic split reads (the ``write_folder`` of the speech and
    image encoder-decoder families): ``split`` ``generic`` in ``fx2onnx.json``, a captioner's start and end tokens
    beside it (BLIP)."""
    begin = begin or time.perf_counter()
    pieces, facts = export_seq2seq_pieces(folder, out_dir, config, dtype, say=say,
                                          make=_make(folder, config, dtype), **options)
    model = facts.pop("pieces_module")
    extra: dict[str, Any] = {"split": "generic"}
    captioner = getattr(model, "_captioner", None)
    if captioner and is_cross_attention_captioner(captioner[0]):
        extra.update(captioner_generation(captioner[0]))
    result = finish_merged_folder(folder, out_dir, config, task, dtype, begin, say, pieces, facts, extra,
                                  check_generic_merged, family=("image encoder-decoder" if task == "image-text-to-text"
                                                                else "speech encoder-decoder"), **options)
    if len(pieces) > 3:  # the vision and embedding files in fx2onnx.json and transformers.js' block
        path = os.path.join(out_dir, FOLDER_METADATA)
        with open(path, encoding="utf-8") as f:
            metadata = json.load(f)
        metadata["layout"] = FOUR_FILE_LAYOUT
        metadata["pieces"].update(four_file_metadata(pieces))
        with open(path, "w", encoding="utf-8") as f:
            json.dump(metadata, f, indent=2)
        for piece in pieces[3:]:
            write_transformersjs_config(out_dir, piece.filename,
                                        os.path.isfile(os.path.join(out_dir, piece.filename + "_data")),
                                        transformersjs_dtype(options.get("quantize"), str(dtype)))
    return result
