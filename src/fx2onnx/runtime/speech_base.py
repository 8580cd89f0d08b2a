"""What every exported speech folder shares: WAV reading and writing, :class:`SpeechFolder` (the folder's
feature extractor, tokenizer and configs), the result of a transcription and the logits processors.

The generators are in :mod:`fx2onnx.runtime.speech` (Whisper), :mod:`fx2onnx.runtime.speech_seq2seq` (the other
encoder-decoders) and :mod:`fx2onnx.runtime.audio_text` (speech language models).

.. code-block:: python

    import numpy as np
    from fx2onnx.runtime.speech_base import read_wav, write_wav

    write_wav("tone.wav", np.zeros(1600, dtype=np.float32), 16000)
    print(read_wav("tone.wav", 16000).shape)  # (1600,)
"""


from __future__ import annotations

import dataclasses
import os
import wave
from typing import Any, Callable, Sequence

import numpy as np

from .folder import FOLDER_METADATA, TextStream, _read_json
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


class SpeechFolder:
    """What every exported speech folder has: its feature extractor, tokenizer, config and
    generation config (read offline from the folder), and what the generators share: ``transcribe``
    and the greedy decoding after the prompt. A generator sets ``decoder`` (an
    :class:`fx2onnx.runtime.OnnxGenerator`) and defines ``features`` and ``generate_ids``."""

    def __init__(self, folder: str | os.PathLike):
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
