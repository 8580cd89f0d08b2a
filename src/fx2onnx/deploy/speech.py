"""The pieces of a speech-seq2seq folder (Whisper): an encoder and a decoder with its cache.

A Whisper model runs its encoder once on the audio features, then its decoder once per
token. The decoder's cross-attention reads keys and values projected from the encoder's
output: they do not change while generating, so they are computed **once, in the encoder
piece**, not in the decoder (the projections' weights then live in the encoder's file only,
and the decoder needs one signature for the prompt and for every later token):

* ``encoder.onnx``: ``input_features (batch, mel, frames)`` -> ``cross_key_<i>``,
  ``cross_value_<i>`` ``(batch, heads, encoder_seq, head_dim)``, one pair per decoder layer;
* ``decoder.onnx``: ``input_ids``, ``position_ids``, the self-attention cache
  ``past_key_values_key_<i>`` / ``past_key_values_value_<i>`` (empty for the prompt) and
  the cross keys and values -> ``logits`` and ``present_key_<i>`` / ``present_value_<i>``
  (the pairs written in the model's ``fx2onnx.cache`` metadata, as for a decoder LLM, so
  :class:`fx2onnx.runtime.OnnxGenerator` runs it; the cross keys and values are inputs fed
  unchanged at every step).

Both pieces are :class:`torch.nn.Module` wrappers around the transformers model, whose
parameters keep the checkpoint's names (the weights are streamed from the safetensors files
by :func:`fx2onnx.weights.to_onnx_from_checkpoint`); the decoder piece builds the
``EncoderDecoderCache`` transformers expects from its flat inputs, its cross-attention part
marked as already computed, so the model's own code runs unchanged. Each piece is checked
against the same wrapper in eager float32 (:func:`fx2onnx.deploy.check.check_against_eager`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..weights import to_onnx_from_checkpoint
from ..weights.export import model_from_checkpoint_config
from .check import check_against_eager, in_place_input_sets
from .saved_model import rename_values

#: the prefixes of the inputs and outputs of the pieces
CROSS_KEY, CROSS_VALUE = "cross_key_", "cross_value_"
PAST_KEY, PAST_VALUE = "past_key_values_key_", "past_key_values_value_"
PRESENT_KEY, PRESENT_VALUE = "present_key_", "present_value_"


def _cross_attentions(model: Any) -> list[Any]:
    """The cross-attention modules of the decoder layers (a ValueError when there are none)."""
    layers = list(getattr(model.get_decoder(), "layers", []))
    attentions = [getattr(layer, "encoder_attn", None) for layer in layers]
    if not layers or any(a is None or not hasattr(a, "k_proj") or not hasattr(a, "v_proj") for a in attentions):
        raise ValueError(f"{type(model).__name__}: its decoder layers have no cross-attention encoder_attn.k_proj / "
                         "v_proj; exporting a speech folder supports Whisper-like models today.")
    return attentions


class SpeechEncoderPiece(torch.nn.Module):
    """The encoder and the cross-attention keys and values of every decoder layer.

    The attribute ``model`` is the base model (``model.encoder``, ``model.decoder``), so that
    the parameters have the names of the checkpoint of the model with its head.
    """

    def __init__(self, model: Any):
        super().__init__()
        self.model = model.model
        self.base_model_prefix = "model"
        self._attentions = _cross_attentions(model)

    def forward(self, input_features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden = self.model.encoder(input_features=input_features).last_hidden_state
        batch = hidden.shape[0]
        result = []
        for attention in self._attentions:
            shape = (batch, -1, attention.num_heads, attention.head_dim)
            result.append(attention.k_proj(hidden).view(shape).transpose(1, 2).contiguous())
            result.append(attention.v_proj(hidden).view(shape).transpose(1, 2).contiguous())
        return tuple(result)


class SpeechDecoderPiece(torch.nn.Module):
    """One decoder step: the new tokens, their positions, the self-attention cache and the
    cross keys and values -> the logits and the new cache."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model.model
        self.proj_out = model.get_output_embeddings()
        self.base_model_prefix = "model"
        self._layers = len(_cross_attentions(model))

    def forward(self, input_ids, position_ids, past_keys, past_values, cross_keys, cross_values):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(list(zip(past_keys, past_values))),
                                    DynamicCache(list(zip(cross_keys, cross_values))))
        for i in range(self._layers):  # the cross keys and values are given: the model reads them
            cache.is_updated[i] = True
        # encoder_hidden_states is not read when the cross keys and values are in the cache, but it
        # must not be None for the decoder layers to run their cross-attention
        out = self.model.decoder(input_ids=input_ids, position_ids=position_ids, encoder_hidden_states=cross_keys[0],
                                 past_key_values=cache, use_cache=True)
        logits = self.proj_out(out.last_hidden_state)
        presents = []
        for layer in cache.self_attention_cache.layers:
            presents.extend((layer.keys, layer.values))
        return (logits, *presents)


@dataclasses.dataclass
class Piece:
    """One model of an exported folder: what is exported, its two input sets, its dynamic shapes,
    the names of its inputs and outputs (in the order of the module's flattened inputs and outputs)."""

    name: str
    filename: str
    module: torch.nn.Module
    inputs: dict[str, Any]
    inputs2: dict[str, Any]
    dynamic_shapes: dict[str, Any]
    input_names: list[str]
    output_names: list[str]
    #: self-attention cache: input name -> output name (written as the model's ``fx2onnx.cache``)
    cache: dict[str, str] = dataclasses.field(default_factory=dict)
    #: the cache is updated in place (:mod:`fx2onnx.optimizer.rules.cache_in_place`), checked on
    #: the input sets onnxruntime's kernel runs (:func:`fx2onnx.deploy.check.in_place_input_sets`)
    in_place: bool = False


def _sizes(config: Any) -> tuple[int, int, int, int, int]:
    """(decoder layers, heads, head dim, mel bins, frames) of a Whisper-like config."""
    layers = config.decoder_layers
    heads = config.decoder_attention_heads
    head_dim = config.d_model // heads
    frames = 2 * config.max_source_positions  # two convolutions, the second of stride 2
    return layers, heads, head_dim, config.num_mel_bins, frames


def speech_pieces(model: Any, config: Any, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[Piece]:
    """The encoder and decoder pieces of a Whisper-like model (built on any device: the meta
    device for the export, the CPU for the check), with example inputs of two shapes."""
    layers, heads, head_dim, mel, frames = _sizes(config)
    g = torch.Generator().manual_seed(seed)
    encoder_seq = config.max_source_positions
    vocab = config.vocab_size

    def features(batch):
        return {"input_features": torch.randn(batch, mel, frames, generator=g).to(dtype)}

    def step(batch, seq, past):
        def kv(length):
            return [torch.randn(batch, heads, length, head_dim, generator=g).to(dtype) for _ in range(layers)]

        return {"input_ids": torch.randint(0, vocab, (batch, seq), generator=g),
                "position_ids": (torch.arange(seq) + past).repeat(batch, 1),
                "past_keys": kv(past), "past_values": kv(past),
                "cross_keys": kv(encoder_seq), "cross_values": kv(encoder_seq)}

    cross_names = [f"{p}{i}" for i in range(layers) for p in (CROSS_KEY, CROSS_VALUE)]
    encoder = Piece("encoder", "encoder.onnx", SpeechEncoderPiece(model), features(2), features(3),
                    {"input_features": {0: "batch"}}, ["input_features"], cross_names)
    past = [{0: "batch", 2: "past"}] * layers
    cross = [{0: "batch", 2: "encoder_seq"}] * layers
    past_names = [f"{PAST_KEY}{i}" for i in range(layers)] + [f"{PAST_VALUE}{i}" for i in range(layers)]
    cross_inputs = [f"{CROSS_KEY}{i}" for i in range(layers)] + [f"{CROSS_VALUE}{i}" for i in range(layers)]
    presents = [f"{p}{i}" for i in range(layers) for p in (PRESENT_KEY, PRESENT_VALUE)]
    decoder = Piece(
        "decoder", "decoder.onnx", SpeechDecoderPiece(model), step(2, 3, 4), step(3, 1, 6),
        {"input_ids": {0: "batch", 1: "seq"}, "position_ids": {0: "batch", 1: "seq"}, "past_keys": past,
         "past_values": past, "cross_keys": cross, "cross_values": cross},
        ["input_ids", "position_ids", *past_names, *cross_inputs], ["logits", *presents],
        {f"{k}{i}": f"{o}{i}" for i in range(layers) for k, o in ((PAST_KEY, PRESENT_KEY), (PAST_VALUE, PRESENT_VALUE))},
    )
    return [encoder, decoder]


def export_speech_pieces(
    folder: str, out_dir: str, config: Any, dtype: torch.dtype, *, optimize: str, quantize: str | None,
    block_size: int, opset: int | None, progress: bool, say: Any, symmetric: bool = True,
    make_pieces: Any = None, model: Any = None,
) -> list[Piece]:
    """Exports the pieces of a speech-seq2seq folder into ``out_dir`` (weights streamed from the
    checkpoint, the model built on the meta device) and names their inputs and outputs.

    :param make_pieces: ``make_pieces(model)``: the pieces of the meta model (default: Whisper's,
        :func:`speech_pieces`)
    :param model: the model with its parameters on the meta device (default: built from the folder's config)
    :return: the pieces (their example inputs serve the check against eager)
    """

    model = model if model is not None else model_from_checkpoint_config(folder, dtype)
    pieces = make_pieces(model) if make_pieces is not None else speech_pieces(model, config, dtype)
    for piece in pieces:
        export_piece(folder, out_dir, piece, config, dtype, optimize=optimize, quantize=quantize,
                     block_size=block_size, opset=opset, progress=progress, say=say, symmetric=symmetric)
    return pieces


def export_piece(
    folder: str, out_dir: str, piece: Piece, config: Any, dtype: torch.dtype, *, optimize: str, quantize: str | None,
    block_size: int, opset: int | None, progress: bool, say: Any, symmetric: bool = True,
    cache: dict[str, str] | None = None,
) -> str:
    """Exports one piece of a folder to ``out_dir/piece.filename`` (weights streamed from the checkpoint) and names
    its inputs and outputs; ``cache``: its past -> present pairs (default ``piece.cache``). Returns the path."""
    import os
    import warnings

    say(f"exporting the {piece.name} of {config.architectures[0]} ({str(dtype).replace('torch.', '')}, "
        f"optimize={optimize}{', ' + quantize if quantize else ''})")
    path = os.path.join(out_dir, piece.filename)
    with warnings.catch_warnings():
        # the lists of the wrapper's inputs become one input per layer, as intended
        warnings.filterwarnings("ignore", message=".*froze the length of input.*")
        to_onnx_from_checkpoint(
            folder, (), piece.inputs, filename=path, model=piece.module, dtype=dtype, progress=progress,
            dynamic_shapes=piece.dynamic_shapes, target_opset=opset,
            optimize=False if optimize == "none" else optimize, quantize=quantize,
            quantize_block_size=block_size, quantize_symmetric=symmetric,
        )
    rename_values(path, piece.input_names, piece.output_names, piece.cache if cache is None else cache)
    return path


def check_speech_pieces(folder: str, out_dir: str, pieces: list[Piece], dtype: torch.dtype, atol: float,
                        rtol: float, make_pieces: Any = None) -> tuple[list[Any], list[str]]:
    """Every piece against the same wrapper around the eager float32 model, on its two input sets
    (``make_pieces(model, config)``: the wrappers, default :func:`speech_pieces`; a decoder updating
    its cache in place on :func:`fx2onnx.deploy.check.in_place_input_sets`). Returns the checks and
    what each ran on."""
    import os

    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    transformers.utils.logging.disable_progress_bar()
    try:
        eager = getattr(transformers, config.architectures[0]).from_pretrained(folder, dtype=torch.float32).eval()
    finally:
        transformers.utils.logging.enable_progress_bar()
    checks, names = [], []
    for piece, eager_piece in zip(pieces, (make_pieces or speech_pieces)(eager, config)):
        # float32 references first: check_against_eager leaves the model in dtype afterwards
        input_sets, set_names = [piece.inputs, piece.inputs2], ["first input set", "second input set"]
        if piece.in_place:
            input_sets, set_names = in_place_input_sets(input_sets, set_names)
        checks.extend(check_against_eager(os.path.join(out_dir, piece.filename), eager_piece.module,
                                          input_sets, dtype, atol=atol, rtol=rtol))
        names.extend(f"{piece.name}, {name}" for name in set_names)
        eager.to(torch.float32)
    return checks, names
