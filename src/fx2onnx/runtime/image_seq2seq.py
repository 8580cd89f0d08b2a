"""Image in, text out from a folder of an encoder-decoder reading pixels (TrOCR, Donut, any
``VisionEncoderDecoderModel``; BLIP's captioner and Florence-2, :mod:`fx2onnx.deploy.captioner`) split by
:mod:`fx2onnx.deploy.speech_generic`.

:class:`Seq2SeqImageGenerator` is the loop of :class:`fx2onnx.runtime.speech_seq2seq.Seq2SeqSpeechGenerator`
(the encoder once, its outputs fed unchanged to every decoder step, the generation config's start
token as the decoder's prompt, the same greedy logits processors) on the pixels of the folder's own
image processor (``AutoImageProcessor``, offline): the tokens of transformers'
``model.generate(pixel_values=..., do_sample=False)``. Several images make a batch. A Florence-2 folder holds the
four files transformers.js loads (:mod:`fx2onnx.deploy.prompt_merging_split`): the loop writes
``vision_encoder.onnx``'s features over the prompt's placeholders in ``embed_tokens.onnx``'s embeddings, runs
``encoder_model.onnx``, then the merged decoder with ``embed_tokens.onnx`` before it (:func:`decoder_on_token_ids`).

.. code-block:: python

    from fx2onnx.runtime.image_seq2seq import Seq2SeqImageGenerator
    gen = Seq2SeqImageGenerator("trocr_onnx")
    result = gen.describe(["line.png"], max_new_tokens=40)
    print(result.text)
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

import numpy as np

from .folder import session_options
from .speech import SpeechResult
from .speech_seq2seq import Seq2SeqSpeechGenerator, encoder_constants
from .vision import load_images, load_processor

#: the pieces of ``fx2onnx.json`` of Florence-2's four files (:mod:`fx2onnx.deploy.prompt_merging_split`)
VISION_PIECE, EMBED_PIECE = "vision_encoder", "embed_tokens"
#: the processor's outputs the four files read
PROMPT_INPUTS = ("pixel_values", "input_ids", "attention_mask")
#: ``fx2onnx.json``'s ``decoder_prompt`` of a captioner (BLIP): its prompt follows the start token
PROMPT_AFTER_START = "after_start"
NOT_IMAGE_TO_TEXT = ("{folder} is not a folder of an image encoder-decoder (task {task}): export a checkpoint such as "
                     "TrOCR's with python -m fx2onnx export CHECKPOINT --out FOLDER.")


def decoder_on_token_ids(embed_path: str, decoder_path: str, providers: Sequence[str] | None, options: Any) -> Any:
    """An onnxruntime session of the decoder ``decoder_path`` (reading ``inputs_embeds``) after the embedding file
    ``embed_path`` (``input_ids`` -> ``inputs_embeds``): one graph on ``input_ids``, made in memory, both files'
    weights read where they are (one folder)."""
    import onnx
    import onnxruntime

    embed = onnx.load(embed_path, load_external_data=False)
    decoder = onnx.load(decoder_path, load_external_data=False)
    if os.path.dirname(os.path.abspath(embed_path)) != os.path.dirname(os.path.abspath(decoder_path)):
        raise ValueError(f"{embed_path} and {decoder_path} are not in one folder.")
    keep = {"input_ids", "inputs_embeds", ""}

    def rename(name: str) -> str:
        return name if name in keep else "embed_tokens/" + name

    graph = embed.graph
    if any(a.HasField("g") or a.graphs for n in graph.node for a in n.attribute):
        raise ValueError(f"{embed_path}: a node with a subgraph: the embedding file is a plain graph.")
    for node in graph.node:
        node.name = rename(node.name) if node.name else node.name
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
    for tensor in graph.initializer:
        tensor.name = rename(tensor.name)
    for value in graph.value_info:
        value.name = rename(value.name)
    target = decoder.graph
    inputs = [i for i in target.input if i.name != "inputs_embeds"]
    if len(inputs) == len(target.input):
        raise ValueError(f"{decoder_path} reads no inputs_embeds.")
    del target.input[:]
    target.input.extend([graph.input[0], *inputs])
    nodes = list(graph.node) + list(target.node)
    del target.node[:]
    target.node.extend(nodes)
    target.initializer.extend(graph.initializer)
    target.value_info.extend(graph.value_info)
    versions = {o.domain: o.version for o in decoder.opset_import}
    for o in embed.opset_import:
        if versions.setdefault(o.domain, o.version) != o.version:
            raise ValueError(f"{embed_path} and {decoder_path} import {o.domain or 'ai.onnx'} at two versions.")
    del decoder.opset_import[:]
    decoder.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in versions.items())
    known = {(f.domain, f.name) for f in decoder.functions}
    decoder.functions.extend(f for f in embed.functions if (f.domain, f.name) not in known)
    options = options or onnxruntime.SessionOptions()
    # the weights' files are named relative to the folder of the two files
    options.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                     os.path.dirname(os.path.abspath(decoder_path)))
    options.enable_mem_pattern = False  # as fx2onnx.runtime.generate's sessions: a shape per step
    return onnxruntime.InferenceSession(decoder.SerializeToString(), options,
                                        providers=list(providers or ["CPUExecutionProvider"]))


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
        self.vision: Any = None  # the four files of Florence-2's split: its vision and embedding sessions
        self.embed: Any = None
        if VISION_PIECE in self.pieces:
            import onnxruntime

            options, providers = session_options(threads), list(providers or ["CPUExecutionProvider"])
            self.vision, self.embed = (onnxruntime.InferenceSession(
                os.path.join(self.folder, self.pieces[name]["file"]), options, providers=providers)
                for name in (VISION_PIECE, EMBED_PIECE))

    def _decoder_model(self, path: str, providers: list[str], options: Any) -> Any:
        """The merged decoder, after the folder's ``embed_tokens.onnx`` where it reads ``inputs_embeds``."""
        if EMBED_PIECE not in self.pieces:
            return path
        return decoder_on_token_ids(os.path.join(self.folder, self.pieces[EMBED_PIECE]["file"]), path, providers,
                                    options)

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
        return "input_ids" in self.encoder_inputs or self.vision is not None

    def encode(self, features: dict[str, np.ndarray]) -> tuple[dict[str, Any], float]:
        """The encoder's outputs as the decoder takes them; with Florence-2's four files, as transformers.js runs
        them: the image features over the prompt's placeholders in its embeddings, then the encoder."""
        if self.vision is None:
            return super().encode(features)
        missing = [n for n in PROMPT_INPUTS if n not in features]
        if missing:
            raise ValueError(f"The encoder reads {list(PROMPT_INPUTS)}: the inputs have no {missing}.")
        begin = time.perf_counter()
        ids = np.asarray(features["input_ids"], dtype=np.int64)
        mask = np.asarray(features["attention_mask"], dtype=np.int64)
        pixel_type = np.float16 if self.vision.get_inputs()[0].type == "tensor(float16)" else np.float32
        (image,) = self.vision.run(["image_features"],
                                   {"pixel_values": np.asarray(features["pixel_values"], dtype=pixel_type)})
        (embeds,) = self.embed.run(["inputs_embeds"], {"input_ids": ids})
        placeholders = ids == int(self.config.get("image_token_id", -1))
        if placeholders.sum() != image.shape[0] * image.shape[1]:
            raise ValueError(f"The prompt holds {int(placeholders.sum())} image placeholders, the images give "
                             f"{image.shape[0] * image.shape[1]} features: make it with the folder's processor.")
        embeds[placeholders] = image.reshape(-1, image.shape[-1]).astype(embeds.dtype)
        (hidden,) = self.encoder.run(["last_hidden_state"], {"inputs_embeds": embeds, "attention_mask": mask})
        constants = encoder_constants({"last_hidden_state": hidden}, {"attention_mask": mask})
        return {n: constants[n] for n in self.constant_names}, time.perf_counter() - begin

    def prompt_features(self, images: Any, prompt: str) -> dict[str, np.ndarray]:
        """The encoder's inputs of an encoder reading a prompt: the folder's processor on the images and
        ``prompt`` (the same for every image; Florence-2's task, ``"<CAPTION>"``, becomes its question)."""

        loaded = load_images(images)
        if self._processor is None:
            self._processor = load_processor(self.folder)
        out = self._processor(text=[prompt] * len(loaded), images=loaded, return_tensors="np")
        names = PROMPT_INPUTS if self.vision is not None else self.encoder_inputs
        return {k: np.asarray(out[k]) for k in names if k in out}

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
