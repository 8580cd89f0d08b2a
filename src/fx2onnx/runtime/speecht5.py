"""Texts to speech with a SpeechT5 folder written by ``export`` (:mod:`fx2onnx.deploy.speecht5`): the loop of
transformers' ``generate_speech``, then the postnet and the vocoder, as transformers' text-to-audio pipeline returns
it with the same vocoder.

The encoder runs once on the text; the decoder runs once per step on the frames so far (the first all zeros), the
speaker embedding, the encoder's states and its cache, giving ``reduction_factor`` new frames and their stop
probabilities; the loop stops when the probabilities sum to ``threshold`` (0.5) or more, or after ``maxlenratio``
(20) steps per text token over the reduction factor, at least ``minlenratio`` (0) ones. The spectrogram of every step
goes through the postnet and the vocoder; the rate is the vocoder's (``vocoder/config.json``).

The voice: ``speaker_embeddings=`` (or ``forward_params={"speaker_embeddings": ...}`` as transformers' pipeline
takes it), by default the folder's ``speaker_embeddings.npy``.

.. code-block:: python

    import fx2onnx

    speech = fx2onnx.pipeline("speecht5_onnx")("hello world", speaker_embeddings=xvector)
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from ..formats import FOLDER_METADATA
from .folder import _read_json, piece_sessions
from .integrity import check_folder_files
from .text_to_audio import TextToAudioPipeline

#: the default voice of a folder, beside its config.json
SPEAKER_FILE = "speaker_embeddings.npy"
#: the options of transformers' generate_speech the loop takes, with their defaults
LOOP_DEFAULTS = {"threshold": 0.5, "minlenratio": 0.0, "maxlenratio": 20.0}


class SpeechT5Pipeline(TextToAudioPipeline):
    """A SpeechT5 folder (an encoder, a spectrogram decoder with its cache, the postnet and the vocoder), called as
    transformers' text-to-audio pipeline given the same vocoder.

    :param folder: a folder written by ``python -m fx2onnx export`` from a SpeechT5 checkpoint with its ``vocoder/``
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None,  # noqa: D107
                 threads: int | None = None):
        self.folder = os.fspath(folder)
        metadata = _read_json(os.path.join(self.folder, FOLDER_METADATA))
        self.task, self.pieces = metadata.get("task"), metadata.get("pieces", {})
        check_folder_files(self.folder, metadata)
        self.modality, self.sentence, self.per_text, self.id2label = "text", False, False, {}
        self.sessions = piece_sessions(self.folder, self.pieces, providers, threads)
        self.session = self.sessions["encoder"]
        self.input_names, self.outputs = list(self.pieces["encoder"]["inputs"]), ("waveform",)
        self.int64_inputs = {i.name for i in self.session.get_inputs() if i.type == "tensor(int64)"}
        self.config = _read_json(os.path.join(self.folder, "config.json"))
        vocoder = _read_json(os.path.join(self.folder, "vocoder", "config.json"))
        #: the rate of the waveform (the vocoder's ``sampling_rate``)
        self.sampling_rate = int(vocoder.get("sampling_rate") or 16000)
        speaker = os.path.join(self.folder, SPEAKER_FILE)
        #: the default voice (None: each call gives one)
        self.speaker_embeddings = np.load(speaker).astype(np.float32) if os.path.isfile(speaker) else None
        self._processor = self._tokenizer = None

    def _speaker(self, given: Any) -> np.ndarray:
        """The speaker embedding as ``(1, dim)`` float32; one line when there is none or its size is wrong."""
        dim = int(self.config.get("speaker_embedding_dim") or 512)
        if given is None:
            given = self.speaker_embeddings
        if given is None:
            raise ValueError(f"{self.folder!r} is a SpeechT5 folder: give a voice, speaker_embeddings= (an x-vector "
                             f"of {dim} floats), or save one as {SPEAKER_FILE} in the folder.")
        value = np.asarray(given.detach().cpu().numpy() if hasattr(given, "detach") else given, dtype=np.float32)
        if value.size != dim:
            raise ValueError(f"speaker_embeddings holds {value.size} values, the model takes {dim} (an x-vector).")
        return value.reshape(1, dim)

    def __call__(self, inputs: Any, speaker_embeddings: Any = None, forward_params: dict | None = None,
                 **unused: Any) -> Any:
        """What transformers' ``pipeline("text-to-audio", model=folder, vocoder=vocoder)(inputs,
        forward_params={"speaker_embeddings": ...})`` returns: ``{"audio": samples, "sampling_rate": rate}`` per
        text."""
        params = dict(forward_params or {})
        loop = {k: float(params.pop(k, LOOP_DEFAULTS[k])) for k in LOOP_DEFAULTS}
        speaker_embeddings = params.pop("speaker_embeddings", speaker_embeddings)
        given = {k: v for k, v in {**unused, **params}.items() if v is not None}
        if given:
            raise ValueError(f"a text-to-audio folder takes no {sorted(given)}.")
        speaker = self._speaker(speaker_embeddings)
        return self._speak_texts(inputs, lambda encoded: self._speak(encoded, speaker, **loop))

    def _speak(self, encoded: dict[str, Any], speaker: np.ndarray, threshold: float, minlenratio: float,
               maxlenratio: float) -> np.ndarray:
        """The waveform of one tokenized text: transformers' ``_generate_speech`` loop on the pieces."""
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        mask = np.asarray(encoded.get("attention_mask", np.ones_like(ids)), dtype=np.int64)
        states = self.sessions["encoder"].run(None, {"input_ids": ids, "attention_mask": mask})[0]
        reduction, bins = int(self.config.get("reduction_factor", 2)), int(self.config.get("num_mel_bins", 80))
        maxlen = int(states.shape[1] * maxlenratio / reduction)
        minlen = int(states.shape[1] * minlenratio / reduction)
        decoder = self.pieces["decoder"]
        heads = int(self.config["decoder_attention_heads"])
        empty = np.zeros((1, heads, 0, int(self.config["hidden_size"]) // heads), dtype=states.dtype)
        cache = {name: empty for name in decoder["cache"]}
        frames = np.zeros((1, 1, bins), dtype=states.dtype)
        spectra, step = [], 0
        while True:
            step += 1
            outputs = dict(zip(decoder["outputs"], self.sessions["decoder"].run(None, {
                "output_sequence": frames, "speaker_embeddings": speaker.astype(states.dtype),
                "encoder_hidden_states": states, "encoder_attention_mask": mask, **cache})))
            cache = {past: outputs[present] for past, present in decoder["cache"].items()}
            spectrum = outputs["spectrum"]
            spectra.append(spectrum)
            frames = np.concatenate([frames, spectrum[:, -1:]], axis=1)
            if step < minlen:
                continue
            if step >= maxlen or outputs["prob"].sum(axis=-1)[0] >= threshold:
                break
        spectrogram = np.concatenate(spectra, axis=1)
        return self.sessions["postnet_and_vocoder"].run(None, {"spectrogram": spectrogram})[0]
