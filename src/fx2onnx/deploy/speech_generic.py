"""The pieces of any encoder-decoder model reading audio features or pixels and writing text
(Speech2Text, Moonshine...; the image encoder-decoders, TrOCR, Donut, any ``VisionEncoderDecoderModel``),
read from the model instead of the names of its attention modules (Whisper keeps its own:
:mod:`fx2onnx.deploy.speech`). The folder export writes these models in the layout transformers.js and
optimum load (:mod:`fx2onnx.deploy.seq2seq_generic`, from the same probe and wrappers); the two pieces
below are the previous layout, which the runtime still opens (with a one-line notice).

* ``encoder.onnx``: the feature extractor's inputs (``input_features``, ``input_values`` or
  ``pixel_values``, with ``attention_mask`` when the feature extractor gives one and the model takes
  it; batch and length dynamic where the features vary) -> ``encoder_hidden_states``, ``encoder_attention_mask`` when the
  encoder's output carries one (Moonshine's, subsampled), and the cross-attention keys and values of
  every decoder layer ``cross_key_<i>`` / ``cross_value_<i>``. These are obtained without knowing the
  attention modules: the model's own forward runs once on the decoder's start token with an empty
  ``EncoderDecoderCache`` and the cross part of that cache is read.
* ``decoder.onnx``: ``input_ids``, the self-attention cache ``past_key_values_key_<i>`` /
  ``past_key_values_value_<i>`` and, fed unchanged at every step, what the encoder returned (and
  ``features_attention_mask``, the feature extractor's mask, for a model deriving the encoder's mask
  from it, Speech2Text) -> ``logits`` of the last position and ``present_key_<i>`` / ``present_value_<i>``.
  The step calls the **full model's forward** (``encoder_outputs=``, ``decoder_input_ids=``, the cache
  with its cross part marked as computed), so what the model does after its decoder (a scaling before
  a tied head) is kept.

A model whose decoder does not cache its cross-attention gets no cross inputs: its decoder recomputes
them from ``encoder_hidden_states`` at every step. What cannot be split this way raises
:class:`UnsplittableEncoderDecoder` naming the model type and the reason (a model generating audio; a
decoder LLM taking audio placeholders goes through :mod:`fx2onnx.deploy.audio_text_generic`).

.. code-block:: python

    from fx2onnx.deploy.speech_generic import generic_split_reason
    print(generic_split_reason(model, model.config))  # None: it can be split
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any, Callable

import numpy as np
import torch

from ..inputs.task_inputs import _audio_inputs, _image_inputs
from ..runtime.speech_seq2seq import FEATURES_MASK
from ..weights.empty import empty_weights, parameters_on_meta
from .captioner import as_encoder_decoder, example_prompts
from .speech import (
    CROSS_KEY,
    CROSS_VALUE,
    PAST_KEY,
    PAST_VALUE,
    PRESENT_KEY,
    PRESENT_VALUE,
    Piece,
    export_speech_pieces,
)

#: the names of the values the encoder piece returns beside the cross keys and values
ENCODER_HIDDEN, ENCODER_MASK = "encoder_hidden_states", "encoder_attention_mask"
#: the inputs of an encoder (audio features, or an image's pixels), in the order of the encoder piece's signature
FEATURE_INPUTS = ("input_features", "input_values", "pixel_values")


class UnsplittableEncoderDecoder(ValueError):
    """An encoder-decoder model (speech-seq2seq, or image to text) the generic split does not cover, with the reason."""


#: its first name, when the split read audio only
UnsplittableSpeechModel = UnsplittableEncoderDecoder


def _parameters(function: Any) -> set[str]:
    return set(inspect.signature(function).parameters)


def start_token(model: Any, config: Any) -> int | None:
    """The decoder's start token as transformers' generate takes it: the generation config's
    ``decoder_start_token_id``, else its ``bos_token_id`` (the configuration's without a generation config)."""
    source = getattr(model, "generation_config", None) or config
    value = getattr(source, "decoder_start_token_id", None)
    if value is None:
        value = getattr(source, "bos_token_id", None)
    if isinstance(value, (list, tuple)):
        value = value[0] if len(set(value)) == 1 else None
    return None if value is None else int(value)


def generic_split_reason(model: Any, config: Any) -> str | None:
    """Why ``model`` cannot be split into an encoder and a decoder with its cache, None when it can
    (a first look at the signatures; :func:`probe_layout` runs the model and may refuse too)."""
    if not getattr(config, "is_encoder_decoder", False):
        return ("it is not an encoder-decoder and names no audio placeholder token: neither the encoder-decoder split "
                "(an encoder, a decoder with cross-attention) nor the speech language model's (audio features written "
                "over a prompt's placeholders, fx2onnx.deploy.audio_text_generic) applies")
    params = _parameters(model.forward)
    if not set(FEATURE_INPUTS) & params:
        return "its forward takes none of input_features, input_values, pixel_values (it reads no audio features nor pixels)"
    missing = [p for p in ("encoder_outputs", "decoder_input_ids", "past_key_values") if p not in params]
    if missing:
        return f"its forward takes no {', '.join(missing)}"
    if not callable(getattr(model, "get_encoder", None)) or model.get_encoder() is None:
        return "it has no get_encoder()"
    if not set(FEATURE_INPUTS) & _parameters(model.get_encoder().forward):
        return ("its encoder reads none of input_features, input_values, pixel_values: the model's forward makes its "
                "input first (Pop2Piano adds a composer's embedding; Florence-2, which merges the image into the text "
                "prompt, goes through fx2onnx.deploy.captioner); "
                "the split needs an encoder of the features alone")
    if start_token(model, config) is None:
        return "its generation config names no decoder_start_token_id nor bos_token_id"
    return None


@dataclasses.dataclass(frozen=True)
class SpeechLayout:
    """What the generic pieces of one model take and return, found by :func:`probe_layout`."""

    #: the inputs of the encoder piece, in its signature's order (``input_features``, ``attention_mask``)
    features: tuple[str, ...]
    #: the class of the encoder's output, rebuilt by the decoder piece for the model's forward
    encoder_output: type
    #: the encoder's output carries an attention mask (Moonshine's subsampled one)
    encoder_mask: bool
    #: the decoder piece takes the feature extractor's mask (the model's forward derives the encoder's from it)
    features_mask: bool
    #: the decoder layers whose cross keys and values are computed by the encoder piece (0: none, recomputed)
    cross_layers: int
    #: the decoder's start token
    start: int
    #: the model's forward takes ``logits_to_keep``
    logits_to_keep: bool = False

    @property
    def encoder_outputs(self) -> list[str]:
        names = [ENCODER_HIDDEN] + [ENCODER_MASK] * self.encoder_mask
        return names + [f"{p}{i}" for i in range(self.cross_layers) for p in (CROSS_KEY, CROSS_VALUE)]


class _OnModel(torch.nn.Module):
    """A wrapper calling the full model: ``self.model`` is the model, so that the parameters have the
    checkpoint's names once ``model.`` (the wrapper's ``base_model_prefix``) is removed."""

    def __init__(self, model: Any, layout: SpeechLayout):
        super().__init__()
        self.model = model
        self.base_model_prefix = "model"
        self.layout = layout

    def _init_weights(self, module: torch.nn.Module) -> None:
        """The model's own (computed buffers on the meta device: sinusoidal positions)."""
        self.model._init_weights(module)

    def _forward_model(self, encoder_outputs: Any, input_ids: torch.Tensor, cache: Any,
                       features_mask: torch.Tensor | None) -> Any:
        kwargs: dict[str, Any] = {}
        if features_mask is not None:
            kwargs["attention_mask"] = features_mask
        if self.layout.logits_to_keep:
            kwargs["logits_to_keep"] = 1
        return self.model(encoder_outputs=encoder_outputs, decoder_input_ids=input_ids, past_key_values=cache,
                          use_cache=True, **kwargs)


def _empty_cache() -> Any:
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    return EncoderDecoderCache(DynamicCache(), DynamicCache())


class GenericSpeechEncoderPiece(_OnModel):
    """The encoder on the features, and the cross-attention keys and values of every decoder layer
    read from the cache of one step of the model's decoder on its start token."""

    def encode(self, input_features: torch.Tensor | None = None, input_values: torch.Tensor | None = None,
               pixel_values: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
               input_ids: torch.Tensor | None = None) -> tuple[Any, Any]:
        """(the encoder's output, the cache after one decoder step on the start token); ``input_ids``: the
        prompt of an encoder merging the image into it (Florence-2, :mod:`fx2onnx.deploy.captioner`)."""
        encoder = self.model.get_encoder()
        kwargs = {k: v for k, v in (("input_features", input_features), ("input_values", input_values),
                                    ("pixel_values", pixel_values), ("input_ids", input_ids)) if v is not None}
        accepted = _parameters(encoder.forward)
        if attention_mask is not None and ("attention_mask" in accepted or "kwargs" in accepted):
            kwargs["attention_mask"] = attention_mask  # as transformers' generate calls the encoder
        output = encoder(**kwargs, return_dict=True)
        hidden = output.last_hidden_state
        start = torch.full((hidden.shape[0], 1), self.layout.start, dtype=torch.int64, device=hidden.device)
        cache = _empty_cache()
        mask = attention_mask if self.layout.features_mask else None
        self._forward_model(output, start, cache, mask)
        return output, cache

    def forward(self, input_features: torch.Tensor | None = None, input_values: torch.Tensor | None = None,
                pixel_values: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                input_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        output, cache = self.encode(input_features, input_values, pixel_values, attention_mask, input_ids)
        result = [output.last_hidden_state]
        if self.layout.encoder_mask:
            result.append(output.attention_mask)
        layers = cache.cross_attention_cache.layers
        for i in range(self.layout.cross_layers):
            result.extend((layers[i].keys, layers[i].values))
        return tuple(result)


class GenericSpeechDecoderPiece(_OnModel):
    """One step of the full model: new tokens, the self-attention cache, what the encoder piece
    returned -> the logits of the last position and the new cache."""

    def forward(self, input_ids: torch.Tensor, past_keys: list[torch.Tensor], past_values: list[torch.Tensor],
                encoder_hidden_states: torch.Tensor, encoder_attention_mask: torch.Tensor | None = None,
                features_attention_mask: torch.Tensor | None = None, cross_keys: list[torch.Tensor] | None = None,
                cross_values: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cross = list(zip(cross_keys or [], cross_values or []))
        cache = EncoderDecoderCache(DynamicCache(list(zip(past_keys, past_values))),
                                    DynamicCache(cross) if cross else DynamicCache())
        for i in range(len(cross)):  # computed by the encoder piece: the model reads them
            cache.is_updated[i] = True
        fields = {"last_hidden_state": encoder_hidden_states}
        if encoder_attention_mask is not None:
            fields["attention_mask"] = encoder_attention_mask
        out = self._forward_model(self.layout.encoder_output(**fields), input_ids, cache, features_attention_mask)
        presents = []
        for layer in cache.self_attention_cache.layers:
            presents.extend((layer.keys, layer.values))
        return (out.logits[:, -1:], *presents)


def _to(value: Any, device: Any) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


def probe_layout(model: Any, config: Any, features: dict[str, torch.Tensor]) -> tuple[SpeechLayout, dict[str, Any]]:
    """Runs the encoder piece and one decoder step and returns the layout and the shapes found:
    ``encoder`` (the encoder piece's outputs), ``presents`` (the self-attention cache after a prompt
    of 3 tokens). A model on the meta device (an export) runs on uninitialized CPU storage
    (:func:`fx2onnx.weights.empty.empty_weights`: the values are garbage, the shapes and the
    structure are the model's; the meta device itself refuses the masks' data-dependent code).

    :raises UnsplittableEncoderDecoder: the model cannot be split, with the reason
    """
    if any(p.is_meta for p in model.parameters()):
        with empty_weights(model):
            return _probe_layout(model, config, features)
    return _probe_layout(model, config, features)


def _probe_layout(model: Any, config: Any, features: dict[str, torch.Tensor]) -> tuple[SpeechLayout, dict[str, Any]]:
    model_type = getattr(config, "model_type", type(model).__name__)
    reason = generic_split_reason(model, config)
    if reason:
        raise UnsplittableEncoderDecoder(f"{model_type}: {reason}.")
    params = _parameters(model.forward)
    names = [n for n in FEATURE_INPUTS if n in features]
    if not names or any(n not in params for n in names):
        raise UnsplittableEncoderDecoder(f"{model_type}: its features {sorted(features)} are not inputs of its forward.")
    has_mask = "attention_mask" in features and "attention_mask" in params
    # a prompt the encoder merges the image into (Florence-2)
    prompt = "input_ids" in features and "input_ids" in _parameters(model.get_encoder().forward)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    inputs = {k: _to(features[k], device) for k in names + ["attention_mask"] * has_mask + ["input_ids"] * prompt}
    draft = SpeechLayout(tuple(inputs), object, False, has_mask, 0, start_token(model, config),
                         "logits_to_keep" in params)
    encoder = GenericSpeechEncoderPiece(model, draft)
    try:
        with torch.no_grad():
            output, cache = encoder.encode(**inputs)
    except Exception as e:  # noqa: BLE001 - said in one line
        raise UnsplittableEncoderDecoder(f"{model_type}: its encoder and one decoder step on the start token do not run "
                                      f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from e
    mask = getattr(output, "attention_mask", None)
    filled = [i for i, layer in enumerate(cache.cross_attention_cache.layers)
              if getattr(layer, "keys", None) is not None and layer.keys.numel() > 0]
    self_layers = len(cache.self_attention_cache.layers)
    if filled and filled != list(range(self_layers)):
        raise UnsplittableEncoderDecoder(f"{model_type}: its decoder caches the cross-attention of layers {filled} only, "
                                      f"of {self_layers}.")
    layout = dataclasses.replace(draft, encoder_output=type(output), encoder_mask=isinstance(mask, torch.Tensor),
                                 cross_layers=len(filled))
    encoder = GenericSpeechEncoderPiece(model, layout)
    with torch.no_grad():
        encoded = encoder(**inputs)
        decoder = GenericSpeechDecoderPiece(model, layout)
        batch = encoded[0].shape[0]
        step = _decoder_step(layout, encoded, batch, 3, [], inputs.get("attention_mask"), device)
        presents = decoder(**step)[1:]
    return layout, {"encoder": [tuple(t.shape) for t in encoded], "encoder_dtypes": [t.dtype for t in encoded],
                    "presents": [tuple(t.shape) for t in presents], "present_dtypes": [t.dtype for t in presents]}


def _decoder_step(layout: SpeechLayout, encoded: tuple[torch.Tensor, ...], batch: int, seq: int,
                  past: list[torch.Tensor], features_mask: torch.Tensor | None, device: Any = None,
                  generator: torch.Generator | None = None, vocab: int = 3) -> dict[str, Any]:
    """The decoder piece's inputs: ``seq`` new tokens after the cache ``past`` (keys then values)."""
    ids = torch.randint(0, vocab, (batch, seq), generator=generator) if generator is not None else \
        torch.full((batch, seq), layout.start, dtype=torch.int64)
    half = len(past) // 2
    step: dict[str, Any] = {"input_ids": ids.to(device) if device is not None else ids,
                            "past_keys": past[:half], "past_values": past[half:]}
    rest = list(encoded)
    step["encoder_hidden_states"] = rest.pop(0)
    if layout.encoder_mask:
        step["encoder_attention_mask"] = rest.pop(0)
    if layout.features_mask:
        step["features_attention_mask"] = features_mask
    if layout.cross_layers:
        step["cross_keys"], step["cross_values"] = rest[0::2], rest[1::2]
    return step


def reads_pixels(model: Any) -> bool:
    """Whether ``model`` is an encoder-decoder reading an image (``pixel_values``), not audio features."""
    params = _parameters(model.forward)
    return "pixel_values" in params and not {"input_features", "input_values"} & params


def example_images(folder: str | None, model: Any, config: Any, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Two sets of ``pixel_values`` of batch 2 and 3: the folder's image processor on images made in
    code (of two sizes: the processor resizes them); without one (a model of the task zoo), the task zoo's."""
    if folder is not None and os.path.isfile(os.path.join(folder, "preprocessor_config.json")):
        import PIL.Image
        import transformers

        processor = transformers.AutoImageProcessor.from_pretrained(folder, local_files_only=True)
        rng = np.random.default_rng(seed)
        sets = []
        for batch, side in ((2, 40), (3, 56)):
            images = [PIL.Image.fromarray(rng.integers(0, 256, (side, side + 8 * i, 3), dtype=np.uint8))
                      for i in range(batch)]
            sets.append({"pixel_values": torch.as_tensor(np.asarray(processor(images, return_tensors="np")
                                                                    ["pixel_values"]))})
        return sets

    return [{"pixel_values": _image_inputs(model, config, batch, seed + batch)[0]["pixel_values"]} for batch in (2, 3)]


def example_features(folder: str | None, model: Any, config: Any, dtype: torch.dtype,
                     seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Two sets of encoder inputs, of batch 2 and 3 and of two lengths: the folder's feature extractor
    on a chirp of 1 s and of 1.5 s; without one (a model of the task zoo), the task zoo's features;
    a model reading an image: :func:`example_images`."""
    sets = []
    if getattr(model, "merges_prompt", False):  # Florence-2: the prompt and the image (fx2onnx.deploy.captioner)
        sets = example_prompts(folder, model, config, seed)
    elif reads_pixels(model):
        sets = example_images(folder, model, config, seed)
    elif folder is not None and os.path.isfile(os.path.join(folder, "preprocessor_config.json")):
        import transformers

        fe = transformers.AutoFeatureExtractor.from_pretrained(folder, local_files_only=True)
        rate = int(fe.sampling_rate)
        for batch, seconds in ((2, 1.0), (3, 1.5)):
            t = np.arange(int(seconds * rate)) / rate
            audio = [(0.5 * np.sin(2 * np.pi * (200.0 + 50 * i + 300 * t) * t)).astype(np.float32)
                     for i in range(batch)]
            out = fe(audio, sampling_rate=rate, return_tensors="pt")
            sets.append({k: torch.as_tensor(v) for k, v in out.items() if k in (*FEATURE_INPUTS, "attention_mask")})
    else:
        import contextlib

        # the zoo's builder may run the model to find its layout: on CPU storage, not the meta device
        meta = any(p.is_meta for p in model.parameters())
        with empty_weights(model) if meta else contextlib.nullcontext():
            for batch, offset in ((2, 0), (3, 1)):
                inputs, _ = _audio_inputs(model, config, batch, seed + offset)
                sets.append({k: v for k, v in inputs.items() if k in FEATURE_INPUTS})
    for inputs in sets:
        for k, v in inputs.items():
            if v.is_floating_point():
                inputs[k] = v.to(dtype)
    return sets


def _dynamic_axes(first: tuple[int, ...], second: tuple[int, ...], names: dict[int, str]) -> dict[int, str]:
    """Axis 0 (batch) and every other axis of another size in the two sets, named by ``names``."""
    return {i: ("batch" if i == 0 else names.get(i, f"dim{i}")) for i, (a, b) in enumerate(zip(first, second))
            if i == 0 or a != b}


def generic_speech_pieces(model: Any, config: Any, features: list[dict[str, torch.Tensor]],
                          dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[list[Piece], SpeechLayout]:
    """The encoder and decoder pieces of ``model`` (on the meta device for the export) with example
    inputs of two shapes, made from two sets of ``features`` (:func:`example_features`)."""
    layouts = [probe_layout(model, config, f) for f in features]
    layout, shapes = layouts[0]
    other = layouts[1][1]
    g = torch.Generator().manual_seed(seed)
    vocab = int(getattr(config.get_text_config() if hasattr(config, "get_text_config") else config,
                        "vocab_size", None) or 8)

    def tensor(shape: tuple[int, ...], dtype_: torch.dtype) -> torch.Tensor:
        if dtype_.is_floating_point:
            return torch.randn(shape, generator=g).to(dtype)
        return torch.ones(shape, dtype=dtype_)  # a mask: nothing hidden

    encoder_names = layout.encoder_outputs
    feature_names = list(layout.features)
    inputs = [{k: f[k] for k in feature_names} for f in features]
    feature_dims = {}
    for k in feature_names:
        axes = _dynamic_axes(tuple(inputs[0][k].shape), tuple(inputs[1][k].shape), {})
        # the prompt's length where the encoder reads one (its mask too), else the audio's frames
        length = "prompt" if "input_ids" in feature_names and k in ("input_ids", "attention_mask") else "frames"
        feature_dims[k] = {i: ("batch" if i == 0 else length) for i in axes}
    encoder = Piece("encoder", "encoder.onnx", GenericSpeechEncoderPiece(model, layout), inputs[0], inputs[1],
                    feature_dims, feature_names, encoder_names)

    # the decoder: the encoder's outputs of each set, a cache of another length
    presents = shapes["presents"]
    layers = len(presents) // 2

    def step(s: int, past: int, seq: int) -> dict[str, Any]:
        found = (shapes, other)[s]
        encoded = tuple(tensor(sh, dt) for sh, dt in zip(found["encoder"], found["encoder_dtypes"]))
        batch = encoded[0].shape[0]
        cache = [tensor((batch, *sh[1:2], past, *sh[3:]), dt) for sh, dt in
                 zip(found["presents"][0::2] + found["presents"][1::2],
                     found["present_dtypes"][0::2] + found["present_dtypes"][1::2])]
        mask = inputs[s].get("attention_mask")
        return _decoder_step(layout, encoded, batch, seq, cache, mask, generator=g, vocab=vocab)

    encoder_dims = [_dynamic_axes(a, b, {1: "encoder_seq", 2: "encoder_seq"})
                    for a, b in zip(shapes["encoder"], other["encoder"])]
    past = [{0: "batch", 2: "past"}] * layers
    dims: dict[str, Any] = {"input_ids": {0: "batch", 1: "seq"}, "past_keys": past, "past_values": past,
                            "encoder_hidden_states": {i: d for i, d in encoder_dims[0].items() if i in (0, 1)}}
    names = ["input_ids"] + [f"{PAST_KEY}{i}" for i in range(layers)] + [f"{PAST_VALUE}{i}" for i in range(layers)]
    names.append(ENCODER_HIDDEN)
    if layout.encoder_mask:
        dims["encoder_attention_mask"] = encoder_dims[1]
        names.append(ENCODER_MASK)
    if layout.features_mask:
        dims["features_attention_mask"] = feature_dims["attention_mask"]
        names.append(FEATURES_MASK)
    if layout.cross_layers:
        first = 1 + layout.encoder_mask
        cross = [{i: d for i, d in axes.items() if i in (0, 2)} for axes in encoder_dims[first:]]
        dims["cross_keys"], dims["cross_values"] = cross[0::2], cross[1::2]
        names += [f"{CROSS_KEY}{i}" for i in range(layout.cross_layers)]
        names += [f"{CROSS_VALUE}{i}" for i in range(layout.cross_layers)]
    outputs = ["logits"] + [f"{p}{i}" for i in range(layers) for p in (PRESENT_KEY, PRESENT_VALUE)]
    decoder = Piece("decoder", "decoder.onnx", GenericSpeechDecoderPiece(model, layout), step(0, 4, 3), step(1, 6, 1),
                    dims, names, outputs,
                    {f"{k}{i}": f"{o}{i}" for i in range(layers)
                     for k, o in ((PAST_KEY, PRESENT_KEY), (PAST_VALUE, PRESENT_VALUE))})
    return [encoder, decoder], layout


def eager_pieces(layout: SpeechLayout) -> Callable[[Any, Any], list[Piece]]:
    """``make_pieces(model, config)`` of :func:`fx2onnx.deploy.speech.check_speech_pieces`: the same
    wrappers around the eager model (only their modules are read)."""
    def make(model: Any, _config: Any) -> list[Piece]:
        model = as_encoder_decoder(model)  # a captioner (BLIP, Florence-2) seen as an encoder-decoder
        return [Piece("encoder", "encoder.onnx", GenericSpeechEncoderPiece(model, layout), {}, {}, {}, [], []),
                Piece("decoder", "decoder.onnx", GenericSpeechDecoderPiece(model, layout), {}, {}, {}, [], [])]

    return make


def export_generic_speech_pieces(
    folder: str, out_dir: str, config: Any, dtype: torch.dtype, **kwargs: Any,
) -> tuple[list[Piece], SpeechLayout]:
    """Exports the generic pieces of a speech-seq2seq folder (the keywords of
    :func:`fx2onnx.deploy.speech.export_speech_pieces`): ``(pieces, layout)``.

    :raises UnsplittableEncoderDecoder: one line naming the model type and the reason
    """

    found: dict[str, SpeechLayout] = {}

    def make(model: Any) -> list[Piece]:
        model = as_encoder_decoder(model)  # a captioner (BLIP, Florence-2) seen as an encoder-decoder
        seen = getattr(model, "config", config)
        reason = generic_split_reason(model, seen)
        if reason:  # before the example features are built
            raise UnsplittableEncoderDecoder(f"{getattr(config, 'model_type', type(model).__name__)}: {reason}.")
        pieces, found["layout"] = generic_speech_pieces(model, seen, example_features(folder, model, seen, dtype),
                                                        dtype)
        return pieces

    pieces = export_speech_pieces(folder, out_dir, config, dtype, make_pieces=make,
                                  model=meta_model_with_buffers(config, dtype), **kwargs)
    return pieces, found["layout"]


def meta_model_with_buffers(config: Any, dtype: torch.dtype) -> Any:
    """The model of ``config`` (class ``architectures[0]``) with its parameters on the meta device and its
    buffers computed on the CPU (:func:`fx2onnx.weights.empty.parameters_on_meta`): a buffer no checkpoint
    holds and ``_init_weights`` does not compute (Canary's relative positions) keeps its value."""
    import transformers

    model_class = getattr(transformers, (getattr(config, "architectures", None) or [""])[0], None)
    if model_class is None:
        raise ValueError(f"The config names no transformers class (architectures={config.architectures}).")
    with parameters_on_meta():
        model = model_class._from_config(config, dtype=dtype)
    return model.eval()
