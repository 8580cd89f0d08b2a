"""Texts to the waveform transformers' text-to-audio pipeline returns, with a MusicGen folder written by ``export``
(:mod:`fx2onnx.deploy.text_to_audio_codebooks`: the text encoder, the merged decoder over codebooks, the codec's
decoder).

The loop is MusicGen's ``generate`` in greedy search: the codebooks delayed one step each (the delay pattern: a
codebook's first and last codes are the pad code), classifier-free guidance when the generation config's
``guidance_scale`` is above 1 (the text's states and a null text's, the logits mixed as ``uncond + (cond - uncond)
* scale``), ``max_length`` steps of the generation config, the codes of every codebook then decoded to the waveform.
It always takes the most likely code: a published folder's generation config says ``do_sample=True``, which the
pipeline follows unless given ``forward_params={"do_sample": False}`` (what this loop equals).

.. code-block:: python

    import fx2onnx

    music = fx2onnx.pipeline("musicgen_onnx")("a calm piano melody")
    print(music["audio"].shape, music["sampling_rate"])
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from ..formats import FOLDER_METADATA
from .folder import _read_json, piece_sessions
from .integrity import check_folder_files

#: onnxruntime's type names -> numpy's
_FLOATS = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


def delay_pattern(codebooks: int, length: int, pad: int) -> np.ndarray:
    """MusicGen's delay pattern ``(codebooks, length)``: -1 where a code is generated, ``pad`` before a codebook's
    start (codebook ``k`` starts at step ``k + 1``) and after its end (the last ``codebooks - 1 - k`` steps)."""
    pattern = np.full((codebooks, length), -1, dtype=np.int64)
    if length < 2 * codebooks - 1:  # too short for the pattern: transformers leaves every code free
        return pattern
    for k in range(codebooks):
        pattern[k, :k + 1] = pad
        pattern[k, length - codebooks + 1 + k:] = pad
    return pattern


class CodebookTextToAudioPipeline:
    """A MusicGen folder, called as transformers' text-to-audio pipeline with greedy decoding.

    :param folder: a folder written by ``python -m fx2onnx export`` for task ``text-to-audio``, split ``codebooks``
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    modality = "text"

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None,  # noqa: D107
                 threads: int | None = None):
        self.folder = os.fspath(folder)
        metadata = _read_json(os.path.join(self.folder, FOLDER_METADATA))
        self.task = metadata.get("task")
        if self.task != "text-to-audio" or metadata.get("split") != "codebooks":
            raise ValueError(f"{self.folder!r} is a folder of task {self.task!r}, not a MusicGen text-to-audio one.")
        check_folder_files(self.folder, metadata)
        pieces = metadata["pieces"]
        sessions = piece_sessions(self.folder, {"encoder": pieces["encoder"], "decoder": pieces["decoder"],
                                                "audio_decoder": metadata["audio_decoder"]}, providers, threads)
        self.encoder, self.decoder, self.audio_decoder = (sessions[n] for n in ("encoder", "decoder", "audio_decoder"))
        self.codebooks = int(metadata["codebooks"])
        self.config = _read_json(os.path.join(self.folder, "config.json"))
        generation_path = os.path.join(self.folder, "generation_config.json")
        generation = _read_json(generation_path) if os.path.isfile(generation_path) else {}
        decoder_config = self.config.get("decoder", {})
        #: the decoder's start code, the pad code of the delay pattern (generate's ``decoder_start_token_id``)
        self.start = int(metadata.get("start", decoder_config.get("bos_token_id", 0)))
        #: the code removed from the generated codes before they are decoded (generate's ``pad_token_id``)
        self.pad = int(generation.get("pad_token_id", decoder_config.get("pad_token_id", self.start)))
        self.guidance_scale = generation.get("guidance_scale")
        #: the length of the codes generated with the start code, as generate counts it: the start code and
        #: ``max_new_tokens``, else the generation config's ``max_length`` more (20 by default)
        new = generation.get("max_new_tokens")
        self.max_length = 1 + int(new if new is not None else generation.get("max_length") or 20)
        if new is None and self.config.get("max_position_embeddings"):
            self.max_length = min(self.max_length, int(self.config["max_position_embeddings"]))
        #: the rate of the waveform (the codec's ``sampling_rate``)
        self.sampling_rate = int(self.config.get("audio_encoder", {}).get("sampling_rate") or 32000)
        self.float_type = {i.name: _FLOATS[i.type] for i in self.decoder.get_inputs() if i.type in _FLOATS}
        self._tokenizer = None

    @property
    def tokenizer(self) -> Any:
        """The folder's tokenizer (loaded on first use, offline)."""
        if self._tokenizer is None:
            import transformers

            self._tokenizer = transformers.AutoTokenizer.from_pretrained(self.folder, local_files_only=True)
        return self._tokenizer

    processor = tokenizer

    def __call__(self, inputs: Any, forward_params: dict[str, Any] | None = None,
                 generate_kwargs: dict[str, Any] | None = None, **unused: Any) -> Any:
        """What transformers' ``pipeline("text-to-audio", model=folder)(inputs, forward_params={"do_sample":
        False})`` returns: ``{"audio": samples, "sampling_rate": rate}`` per text. ``forward_params`` and
        ``generate_kwargs`` as the pipeline's: ``do_sample`` (False only), ``max_new_tokens``, ``guidance_scale``."""
        given = {k: v for k, v in unused.items() if v is not None}
        if given:
            raise ValueError(f"a text-to-audio folder takes no {sorted(given)}.")
        options = {**(forward_params or {}), **(generate_kwargs or {})}
        unknown = sorted(set(options) - {"do_sample", "max_new_tokens", "guidance_scale"})
        if unknown:
            raise ValueError(f"a MusicGen folder's loop takes do_sample, max_new_tokens and guidance_scale, not "
                             f"{unknown}.")
        if options.get("do_sample"):
            raise ValueError("a MusicGen folder's loop is greedy: give do_sample=False (or nothing).")
        single = not isinstance(inputs, (list, tuple))
        texts = [inputs] if single else list(inputs)
        bad = next((t for t in texts if not isinstance(t, str)), None)
        if bad is not None:
            raise ValueError(f"{self.folder!r} is a folder of task 'text-to-audio': it takes a text, not {bad!r:.60}.")
        if not texts:
            raise ValueError("nothing to run: give at least one text.")
        new = options.get("max_new_tokens")
        length = self.max_length if new is None else 1 + int(new)
        scale = options.get("guidance_scale", self.guidance_scale)
        results = [{"audio": self.generate(text, length, scale).squeeze(), "sampling_rate": self.sampling_rate}
                   for text in texts]
        return results[0] if single else results

    def codes(self, text: str, length: int | None = None, guidance_scale: float | None = None) -> np.ndarray:
        """The codes ``(1, codebooks, frames)`` greedy search generates for ``text`` in ``length`` steps (default
        :attr:`max_length`; ``guidance_scale`` default the generation config's), the delay pattern removed."""
        encoded = self.tokenizer([text], return_tensors="np")
        ids, mask = encoded["input_ids"].astype(np.int64), encoded["attention_mask"].astype(np.int64)
        hidden = self.encoder.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        scale = self.guidance_scale if guidance_scale is None else guidance_scale
        guided = scale is not None and float(scale) > 1
        if guided:  # the null text: its states zero, its mask empty
            hidden = np.concatenate([hidden, np.zeros_like(hidden)])
            mask = np.concatenate([mask, np.zeros_like(mask)])
        rows, k, length = hidden.shape[0], self.codebooks, length or self.max_length
        pattern = delay_pattern(k, length, self.start)
        generated = np.full((k, 1), self.start, dtype=np.int64)
        feeds: dict[str, Any] = {"encoder_hidden_states": hidden.astype(self.float_type["encoder_hidden_states"]),
                                 "encoder_attention_mask": mask, "use_cache_branch": np.array([False])}
        for i in self.decoder.get_inputs():
            if i.name.startswith("past_key_values."):
                feeds[i.name] = np.zeros((rows, i.shape[1], 0, i.shape[3]), dtype=self.float_type[i.name])
        names = [o.name for o in self.decoder.get_outputs()]
        while generated.shape[1] < length:
            step = generated.shape[1] - 1
            last = np.where(pattern[:, step] == -1, generated[:, step], pattern[:, step])
            feeds["input_ids"] = np.broadcast_to(last[None, :, None], (rows, k, 1)).copy()
            outputs = dict(zip(names, self.decoder.run(None, feeds)))
            logits = outputs["logits"][:, :, -1].astype(np.float32)
            if guided:
                logits = logits[1] + (logits[0] - logits[1]) * float(scale)
            else:
                logits = logits[0]
            generated = np.concatenate([generated, logits.argmax(-1)[:, None]], axis=1)
            for name, value in outputs.items():
                if name.startswith("present."):
                    feeds["past_key_values." + name[len("present."):]] = value
            feeds["use_cache_branch"] = np.array([True])
        generated = np.where(pattern == -1, generated, pattern)
        return generated[generated != self.pad].reshape(1, k, -1)

    def generate(self, text: str, length: int | None = None, guidance_scale: float | None = None) -> np.ndarray:
        """The waveform ``(1, channels, samples)`` of ``text``: :meth:`codes` decoded by the codec."""
        codes = self.codes(text, length, guidance_scale)
        if codes.shape[-1] == 0:
            raise ValueError(f"{self.folder!r} generates no frame in {length or self.max_length} steps of "
                             f"{self.codebooks} delayed codebooks: give more new tokens (max_new_tokens).")
        return self.audio_decoder.run(None, {"audio_codes": codes})[0].astype(np.float32)
