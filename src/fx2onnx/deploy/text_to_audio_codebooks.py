"""The models of a MusicGen folder (text-to-audio over codebooks): a text encoder, a decoder predicting one code of
each codebook a step, with its cache, and the audio codec's decoder turning the codes into the waveform.

* ``onnx/encoder_model.onnx``: ``input_ids``, ``attention_mask`` -> ``last_hidden_state`` (the T5 text encoder);
* ``onnx/decoder_model_merged.onnx``: the encoder-decoder machinery of :mod:`fx2onnx.deploy.seq2seq` (the cross
  keys and values computed when ``use_cache_branch`` is false, given when true), its ``input_ids`` of shape
  ``(batch, codebooks, decoder_sequence_length)`` and its ``logits`` ``(batch, codebooks, sequence, codes)``
  (optimum flattens the first two dimensions: ``batch * codebooks``, a size the exporter cannot tie to the encoder's
  batch); ``encoder_hidden_states`` are the text encoder's (``enc_to_dec_proj`` is in the decoder);
* ``onnx/encodec_decode.onnx``: ``audio_codes (1, codebooks, frames)`` -> ``audio_values (1, channels, samples)``,
  the codec's ``decode`` (one chunk, no scale) of one text's codes (optimum's takes a batch: the codec's graph holds
  a branch on it, which the capture narrows to 1 or 2). EnCodec computes its convolutions' paddings from integer
  buffers, data the capture cannot read: the export computes the same paddings from the convolutions' sizes
  (:func:`symbolic_codec_padding`); the check runs the model's own code.

The delay pattern between the codebooks and the classifier-free guidance are the loop's
(:mod:`fx2onnx.runtime.text_to_audio_codebooks`). Each piece is checked against the same wrapper in eager float32.

.. code-block:: python

    from fx2onnx.deploy import export_folder

    print(export_folder("musicgen_folder", "musicgen_onnx"))  # task text-to-audio, split codebooks
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

import torch

from .check import check_against_eager, eager_float32
from .result import FolderExport
from .seq2seq import (BATCH, DECODER_SEQ, ENCODER_FILE, ENCODER_SEQ, PAST, CrossPiece, DecoderPiece, MergedReference,
                      TEXT_SIZES, _Wrapper, export_seq2seq_pieces, finish_merged_folder, merged_decoder_names,
                      merged_input_sets, padded_text_sets)
from .speech import Piece

#: the model types whose folder is exported as these pieces
CODEBOOK_MODEL_TYPES = ("musicgen",)
#: the file of the audio codec's decoder (optimum's name)
AUDIO_DECODER_FILE = "onnx/encodec_decode.onnx"
#: the dimension of the codec's frames
FRAMES = "frames"

class TextEncoderPiece(_Wrapper):
    """The text encoder: ``input_ids``, ``attention_mask`` -> ``last_hidden_state``."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model.text_encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class CodebookCrossPiece(CrossPiece):
    """The cross keys and values of every decoder layer, the start token fed to each codebook."""

    def __init__(self, model: Any, start: int, codebooks: int):
        super().__init__(model, start)
        self.codebooks = codebooks

    def forward(self, encoder_hidden_states: torch.Tensor,
                encoder_attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        ids = torch.full((encoder_hidden_states.shape[0] * self.codebooks, 1), self.start, dtype=torch.int64,
                         device=encoder_hidden_states.device)
        self._step(encoder_hidden_states, encoder_attention_mask, ids, cache)
        return tuple(t for layer in cache.cross_attention_cache.layers for t in (layer.keys, layer.values))


class CodebookDecoderPiece(DecoderPiece):
    """One decoder step over ``input_ids (batch, codebooks, sequence)``: the logits ``(batch, codebooks, sequence,
    codes)`` and the new self-attention cache."""

    def forward(self, input_ids: torch.Tensor, encoder_hidden_states: torch.Tensor,  # type: ignore[override]
                encoder_attention_mask: torch.Tensor | None = None, past_keys: list[torch.Tensor] | None = None,
                past_values: list[torch.Tensor] | None = None, cross_keys: list[torch.Tensor] | None = None,
                cross_values: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
        batch, codebooks, length = input_ids.shape
        out = super().forward(input_ids.reshape(batch * codebooks, length), encoder_hidden_states,
                              encoder_attention_mask, past_keys, past_values, cross_keys, cross_values)
        logits = out[0]
        return (logits.reshape(batch, codebooks, length, logits.shape[-1]), *out[1:])


class AudioDecoderPiece(_Wrapper):
    """The codec's decoder: ``audio_codes (1, codebooks, frames)`` -> ``audio_values (1, channels, samples)``."""

    def forward(self, audio_codes: torch.Tensor) -> torch.Tensor:
        return self.model.audio_encoder.decode(audio_codes[None], [None]).audio_values


def start_code(folder: str, config: Any) -> int:
    """The decoder's start code: the generation config's ``decoder_start_token_id``, else the decoder's
    ``bos_token_id``."""
    import transformers  # deferred: heavy

    try:
        generation = transformers.GenerationConfig.from_pretrained(folder)
    except (OSError, ValueError):
        generation = None
    value = getattr(generation, "decoder_start_token_id", None)
    return int(value if value is not None else config.decoder.bos_token_id)


def _conv1d_symbolic(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """EnCodec's padded convolution, its paddings computed from the convolution's sizes (Python numbers and the
    symbolic length) instead of its integer buffers: the same values, captured without reading a tensor's data."""
    conv = self.conv
    kernel = (conv.kernel_size[0] - 1) * conv.dilation[0] + 1
    stride = conv.stride[0]
    total = kernel - stride
    length = hidden_states.shape[-1]
    frames = -((kernel - total - length) // stride)  # ceil((length - kernel + total) / stride)
    extra = frames * stride + kernel - total - length
    left, right = (total, extra) if self.causal else (total - total // 2, total // 2 + extra)
    if self.pad_mode != "reflect":
        hidden_states = torch.nn.functional.pad(hidden_states, (left, right), self.pad_mode)
    else:  # a zero tail first where the input is shorter than the reflection
        tail = torch.sym_max(max(left, right) - length + 1, 0)
        padded = torch.nn.functional.pad(torch.nn.functional.pad(hidden_states, (0, tail)), (left, right), "reflect")
        hidden_states = padded[..., :padded.shape[-1] - tail]
    hidden_states = conv(hidden_states)
    return self.norm(hidden_states) if self.norm_type == "time_group_norm" else hidden_states


@contextlib.contextmanager
def symbolic_codec_padding() -> Iterator[None]:
    """Replaces EnCodec's padded convolution by :func:`_conv1d_symbolic` for the export, restored afterwards."""
    from transformers.models.encodec import modeling_encodec  # deferred: heavy

    original = modeling_encodec.EncodecConv1d.forward
    modeling_encodec.EncodecConv1d.forward = _conv1d_symbolic
    try:
        yield
    finally:
        modeling_encodec.EncodecConv1d.forward = original


def codebook_pieces(model: Any, config: Any, start: int, dtype: torch.dtype,
                    seed: int = 0) -> tuple[list[Piece], dict[str, Any]]:
    """The text encoder, cross, decoder and audio decoder pieces of ``model`` with two input sets each, and the facts
    of the merge (as :func:`fx2onnx.deploy.seq2seq.seq2seq_pieces`' and ``codebooks``)."""
    from ..weights.empty import empty_weights

    g = torch.Generator().manual_seed(seed)
    codebooks = int(config.decoder.num_codebooks)
    codes, text_vocab = int(config.decoder.vocab_size), int(config.text_encoder.vocab_size)
    width = int(config.text_encoder.hidden_size if hasattr(config.text_encoder, "hidden_size")
                else config.text_encoder.d_model)
    sizes = list(TEXT_SIZES)
    encoder_sets = padded_text_sets(text_vocab, g)
    text_dims = {0: BATCH, 1: ENCODER_SEQ}

    def hidden_and_mask(s: int) -> dict[str, torch.Tensor]:
        batch, length = sizes[s]
        return {"encoder_hidden_states": torch.randn(batch, length, width, generator=g).to(dtype),
                "encoder_attention_mask": encoder_sets[s]["attention_mask"]}

    cross = CodebookCrossPiece(model, start, codebooks)
    probe = hidden_and_mask(0)
    meta = any(p.is_meta for p in model.parameters())
    with torch.no_grad(), (empty_weights(model) if meta else contextlib.nullcontext()):
        shapes = [tuple(t.shape) for t in cross(probe["encoder_hidden_states"], probe["encoder_attention_mask"])]
    layers, heads, head_dim = len(shapes) // 2, shapes[0][1], shapes[0][3]
    cross_dims = {"encoder_hidden_states": text_dims, "encoder_attention_mask": text_dims}

    def step(s: int, seq: int, past: int) -> dict[str, Any]:
        batch, length = sizes[s]

        def kv(n: int) -> list[torch.Tensor]:
            return [torch.randn(batch, heads, n, head_dim, generator=g).to(dtype) for _ in range(layers)]

        return {"input_ids": torch.randint(0, codes, (batch, codebooks, seq), generator=g), **hidden_and_mask(s),
                "past_keys": kv(past), "past_values": kv(past), "cross_keys": kv(length), "cross_values": kv(length)}

    cross_axis = {0: BATCH, 2: ENCODER_SEQ}
    decoder_dims = {"input_ids": {0: BATCH, 2: DECODER_SEQ}, **cross_dims,
                    "past_keys": [{0: BATCH, 2: PAST}] * layers, "past_values": [{0: BATCH, 2: PAST}] * layers,
                    "cross_keys": [cross_axis] * layers, "cross_values": [cross_axis] * layers}
    decoder_inputs, decoder_outputs, cross_names = merged_decoder_names(layers, True)
    # one text's codes at a time, as the pipeline decodes them (a dynamic batch is narrowed to [1, 2] by the codec)
    audio_sets = [{"audio_codes": torch.randint(0, codes, (1, codebooks, frames), generator=g)} for frames in (6, 9)]
    pieces = [
        Piece("encoder", ENCODER_FILE, TextEncoderPiece(model), encoder_sets[0], encoder_sets[1],
              {"input_ids": text_dims, "attention_mask": text_dims}, list(encoder_sets[0]), ["last_hidden_state"]),
        Piece("cross", "onnx/cross.onnx", cross, hidden_and_mask(0), hidden_and_mask(1), cross_dims,
              ["encoder_hidden_states", "encoder_attention_mask"], [f"cross_branch/{n}" for n in cross_names]),
        Piece("decoder", "onnx/decoder_step.onnx", CodebookDecoderPiece(model), step(0, 3, 4), step(1, 1, 6),
              decoder_dims, decoder_inputs, decoder_outputs),
        Piece("audio_decoder", AUDIO_DECODER_FILE, AudioDecoderPiece(model), audio_sets[0], audio_sets[1],
              {"audio_codes": {2: FRAMES}}, ["audio_codes"], ["audio_values"]),
    ]
    return pieces, {"layers": layers, "mask": True, "speech": False, "heads": heads, "head_dim": head_dim,
                    "start": start, "codebooks": codebooks}


def check_codebook_pieces(folder: str, out_dir: str, pieces: list[Piece], facts: dict[str, Any],
                          dtype: torch.dtype, atol: float, rtol: float) -> tuple[list[Any], list[str]]:
    """The text encoder and the audio decoder on their two input sets, the merged decoder on four (two sets, each
    branch), against the same wrappers around the eager float32 model."""
    eager = eager_float32(folder)
    encoder, audio = pieces[0], pieces[3]
    checks = check_against_eager(os.path.join(out_dir, encoder.filename), TextEncoderPiece(eager),
                                 [encoder.inputs, encoder.inputs2], dtype, atol=atol, rtol=rtol)
    eager.to(torch.float32)
    checks += check_against_eager(os.path.join(out_dir, audio.filename), AudioDecoderPiece(eager),
                                  [audio.inputs, audio.inputs2], dtype, atol=atol, rtol=rtol)
    eager.to(torch.float32)
    reference = MergedReference(CodebookCrossPiece(eager, facts["start"], facts["codebooks"]),
                                CodebookDecoderPiece(eager), facts["layers"])
    checks += check_against_eager(os.path.join(out_dir, facts["decoder_file"]), reference,
                                  merged_input_sets(pieces, facts), dtype, atol=atol, rtol=rtol)
    names = ["text encoder, first input set", "text encoder, second input set",
             "audio decoder, first input set", "audio decoder, second input set"]
    names += [f"decoder_model_merged, {s} input set, {b}" for s in ("first", "second")
              for b in ("use_cache_branch true", "use_cache_branch false (cross keys computed)")]
    return checks, names


def write_codebooks_folder(folder: str, out_dir: str, filename: str, config: Any, task: str, dtype: torch.dtype,
                           begin: float, say: Any, **options: Any) -> FolderExport:
    """Writes the export of the MusicGen of ``folder`` into ``out_dir`` (``filename`` is not used): the text
    encoder, the merged decoder and the audio decoder, the folder's files, ``fx2onnx.json`` (split ``codebooks``);
    checked against eager float32 when ``validate``."""
    if config.model_type not in CODEBOOK_MODEL_TYPES:
        raise ValueError(f"{config.architectures[0]} is a text-to-audio model of type {config.model_type!r}: "
                         f"exporting such a folder supports {list(CODEBOOK_MODEL_TYPES)} over codebooks today.")
    if int(getattr(config.decoder, "audio_channels", 1)) != 1:
        raise ValueError(f"{config.architectures[0]} generates {config.decoder.audio_channels} audio channels: "
                         "exporting such a folder supports mono MusicGen today.")
    start = start_code(folder, config)
    options = {k: v for k, v in options.items() if k != "cache_in_place"}
    with symbolic_codec_padding():
        pieces, facts = export_seq2seq_pieces(
            folder, out_dir, config, dtype, say=say, make=lambda model: codebook_pieces(model, config, start, dtype),
            **options)
    audio = pieces[3]
    extra = {"split": "codebooks", "codebooks": facts["codebooks"], "start": start,
             "audio_decoder": {"file": audio.filename, "inputs": audio.input_names, "outputs": audio.output_names}}
    return finish_merged_folder(folder, out_dir, config, task, dtype, begin, say, pieces, facts, extra,
                                check_codebook_pieces, family="codebooks", **options)
