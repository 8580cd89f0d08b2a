"""Image (and a prompt) in, text out from a folder of a model whose image features precede the prompt
(GIT, split by :mod:`fx2onnx.deploy.image_prefix`).

:class:`ImagePrefixGenerator` runs the vision piece once on the images (the folder's processor's
``pixel_values``), writes one placeholder per feature row in front of each prompt (the id
``fx2onnx.json`` names, outside the vocabulary), gives the text the positions transformers' ``generate``
does (from 0, the image rows not counted) and runs the decoder with its cache, the features fed at every
step (the decoder reads them where the placeholders are: in the prompt only). A prompt is the text after
the start token (``[CLS]``), as GIT's documentation builds ``input_ids``; several images make a batch.

.. code-block:: python

    from fx2onnx.runtime.image_prefix import ImagePrefixGenerator
    gen = ImagePrefixGenerator("git_onnx")
    print(gen.describe(["cat.png"], max_new_tokens=20).text)
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from ..ort_values import ort_value_to_numpy
from .folder import TextStream
from .speech import SpeechResult, cut_after_eos
from .vision import VisionGenerator, load_images

NOT_PREFIX = ("{folder} is not a folder of an image-text model whose image precedes the prompt (task {task}): "
              "export such a checkpoint (GIT) with python -m fx2onnx export CHECKPOINT --out FOLDER.")


class ImagePrefixGenerator(VisionGenerator):
    """The vision piece, decoder, processor and generation config of a folder exported from GIT.

    :param folder: a folder written by :func:`fx2onnx.deploy.export_folder` from such a checkpoint
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    refusal = NOT_PREFIX

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None):
        super().__init__(folder, providers, threads)
        #: the placeholder of an image row (outside the vocabulary), as the export wrote it
        self.image_token_id = self.pieces["decoder"].get("prefix_token_id")
        if self.image_token_id is None:
            raise ValueError(NOT_PREFIX.format(folder=repr(self.folder), task=repr(self.task)))
        self.bos_token_id = self.config.get("bos_token_id")
        self.eos_token_id = self.eos_token_id if self.eos_token_id is not None else self.config.get("eos_token_id")

    def prompt_ids(self, prompt: str | None) -> list[int]:
        """The start token, then ``prompt`` tokenized without special tokens (GIT's ``input_ids``)."""
        ids = [] if self.bos_token_id is None else [int(self.bos_token_id)]
        if prompt:
            ids += self.processor.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError(f"{self.folder!r}: the config names no bos_token_id and no prompt is given.")
        return ids

    def generate_ids(self, inputs: dict[str, Any], max_new_tokens: int = 32,
                     streamer: Callable[[np.ndarray], None] | None = None, sampling: Any = None) -> np.ndarray:
        """Greedy generation (or ``sampling``) from ``pixel_values`` and the text prompts ``input_ids``
        ``(batch, length)`` (no placeholder): the tokens ``(batch, length + new)`` transformers'
        ``generate(pixel_values=..., input_ids=...)`` returns."""
        inputs = {k: v.numpy() if hasattr(v, "numpy") else np.asarray(v) for k, v in inputs.items()}
        text = inputs["input_ids"].astype(np.int64)
        batch, length = text.shape
        features = self.vision_outputs({"pixel_values": inputs["pixel_values"]})
        rows, extra = divmod(ort_value_to_numpy(features[0]).shape[0], batch)
        if extra or not rows:
            raise ValueError(f"The vision piece gives {rows * batch + extra} feature rows for {batch} prompts: one image "
                             "per prompt.")
        ids = np.concatenate([np.full((batch, rows), self.image_token_id, dtype=np.int64), text], axis=1)
        positions = np.concatenate([np.zeros((batch, rows), dtype=np.int64),
                                    np.broadcast_to(np.arange(length, dtype=np.int64), (batch, length))], axis=1)
        tokens = self.decoder.generate(ids, max_new_tokens, np.ones_like(ids), eos_token_id=self.eos_token_id,
                                       pad_token_id=self.pad_token_id, streamer=streamer, sampling=sampling,
                                       constants=dict(zip(self.feature_names, features)), position_ids=positions)
        return np.concatenate([text, tokens[:, ids.shape[1]:]], axis=1)

    def describe(self, images: Any, max_new_tokens: int = 32, on_text: Callable[[str], None] | None = None,
                 as_text: bool = True, prompt: str | None = None) -> SpeechResult:
        """Greedy text of one image or a batch (paths or PIL images) after the start token and ``prompt``
        (the same for every image), each row cut after its end-of-sequence token."""
        import time

        loaded = load_images(images)
        pixels = np.asarray(self.processor(images=loaded, return_tensors="np")["pixel_values"])
        text = np.array([self.prompt_ids(prompt)] * len(loaded), dtype=np.int64)
        tokenizer = self.processor.tokenizer if as_text else None
        stream = TextStream(tokenizer, on_text) if tokenizer is not None and on_text is not None else None
        begin = time.perf_counter()
        tokens = self.generate_ids({"pixel_values": pixels, "input_ids": text}, max_new_tokens, stream)
        eos = [] if self.eos_token_id is None else [int(e) for e in np.atleast_1d(self.eos_token_id)]
        new_ids = cut_after_eos(tokens[:, text.shape[1]:], eos)
        texts = [tokenizer.decode(n, skip_special_tokens=True) for n in new_ids] if tokenizer is not None else None
        times = self.decoder.last_times
        vision_seconds = max(0.0, time.perf_counter() - begin - times.prefill_total - times.decode_total)
        return SpeechResult(text.tolist(), new_ids, texts, vision_seconds, times)
