"""Audio in, text out from a folder of any encoder-decoder speech model split by
:mod:`fx2onnx.deploy.speech_generic` (Speech2Text, Moonshine...; Whisper: :mod:`fx2onnx.runtime.speech`).

:class:`Seq2SeqSpeechGenerator` does what transformers' ``model.generate(**features, do_sample=False)``
does for such a model, greedy:

* the features are the folder's own feature extractor's (``AutoFeatureExtractor``, offline; several
  audios padded to the longest, ``padding="longest"``), the inputs the encoder piece takes kept;
* the encoder piece runs once; its outputs (the encoder's hidden states and mask, the cross-attention
  keys and values) and the feature extractor's attention mask where the decoder takes it stay in
  onnxruntime memory and are fed unchanged to every step of the decoder, run by
  :class:`fx2onnx.runtime.OnnxGenerator` with its self-attention cache;
* the decoder prompt is the generation config's ``decoder_start_token_id`` (else ``bos_token_id``;
  transformers 5 reads no
  ``forced_decoder_ids`` but Whisper's, neither does this loop); the logits of ``suppress_tokens`` are
  ``-inf`` at every step, those of ``begin_suppress_tokens`` at the first one, the end-of-sequence
  tokens until ``min_length`` / ``min_new_tokens``; ``forced_bos_token_id`` is the only token allowed
  after the first one, ``forced_eos_token_id`` at the last position (MBart's, Donut's); the loop stops at an end-of-sequence token or after
  ``max_new_tokens``.

A generation config asking for what this loop does not do (beam search, repetition penalties, n-gram
blocking, bad words) is refused with a ValueError naming the option: the tokens would
not be transformers'.

.. code-block:: python

    from fx2onnx.runtime.speech import open_speech_generator
    gen = open_speech_generator("speech2text_onnx")
    result = gen.transcribe("talk.wav", max_new_tokens=40)
    print(result.text, result.new_ids)
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

import numpy as np

from .folder import session_options, warn_old_layout
from .generate import CACHE_BRANCH, OnnxGenerator
from .input_ranges import check_input_ranges
from .speech_base import NOT_SPEECH, SpeechFolder, SpeechResult, suppress_logits

#: the decoder's input taking the feature extractor's attention mask (:mod:`fx2onnx.deploy.speech_generic`)
FEATURES_MASK = "features_attention_mask"
#: generation options changing greedy tokens, with their neutral values: a folder whose generation
#: config sets another value is refused
UNSUPPORTED_OPTIONS: dict[str, tuple[Any, ...]] = {
    "num_beams": (None, 1),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "bad_words_ids": (None,),
    "sequence_bias": (None,),
    "exponential_decay_length_penalty": (None,),
    "guidance_scale": (None, 1.0),
    "watermarking_config": (None,),
}


def encoder_constants(outputs: dict[str, Any], features: dict[str, np.ndarray]) -> dict[str, Any]:
    """What the merged decoder takes from the encoder, by its names: ``last_hidden_state`` as
    ``encoder_hidden_states``, the tokenizer's ``attention_mask`` as ``encoder_attention_mask``."""
    constants = dict(outputs)
    if "last_hidden_state" in constants:
        constants["encoder_hidden_states"] = constants.pop("last_hidden_state")
    if "attention_mask" in features:
        constants["encoder_attention_mask"] = np.ascontiguousarray(features["attention_mask"], dtype=np.int64)
    return constants


def unsupported_options(generation: dict[str, Any]) -> list[str]:
    """The options of a generation config (its JSON dictionary) this loop does not apply."""
    return [f"{k}={generation[k]!r}" for k, neutral in UNSUPPORTED_OPTIONS.items()
            if k in generation and generation[k] not in neutral]


class _Greedy:
    """The logits processors transformers' greedy generate applies from the generation config:
    ``-inf`` on ``suppress`` at every step, on ``begin`` at the first generated token, on the
    end-of-sequence tokens while the sequence is shorter than ``min_length`` or has fewer than
    ``min_new_tokens`` new tokens (the ids outside the vocabulary ignored, as transformers ignores
    them: :func:`fx2onnx.runtime.speech.suppress_logits`). Duck-typed as a
    :class:`fx2onnx.runtime.sampling.Sampling`."""

    needs_logits = True

    def __init__(self, prompt: int, suppress: Sequence[int] = (), begin: Sequence[int] = (),
                 eos: Sequence[int] = (), min_length: int = 0, min_new_tokens: int = 0,
                 forced_bos: int | None = None, forced_eos: Any = None, max_length: int = 0):
        self.prompt = prompt
        self.suppress = np.asarray(list(suppress), dtype=np.int64)
        self.begin = np.asarray(list(begin), dtype=np.int64)
        self.eos = np.asarray(list(eos), dtype=np.int64)
        self.min_length, self.min_new_tokens = min_length, min_new_tokens
        self.forced_bos = forced_bos
        self.forced_eos = None if forced_eos is None else np.atleast_1d(np.asarray(forced_eos, dtype=np.int64))
        self.max_length = max_length

    def chooser(self) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        def choose(logits: np.ndarray, sequences: np.ndarray, _mask: np.ndarray) -> np.ndarray:
            logits = np.array(logits, dtype=np.float32)
            suppress_logits(logits, self.suppress)
            length = sequences.shape[1]
            if length == self.prompt:
                suppress_logits(logits, self.begin)
            if length < self.min_length or length - self.prompt < self.min_new_tokens:
                suppress_logits(logits, self.eos)
            # transformers' ForcedBOS / ForcedEOS processors: the only token allowed after the first
            # token, at the last position
            forced = (np.atleast_1d(self.forced_bos) if self.forced_bos is not None and length == 1 else
                      self.forced_eos if self.forced_eos is not None and length == self.max_length - 1 else None)
            if forced is not None:
                logits[:] = -np.inf
                logits[:, forced] = 0.0
            return logits.argmax(axis=-1).astype(np.int64)

        return choose

    @property
    def active(self) -> bool:
        """Whether it changes anything (else the loop takes the argmax in the graph)."""
        return bool(self.suppress.size or self.begin.size or (self.eos.size and (
            self.min_length > self.prompt or self.min_new_tokens > 0)) or self.forced_bos is not None
            or self.forced_eos is not None)


def _ort_value(array: np.ndarray, onnx_type: str) -> Any:
    """An onnxruntime value of ``array`` in the type an input expects (float, float16, bfloat16, int)."""
    import onnxruntime

    if onnx_type == "tensor(bfloat16)":
        import ml_dtypes
        import onnx

        return onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(
            np.ascontiguousarray(array.astype(ml_dtypes.bfloat16)).view(np.uint16), onnx.TensorProto.BFLOAT16)
    types = {"tensor(float16)": np.float16, "tensor(float)": np.float32, "tensor(double)": np.float64,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
    if onnx_type not in types:
        raise ValueError(f"Inputs of type {onnx_type} are not supported.")
    return onnxruntime.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array.astype(types[onnx_type])))


class Seq2SeqSpeechGenerator(SpeechFolder):
    """The encoder, decoder, feature extractor, tokenizer and generation config of a folder exported
    through the generic speech split.

    :param folder: a folder written by :func:`fx2onnx.deploy.export_folder` from an encoder-decoder
        speech checkpoint other than Whisper
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    #: the task of the folders it opens, and the error naming another
    task, refusal = "speech-seq2seq", NOT_SPEECH

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None):
        import onnxruntime

        super().__init__(folder)
        metadata = self.metadata
        self.pieces = metadata.get("pieces", {})
        if metadata.get("task") != self.task or not {"encoder", "decoder"} <= set(self.pieces):
            raise ValueError(self.refusal.format(folder=repr(self.folder), task=repr(metadata.get("task"))))
        options = session_options(threads)
        providers = list(providers or ["CPUExecutionProvider"])
        encoder, decoder = self.pieces["encoder"], self.pieces["decoder"]
        self.encoder = onnxruntime.InferenceSession(os.path.join(self.folder, encoder["file"]), options,
                                                    providers=providers)
        self.encoder_inputs = {i.name: i.type for i in self.encoder.get_inputs()}
        self.encoder_outputs = list(encoder["outputs"])
        cache = set(decoder.get("cache", {}))
        # use_cache_branch: the merged decoder of the layout of transformers.js and optimum, fed by the loop
        self.constant_names = [n for n in decoder["inputs"]
                               if n not in ("input_ids", "inputs_embeds", CACHE_BRANCH) and n not in cache]
        self.decoder = OnnxGenerator(self._decoder_model(os.path.join(self.folder, decoder["file"]), providers,
                                                         options), providers, options,
                                     constant_inputs=self.constant_names)
        self.decoder_inputs = {i.name: i.type for i in self.decoder.session.get_inputs()}
        warn_old_layout(self.folder, self.decoder)  # encoder.onnx / decoder.onnx: runs here, not in the clients

    def _decoder_model(self, path: str, providers: list[str], options: Any) -> Any:
        """What :class:`fx2onnx.runtime.OnnxGenerator` runs as the decoder: its file (a decoder on token
        embeddings is run with the folder's embedding file before it: :mod:`fx2onnx.runtime.image_seq2seq`)."""
        return path

    def features(self, audio: Any) -> dict[str, np.ndarray]:
        """The encoder's inputs for one audio or a list (paths to WAV files or float arrays): the
        folder's feature extractor's output (several audios padded to the longest; its attention mask where the
        encoder takes one)."""
        fe = self.feature_extractor
        arrays = self.audio_arrays(audio)
        extra: dict[str, Any] = {"padding": "longest"} if len(arrays) > 1 else {}
        if "attention_mask" in self.encoder_inputs:  # as transformers' ASR pipeline asks for it
            extra["return_attention_mask"] = True
        out = fe(arrays, sampling_rate=int(fe.sampling_rate), return_tensors="np", **extra)
        return {k: np.asarray(v) for k, v in out.items()}

    def encode(self, features: dict[str, np.ndarray]) -> tuple[dict[str, Any], float]:
        """Runs the encoder: its outputs (onnxruntime values) and the seconds; the feature
        extractor's attention mask is added where the decoder takes it."""
        missing = [n for n in self.encoder_inputs if n not in features]
        if missing:
            raise ValueError(f"The encoder takes {list(self.encoder_inputs)}: the features have no {missing} "
                             f"(they have {sorted(features)}).")
        check_input_ranges(self.encoder, features, "The audio", "cut the audio")
        feeds = {n: _ort_value(np.asarray(features[n]), t) for n, t in self.encoder_inputs.items()}
        begin = time.perf_counter()
        outputs = self.encoder.run_with_ort_values(self.encoder_outputs, feeds)
        seconds = time.perf_counter() - begin
        constants: dict[str, Any] = dict(zip(self.encoder_outputs, outputs))
        if "last_hidden_state" in constants:  # the layout of transformers.js and optimum (fx2onnx.deploy.seq2seq)
            constants = encoder_constants(constants, features)
        if FEATURES_MASK in self.constant_names:
            if "attention_mask" not in features:
                raise ValueError("The decoder takes the feature extractor's attention mask: the features have none.")
            constants[FEATURES_MASK] = _ort_value(np.asarray(features["attention_mask"]),
                                                  self.decoder_inputs[FEATURES_MASK])
        return {n: constants[n] for n in self.constant_names}, seconds

    def prompt(self, batch: int) -> np.ndarray:
        """The decoder prompts ``(batch, 1)``: the start token (the generation config's
        ``decoder_start_token_id``, else its ``bos_token_id``, as transformers' generate)."""
        source = self.generation or self.config
        start = source.get("decoder_start_token_id")
        if start is None:
            start = source.get("bos_token_id")
        if isinstance(start, list):
            start = start[0] if len(set(start)) == 1 else None
        if start is None:
            raise ValueError(f"{self.folder!r}: the generation config names no decoder_start_token_id nor bos_token_id.")
        return np.full((batch, 1), int(start), dtype=np.int64)

    def generate_ids(self, features: dict[str, np.ndarray], max_new_tokens: int = 32,
                     on_text: Callable[[str], None] | None = None, as_text: bool = False,
                     decoder_input_ids: Any = None) -> SpeechResult:
        """Greedy generation from the encoder's inputs (the feature extractor's output): the tokens
        transformers' ``generate(**features, do_sample=False)`` returns; ``decoder_input_ids``
        (``(batch, length)``, or one row for every input) replaces the start token as the decoder's
        prompt, as transformers' keyword does (Donut's task prompt)."""
        gen = self.generation
        unsupported = unsupported_options(gen)
        if unsupported:
            raise ValueError(f"The generation config of {self.folder!r} asks for {', '.join(unsupported)}: this loop is "
                             "greedy without them (its tokens would not be transformers'); set them to their defaults "
                             "in generation_config.json to generate anyway.")
        constants, encoder_seconds = self.encode(features)
        batch = next(iter(features.values())).shape[0]
        ids = self.prompt(batch)
        if decoder_input_ids is not None:
            given = np.asarray(decoder_input_ids, dtype=np.int64)
            given = given[None] if given.ndim == 1 else given
            if given.ndim != 2 or given.shape[0] not in (1, batch) or given.shape[1] == 0:
                raise ValueError(f"decoder_input_ids of shape {given.shape}: give (length,) or ({batch}, length).")
            ids = np.repeat(given, batch, axis=0) if given.shape[0] == 1 else given

        def sampling(eos_ids: list[int]) -> _Greedy | None:
            chooser = _Greedy(ids.shape[1], gen.get("suppress_tokens") or (), gen.get("begin_suppress_tokens") or (),
                              eos_ids, int(gen.get("min_length") or 0), int(gen.get("min_new_tokens") or 0),
                              gen.get("forced_bos_token_id"), gen.get("forced_eos_token_id"),
                              ids.shape[1] + max_new_tokens)
            return chooser if chooser.active else None

        return self._generate_from_prompt(ids, constants, encoder_seconds, max_new_tokens, sampling, on_text, as_text)
