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

import dataclasses
import os
import wave
from typing import Any, Callable, Sequence

import numpy as np

from .folder import TextStream, _read_json, open_pieces
from .generate import GenerationTimes


def read_wav(path: str | os.PathLike, sampling_rate: int | None = None) -> np.ndarray:
    """The samples of a PCM WAV file, float32 in [-1, 1], the channels averaged.

    :param sampling_rate: the rate the caller needs: another one is refused (no resampling)
    :raises FileNotFoundError: no such file
    :raises ValueError: not a WAV file, a sample width other than 8, 16 or 32 bits, another rate
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Audio file {path!r} does not exist.")
    try:
        with wave.open(path, "rb") as f:
            rate, width, channels, frames = f.getframerate(), f.getsampwidth(), f.getnchannels(), f.getnframes()
            data = f.readframes(frames)
    except (wave.Error, EOFError) as e:
        raise ValueError(f"{path!r} is not a PCM WAV file ({e or type(e).__name__}): convert it, e.g. ffmpeg -i IN -ar 16000 -ac 1 OUT.wav.") \
            from None
    if sampling_rate is not None and rate != sampling_rate:
        raise ValueError(f"{path!r} is sampled at {rate} Hz, the model's feature extractor expects {sampling_rate} Hz: "
                         f"resample it, e.g. ffmpeg -i IN -ar {sampling_rate} -ac 1 OUT.wav.")
    if width == 1:
        samples = (np.frombuffer(data, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 4:
        samples = (np.frombuffer(data, dtype="<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    else:
        raise ValueError(f"{path!r} has {8 * width}-bit samples: read 8, 16 or 32-bit PCM only.")
    if samples.size == 0:
        raise ValueError(f"{path!r} holds no audio.")
    return samples.reshape(-1, channels).mean(axis=1).astype(np.float32)


def read_audios(audios: Any, sampling_rate: int | None) -> list[np.ndarray]:
    """One audio or a list (WAV paths, read by :func:`read_wav` at ``sampling_rate``, or samples) as float32 arrays."""
    audios = audios if isinstance(audios, (list, tuple)) else [audios]
    return [read_wav(a, sampling_rate) if isinstance(a, (str, os.PathLike)) else np.asarray(a, dtype=np.float32)
            for a in audios]


def cut_after_eos(tokens: Any, eos_ids: Sequence[int]) -> list[list[int]]:
    """The rows of ``tokens`` ``(batch, new)``, each cut after its first end-of-sequence token."""
    rows = []
    for row in np.asarray(tokens).tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in eos_ids), len(row))
        rows.append([int(t) for t in row[:end]])
    return rows


def write_wav(path: str | os.PathLike, samples: np.ndarray, sampling_rate: int = 16000) -> None:
    """Writes float samples in [-1, 1] as a 16-bit mono PCM WAV file."""
    pcm = (np.clip(np.asarray(samples, dtype=np.float64), -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(os.fspath(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sampling_rate)
        f.writeframes(pcm.tobytes())


def suppress_logits(logits: np.ndarray, ids: np.ndarray) -> None:
    """Sets ``logits[:, ids]`` to ``-inf`` in place, the ids outside the vocabulary (the logits' last
    dimension) ignored as transformers' ``SuppressTokensLogitsProcessor`` and
    ``SuppressTokensAtBeginLogitsProcessor`` ignore them (``isin`` over the vocabulary): a small model
    keeps the default ``begin_suppress_tokens`` of its configuration (Whisper's ``[220, 50256]``)."""
    ids = ids[(ids >= 0) & (ids < logits.shape[-1])]
    if ids.size:
        logits[:, ids] = -np.inf


class _Suppress:
    """What transformers' Whisper generate does to the logits, greedy: ``-inf`` on ``suppress``
    at every step, on ``begin`` at the first generated token (the ids outside the vocabulary
    ignored, :func:`suppress_logits`); or, for the language detection, ``-inf`` everywhere but on
    ``only``. Duck-typed as a :class:`fx2onnx.runtime.sampling.Sampling`."""

    needs_logits = True

    def __init__(self, begin_index: int, suppress: Sequence[int] = (), begin: Sequence[int] = (),
                 only: Sequence[int] | None = None):
        self.begin_index, self.only = begin_index, None if only is None else np.asarray(list(only), dtype=np.int64)
        self.suppress = np.asarray(list(suppress), dtype=np.int64)
        self.begin = np.asarray(list(begin), dtype=np.int64)

    def chooser(self) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        def choose(logits: np.ndarray, sequences: np.ndarray, _mask: np.ndarray) -> np.ndarray:
            logits = np.array(logits, dtype=np.float32)
            if self.only is not None:
                kept = logits[:, self.only]
                logits = np.full_like(logits, -np.inf)
                logits[:, self.only] = kept
            suppress_logits(logits, self.suppress)
            if sequences.shape[1] == self.begin_index:
                suppress_logits(logits, self.begin)
            return logits.argmax(axis=-1).astype(np.int64)

        return choose


@dataclasses.dataclass
class SpeechResult:
    """The outcome of :meth:`SpeechGenerator.transcribe`."""

    #: the decoder prompt of each audio (start, language, task, no timestamps)
    prompt_ids: list[list[int]]
    #: the generated tokens of each audio, up to its end-of-sequence token included
    new_ids: list[list[int]]
    texts: list[str] | None
    encoder_seconds: float
    times: GenerationTimes

    @property
    def text(self) -> str | None:
        return None if self.texts is None else self.texts[0]

    def summary(self) -> str:
        """One line: the time of the encoder, the prompt and the decoding."""
        t = self.times
        speed = t.decode_steps / t.decode_total if t.decode_total else float("nan")
        return (f"encoder: {self.encoder_seconds:.3f} s; prompt: {len(self.prompt_ids[0])} tokens, {t.prefill_total:.3f} s; "
                f"decode: {t.decode_steps} tokens, {t.decode_total:.3f} s ({speed:.1f} tokens/s)")


#: the refusal of a folder of another task
NOT_SPEECH = ("{folder} is not a speech folder (task {task}): export a speech-seq2seq checkpoint with python -m "
              "fx2onnx export CHECKPOINT --out FOLDER.")


def open_speech_generator(folder: str | os.PathLike, providers: Sequence[str] | None = None,
                          threads: int | None = None) -> Any:
    """The generator of an exported speech folder: :class:`SpeechGenerator` for Whisper,
    :class:`fx2onnx.runtime.speech_seq2seq.Seq2SeqSpeechGenerator` for the other encoder-decoders (the generic
    split), :class:`fx2onnx.runtime.audio_text.AudioTextGenerator` for a speech language model."""
    metadata = _read_json(os.path.join(os.fspath(folder), "fx2onnx.json"))
    if metadata.get("split") == "placeholders":
        from .audio_text import AudioTextGenerator

        return AudioTextGenerator(folder, providers, threads)
    if metadata.get("split") == "generic":
        from .speech_seq2seq import Seq2SeqSpeechGenerator

        return Seq2SeqSpeechGenerator(folder, providers, threads)
    return SpeechGenerator(folder, providers, threads)


class SpeechFolder:
    """What every exported speech folder has: its feature extractor, tokenizer, config and
    generation config (read offline from the folder), and what the generators share: ``transcribe``
    and the greedy decoding after the prompt. A generator sets ``decoder`` (an
    :class:`fx2onnx.runtime.OnnxGenerator`) and defines ``features`` and ``generate_ids``."""

    def __init__(self, folder: str | os.PathLike):
        from .folder import FOLDER_METADATA

        self.folder = os.fspath(folder)
        #: the folder's generation config, updated with what the export wrote (a captioner's start and end tokens)
        self.metadata = _read_json(os.path.join(self.folder, FOLDER_METADATA))
        self.generation = {**_read_json(os.path.join(self.folder, "generation_config.json")),
                           **self.metadata.get("generation", {})}
        self.config = _read_json(os.path.join(self.folder, "config.json"))
        self._feature_extractor: Any = None
        self._tokenizer: Any = None

    def audio_arrays(self, audio: Any) -> list[np.ndarray]:
        """One audio or a list (paths to WAV files or float arrays) as float32 arrays at the
        feature extractor's rate."""
        return read_audios(audio, int(self.feature_extractor.sampling_rate))

    @property
    def feature_extractor(self) -> Any:
        """The folder's feature extractor (offline); a ValueError when it has none."""
        if self._feature_extractor is None:
            import transformers

            if not os.path.isfile(os.path.join(self.folder, "preprocessor_config.json")):
                raise ValueError(f"{self.folder!r} has no preprocessor_config.json: copy the feature extractor of the "
                                 "checkpoint into the folder.")
            self._feature_extractor = transformers.AutoFeatureExtractor.from_pretrained(self.folder,
                                                                                        local_files_only=True)
        return self._feature_extractor

    @property
    def tokenizer(self) -> Any:
        """The folder's tokenizer (offline) or None: the tokens are then printed as ids."""
        if self._tokenizer is None:
            import transformers

            try:
                self._tokenizer = transformers.AutoTokenizer.from_pretrained(self.folder, local_files_only=True)
            except (OSError, ValueError, TypeError):
                self._tokenizer = False
        return self._tokenizer or None

    def transcribe(
        self,
        audio: Any,
        max_new_tokens: int = 32,
        language: str | None = None,
        task: str | None = None,
        on_text: Callable[[str], None] | None = None,
        as_text: bool = True,
    ) -> SpeechResult:
        """Greedy transcription of one audio or a batch (WAV paths or float arrays at the feature
        extractor's rate), the tokens transformers' ``generate`` returns.

        :param language: Whisper's: a language (``"fr"``, ``"french"``, ``"<|fr|>"``; default: the
            generation config's, else detected when the model is multilingual); refused by the other models
        :param task: Whisper's: ``transcribe`` or ``translate`` (default: the generation config's);
            refused by the other models
        :param on_text: receives the text of the first audio as it is decoded
        :param as_text: decode the tokens with the folder's tokenizer (when it has one)
        """
        options = self._prompt_options(language, task)
        return self.generate_ids(self.features(audio), max_new_tokens, on_text=on_text, as_text=as_text, **options)

    def _prompt_options(self, language: str | None, task: str | None) -> dict[str, Any]:
        """The keywords of ``generate_ids`` choosing the prompt: none, ``language`` and ``task`` are
        refused (Whisper's generator takes them)."""
        if language is not None or task is not None:
            model_type = self.config.get("model_type")
            raise ValueError(f"A {model_type} folder takes no language or task (Whisper's options): remove them.")
        return {}

    def _generate_from_prompt(self, ids: np.ndarray, constants: dict[str, Any], encoder_seconds: float,
                              max_new_tokens: int, sampling: Callable[[list[int]], Any],
                              on_text: Callable[[str], None] | None, as_text: bool) -> SpeechResult:
        """The decoder (``self.decoder``, a :class:`fx2onnx.runtime.OnnxGenerator`) from the prompts
        ``ids`` with the encoder's ``constants``: the prompt and ``max_new_tokens`` checked against the
        decoder's positions, ``sampling(eos_ids)`` the logits processor (None: the argmax), the tokens of
        each row cut after its first end-of-sequence token and decoded when ``as_text``."""
        limit = self.config.get("max_target_positions")
        if limit is not None and ids.shape[1] + max_new_tokens > limit:
            raise ValueError(f"The prompt ({ids.shape[1]} tokens) and max_new_tokens={max_new_tokens} exceed the "
                             f"decoder's {limit} positions: ask for at most {limit - ids.shape[1]} new tokens.")
        gen = self.generation
        eos = gen.get("eos_token_id", self.config.get("eos_token_id"))
        pad = gen.get("pad_token_id", self.config.get("pad_token_id"))
        eos_ids = [int(e) for e in np.atleast_1d(eos).tolist()] if eos is not None else []
        tokenizer = self.tokenizer if as_text else None
        stream = TextStream(tokenizer, on_text) if tokenizer is not None and on_text is not None else None
        tokens = self.decoder.generate(ids, max_new_tokens, eos_token_id=eos, pad_token_id=pad,
                                       sampling=sampling(eos_ids), streamer=stream, constants=constants)
        new_ids = cut_after_eos(tokens[:, ids.shape[1]:], eos_ids)
        texts = [tokenizer.decode(n, skip_special_tokens=True) for n in new_ids] if tokenizer is not None else None
        return SpeechResult(ids.tolist(), new_ids, texts, encoder_seconds, self.decoder.last_times)


class SpeechGenerator(SpeechFolder):
    """The encoder, decoder, feature extractor, tokenizer and generation config of an exported
    Whisper folder.

    :param folder: a folder written by :func:`fx2onnx.deploy.export_folder` from a Whisper folder
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None):
        super().__init__(folder)
        self.pieces, self.encoder, self.cross_names, self.decoder = open_pieces(
            self.folder, "speech-seq2seq", "encoder", NOT_SPEECH, providers, threads)

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
        return dict(zip(self.cross_names, outputs)), time.perf_counter() - begin

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
