"""Image in, text out from a folder of an encoder-decoder reading pixels (TrOCR, Donut, any
``VisionEncoderDecoderModel``; BLIP's captioner and Florence-2, :mod:`fx2onnx.deploy.captioner`) split by
:mod:`fx2onnx.deploy.speech_generic`.

:class:`Seq2SeqImageGenerator` is the loop of :class:`fx2onnx.runtime.speech_seq2seq.Seq2SeqSpeechGenerator`
(the encoder once, its outputs fed unchanged to every decoder step, the generation config's start
token as the decoder's prompt, the same greedy logits processors) on the pixels of the folder's own
image processor (``AutoImageProcessor``, offline): the tokens of transformers'
``model.generate(pixel_values=..., do_sample=False)``. Several images make a batch.

.. code-block:: python

    from fx2onnx.runtime.image_seq2seq import Seq2SeqImageGenerator
    gen = Seq2SeqImageGenerator("trocr_onnx")
    result = gen.describe(["line.png"], max_new_tokens=40)
    print(result.text)
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from .speech import SpeechResult
from .speech_seq2seq import Seq2SeqSpeechGenerator
from .vision import load_images, load_processor

#: ``fx2onnx.json``'s ``decoder_prompt`` of a captioner (BLIP): its prompt follows the start token
PROMPT_AFTER_START = "after_start"
NOT_IMAGE_TO_TEXT = ("{folder} is not a folder of an image encoder-decoder (task {task}): export a checkpoint such as "
                     "TrOCR's with python -m fx2onnx export CHECKPOINT --out FOLDER.")


class Seq2SeqImageGenerator(Seq2SeqSpeechGenerator):
    """The encoder, decoder, image processor, tokenizer and generation config of a folder exported from
    an encoder-decoder reading an image.

    :param folder: a folder written by :func:`fx2onnx.deploy.export_folder` from such a checkpoint
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    task, refusal = "image-text-to-text", NOT_IMAGE_TO_TEXT

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None):
        super().__init__(folder, providers, threads)
        self._image_processor: Any = None
        self._processor: Any = None  # the processor of an encoder reading a prompt (Florence-2), loaded once

    @property
    def image_processor(self) -> Any:
        """The folder's image processor (offline); a ValueError when it has none."""
        if self._image_processor is None:
            import transformers

            if not os.path.isfile(os.path.join(self.folder, "preprocessor_config.json")):
                raise ValueError(f"{self.folder!r} has no preprocessor_config.json: copy the image processor of the "
                                 "checkpoint into the folder.")
            self._image_processor = transformers.AutoImageProcessor.from_pretrained(self.folder, local_files_only=True)
        return self._image_processor

    def features(self, images: Any) -> dict[str, np.ndarray]:
        """The encoder's ``pixel_values`` for one image or a list (paths, or PIL images), made by the
        folder's image processor."""

        pixels = self.image_processor(load_images(images), return_tensors="np")["pixel_values"]
        return {"pixel_values": np.asarray(pixels)}

    @property
    def reads_prompt(self) -> bool:
        """Whether the encoder takes a prompt the image is merged into (Florence-2's task prompt)."""
        return "input_ids" in self.encoder_inputs

    def prompt_features(self, images: Any, prompt: str) -> dict[str, np.ndarray]:
        """The encoder's inputs of an encoder reading a prompt: the folder's processor on the images and
        ``prompt`` (the same for every image; Florence-2's task, ``"<CAPTION>"``, becomes its question)."""

        loaded = load_images(images)
        if self._processor is None:
            self._processor = load_processor(self.folder)
        out = self._processor(text=[prompt] * len(loaded), images=loaded, return_tensors="np")
        return {k: np.asarray(out[k]) for k in self.encoder_inputs if k in out}

    def describe(self, images: Any, max_new_tokens: int = 32, on_text: Callable[[str], None] | None = None,
                 as_text: bool = True, prompt: str | None = None) -> SpeechResult:
        """Greedy text of one image or a batch (paths or PIL images): the tokens transformers'
        ``generate(pixel_values=..., do_sample=False)`` returns after the decoder's start token;
        ``prompt``: the decoder's prompt instead (Donut's task prompt, ``"<s_cord-v2>"``), tokenized by
        the folder's tokenizer without special tokens, the same for every image, as transformers'
        ``generate(pixel_values=..., decoder_input_ids=...)``; a captioner's (BLIP: ``"a photography of"``)
        after the start token, as its ``generate(pixel_values=..., input_ids=...)``; the encoder's when it
        reads one (Florence-2's task, ``"<CAPTION>"``, required), as ``generate(**processor(text, images))``."""
        if self.reads_prompt:
            if prompt is None:
                raise ValueError(f"The encoder of {self.folder!r} reads a prompt with the image: give one (Florence-2's "
                                 "task: <CAPTION>, <DETAILED_CAPTION>, <OCR>...).")
            return self.generate_ids(self.prompt_features(images, prompt), max_new_tokens, on_text=on_text,
                                     as_text=as_text)
        ids = None
        if prompt is not None:
            if self.tokenizer is None:
                raise ValueError(f"{self.folder!r} has no tokenizer: a prompt cannot be encoded.")
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            if not ids:
                raise ValueError(f"The prompt {prompt!r} has no token.")
            if self.metadata.get("decoder_prompt") == PROMPT_AFTER_START:
                ids = [int(self.prompt(1)[0, 0]), *ids]
        return self.generate_ids(self.features(images), max_new_tokens, on_text=on_text, as_text=as_text,
                                 decoder_input_ids=ids)
