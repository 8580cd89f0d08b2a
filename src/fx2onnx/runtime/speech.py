"""Audio in, text out from a Whisper folder ``python -m fx2onnx export`` wrote (``generate OUTDIR --audio talk.wav``;
the other encoder-decoder speech models: :mod:`fx2onnx.runtime.speech_seq2seq`, both opened by
:func:`open_speech_generator`).

:class:`SpeechGenerator` reads the pieces the folder's ``fx2onnx.json`` names
(:mod:`fx2onnx.deploy.speech`): the encoder runs once on the audio features and returns the
cross-attention keys and values of every decoder layer, which stay in onnxruntime memory
and are fed unchanged to every step of the decoder, run by :class:`fx2onnx.runtime.OnnxGenerator`
with its self-attention cache. The rest is what transformers' ``WhisperForConditionalGeneration.generate``
does for audio of at most one window (30 s for Whisper), greedy:

* the features are the folder's own feature extractor's (``AutoFeatureExtractor``, offline);
* the decoder prompt is built from the generation config as transformers builds it: the start
  token, the ``forced_decoder_ids`` when no language or task is given, the language (given, or
  detected by one decoder step restricted to the language tokens), the task, and
  ``<|notimestamps|>``;
* the logits of ``suppress_tokens`` are set to ``-inf`` at every step, those of
  ``begin_suppress_tokens`` at the first generated token.

Audio is read from a WAV file with the standard library (:func:`read_wav`): 16-bit or 32-bit
PCM, mono or several channels (averaged), at the sampling rate of the feature extractor.

.. code-block:: python

    from fx2onnx.runtime.speech import SpeechGenerator
    gen = SpeechGenerator("whisper_onnx")
    result = gen.transcribe("talk.wav", max_new_tokens=40)
    print(result.text, result.new_ids)
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from .families import generator_class
from .folder import _read_json, open_pieces, warn_old_layout
from .seq2seq import is_merged_layout, open_merged
from .speech_base import (  # noqa: F401 (kept importable from here)
    NOT_SPEECH, SpeechFolder, SpeechResult, _Suppress, cut_after_eos, read_audios, read_wav, suppress_logits, write_wav,
)


class SpeechGenerator(SpeechFolder):
    """The encoder, decoder, feature extractor, tokenizer and generation config of an exported
    Whisper folder.

    :param folder: a folder written by :func:`fx2onnx.deploy.export_folder` from a Whisper folder
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None):
        super().__init__(folder)
        if is_merged_layout(self.metadata):  # the encoder's output, the merged decoder computing the cross cache
            self.pieces, self.encoder, self.decoder = open_merged(self.folder, "speech-seq2seq", NOT_SPEECH,
                                                                  providers, threads)
            self.cross_names, self.fed_names = ["last_hidden_state"], ["encoder_hidden_states"]
        else:  # the previous layout: the encoder returns the cross keys and values
            self.pieces, self.encoder, self.cross_names, self.decoder = open_pieces(
                self.folder, "speech-seq2seq", "encoder", NOT_SPEECH, providers, threads)
            self.fed_names = self.cross_names
            warn_old_layout(self.folder, self.decoder)

    def features(self, audio: Any) -> np.ndarray:
        """The input features of one audio or a list (paths to WAV files or float arrays)."""
        fe = self.feature_extractor
        rate = int(fe.sampling_rate)
        arrays = self.audio_arrays(audio)
        longest = max(len(a) for a in arrays) / rate
        window = getattr(fe, "chunk_length", None)
        if window is not None and longest > window:
            raise ValueError(f"The audio lasts {longest:.1f} s, more than the model's window of {window} s: the long-form "
                             "transcription (one window after the other) is not implemented; cut the audio.")
        return fe(arrays, sampling_rate=rate, return_tensors="np")["input_features"]

    def encode(self, features: np.ndarray) -> tuple[dict[str, Any], float]:
        """Runs the encoder: the cross-attention keys and values (onnxruntime values) and the seconds."""
        import time

        import onnxruntime

        info = self.encoder.get_inputs()[0]
        if info.type == "tensor(bfloat16)":
            import ml_dtypes
            import onnx

            value = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(
                np.ascontiguousarray(features.astype(ml_dtypes.bfloat16)).view(np.uint16), onnx.TensorProto.BFLOAT16)
        else:
            dtype = np.float16 if info.type == "tensor(float16)" else np.float32
            value = onnxruntime.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(features.astype(dtype)))
        begin = time.perf_counter()
        outputs = self.encoder.run_with_ort_values(self.cross_names, {info.name: value})
        return dict(zip(self.fed_names, outputs)), time.perf_counter() - begin

    def _language_ids(self, language: str) -> int:
        lang_to_id = self.generation.get("lang_to_id") or {}
        token = language if language.startswith("<|") else None
        if token is None:
            from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

            code = TO_LANGUAGE_CODE.get(language.lower(), language.lower())
            token = f"<|{code}|>"
        if token not in lang_to_id:
            raise ValueError(f"Language {language!r} ({token}) is not one of the model's: {sorted(lang_to_id)}.")
        return int(lang_to_id[token])

    def prompt(self, cross: dict[str, Any], batch: int, language: str | None = None, task: str | None = None) -> np.ndarray:
        """The decoder prompts ``(batch, length)``, built as transformers' Whisper generate builds them."""
        gen = self.generation
        start = gen.get("decoder_start_token_id", self.config.get("decoder_start_token_id"))
        if start is None:
            raise ValueError(f"{self.folder!r}: the generation config names no decoder_start_token_id.")
        task = task if task is not None else gen.get("task")
        language = language if language is not None else gen.get("language")
        init: list[Any] = [int(start)]
        if task is None and language is None:
            forced = gen.get("forced_decoder_ids") or self.config.get("forced_decoder_ids")
            if forced and forced[0][0] == 1:
                for i, (position, token) in enumerate(forced, start=1):
                    if position != i:
                        raise ValueError(f"forced_decoder_ids {forced} does not follow Whisper's prompt pattern.")
                    init.append(token)
        prompts = [list(init) for _ in range(batch)]
        lang_to_id = gen.get("lang_to_id")
        undefined = len(init) <= 1 or init[1] is None
        languages: list[int] | None = None
        if language is not None:
            languages = [self._language_ids(language)] * batch
        elif lang_to_id and undefined:  # one decoder step on the start token, the language tokens only
            ids = np.full((batch, 1), int(start), dtype=np.int64)
            only = sorted(int(v) for v in lang_to_id.values())
            tokens = self.decoder.generate(ids, 1, sampling=_Suppress(1, only=only), constants=cross)
            languages = [int(t) for t in tokens[:, -1]]
        if languages is not None:
            for p, lang in zip(prompts, languages):
                if len(p) > 1:
                    p[1] = lang
                else:
                    p.append(lang)
        task_to_id = gen.get("task_to_id") or {}
        no_timestamps = gen.get("no_timestamps_token_id")
        for p in prompts:
            if task is not None:
                if task not in task_to_id:
                    raise ValueError(f"Task {task!r} is not one of the model's: {sorted(task_to_id)}.")
                p.append(task_to_id[task])
                p[:] = [task_to_id[task] if t in task_to_id.values() else t for t in p]
            elif language is not None and task_to_id and not any(t in p for t in task_to_id.values()):
                p.append(task_to_id["transcribe"])
            if no_timestamps is not None and not gen.get("return_timestamps") and p[-1] != no_timestamps:
                p.append(no_timestamps)
        if any(t is None for p in prompts for t in p):
            raise ValueError(f"The decoder prompt {prompts[0]} has an unknown token: give --language.")
        return np.array(prompts, dtype=np.int64)

    def _prompt_options(self, language: str | None, task: str | None) -> dict[str, Any]:
        return {"language": language, "task": task}

    def generate_ids(
        self,
        features: np.ndarray,
        max_new_tokens: int = 32,
        language: str | None = None,
        task: str | None = None,
        on_text: Callable[[str], None] | None = None,
        as_text: bool = False,
    ) -> SpeechResult:
        """:meth:`transcribe` from the input features ``(batch, mel, frames)`` (the feature extractor's output)."""
        cross, encoder_seconds = self.encode(features)
        ids = self.prompt(cross, features.shape[0], language, task)
        gen = self.generation
        return self._generate_from_prompt(
            ids, cross, encoder_seconds, max_new_tokens,
            lambda _eos: _Suppress(ids.shape[1], gen.get("suppress_tokens") or (), gen.get("begin_suppress_tokens") or ()),
            on_text, as_text)


def open_speech_generator(folder: str | os.PathLike, providers: Sequence[str] | None = None,
                          threads: int | None = None) -> Any:
    """The generator of an exported speech folder: :class:`SpeechGenerator` for Whisper,
    :class:`fx2onnx.runtime.speech_seq2seq.Seq2SeqSpeechGenerator` for the other encoder-decoders (the generic
    split), :class:`fx2onnx.runtime.audio_text.AudioTextGenerator` for a speech language model (the registry of
    :mod:`fx2onnx.runtime.families`)."""
    metadata = _read_json(os.path.join(os.fspath(folder), "fx2onnx.json"))
    return generator_class("speech-seq2seq", metadata.get("split"))(folder, providers, threads)
