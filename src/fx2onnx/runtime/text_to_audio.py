"""Texts to the waveform transformers' text-to-audio pipeline returns, with a VITS folder written by ``export``
(``onnx/model.onnx``: :mod:`fx2onnx.deploy.text_to_audio`), and a WAV file of it (a SpeechT5 folder, split
``spectrogram``, runs :class:`fx2onnx.runtime.speecht5.SpeechT5Pipeline`: :func:`fx2onnx.pipeline` opens it).

One text at a time, as the pipeline: the folder's tokenizer, the model, ``{"audio": samples (float32),
"sampling_rate": rate}`` (the rate of ``config.json``). :func:`write_wav` saves it as 16-bit PCM.

.. code-block:: python

    import fx2onnx

    speech = fx2onnx.pipeline("tts_onnx")("hello world")
    fx2onnx.runtime.text_to_audio.write_wav("hello.wav", speech["audio"], speech["sampling_rate"])
"""

from __future__ import annotations

import os
import wave
from typing import Any, Callable, Sequence

import numpy as np

from .pipelines import Pipeline, open_task_folder


def write_wav(path: str | os.PathLike, audio: np.ndarray, rate: int) -> str:
    """Writes the samples ``audio`` (floats in [-1, 1], clipped) at ``rate`` as a mono 16-bit PCM WAV file."""
    samples = (np.clip(np.asarray(audio, dtype=np.float32).reshape(-1), -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(os.fspath(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(int(rate))
        f.writeframes(samples.tobytes())
    return os.fspath(path)


class TextToAudioPipeline(Pipeline):
    """A VITS folder, called as transformers' text-to-audio pipeline.

    :param folder: a folder written by ``python -m fx2onnx export`` for task ``text-to-audio``
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None,  # noqa: D107
                 threads: int | None = None):
        open_task_folder(self, folder, "text-to-audio", providers, threads)
        #: the rate of the waveform (``config.json``'s ``sampling_rate``)
        self.sampling_rate = int(self.config.get("sampling_rate") or self.config.get("sample_rate") or 16000)

    def __call__(self, inputs: Any, **unused: Any) -> Any:
        """What transformers' ``pipeline("text-to-audio", model=folder)(inputs)`` returns: ``{"audio": samples,
        "sampling_rate": rate}`` per text."""
        given = {k: v for k, v in unused.items() if v is not None}
        if given:
            raise ValueError(f"a text-to-audio folder takes no {sorted(given)}.")
        return self._speak_texts(inputs, self._run)

    def _speak_texts(self, inputs: Any, waveform_of: Callable[[dict[str, Any]], np.ndarray]) -> Any:
        """``waveform_of`` each tokenized text of ``inputs`` (a text or a list), one at a time as the pipeline:
        ``{"audio": samples, "sampling_rate": rate}`` per text; one line when a text keeps no token."""
        single = not isinstance(inputs, (list, tuple))
        texts = self._texts([inputs] if single else list(inputs))
        if not texts:
            raise ValueError("nothing to run: give at least one text.")
        results = []
        for text in texts:
            encoded = self.processor([text], return_tensors="np")
            if encoded["input_ids"].shape[-1] == 0:
                raise ValueError(f"the tokenizer of {self.folder!r} keeps no token of {text!r:.60}: give a text in "
                                 "the characters of its vocabulary.")
            waveform = waveform_of(dict(encoded))
            results.append({"audio": waveform.astype(np.float32).squeeze(), "sampling_rate": self.sampling_rate})
        return results[0] if single else results
