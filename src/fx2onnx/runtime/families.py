"""Which runtime class runs an exported folder: the registry of the families' loops, keyed by the folder's task and
``split`` (what the export wrote in ``fx2onnx.json``, from :data:`fx2onnx.deploy.families.FAMILIES`).

The classes are named, not imported: opening a folder imports only the loop it needs.

.. code-block:: python

    from fx2onnx.runtime.families import open_generator

    generator = open_generator("whisper_onnx")  # fx2onnx.runtime.speech.SpeechGenerator
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Sequence

from ..formats import FOLDER_METADATA
from .folder import _read_json
from .pipelines import OWN_PIPELINES, PIPELINE_TASKS, SPLIT_PIPELINES

#: (task, split) -> the class running such a folder (``split`` None: the task's first family)
GENERATORS: dict[tuple[str, str | None], str] = {
    ("text-generation", None): "fx2onnx.runtime.folder.FolderGenerator",
    ("speech-seq2seq", None): "fx2onnx.runtime.speech.SpeechGenerator",
    ("speech-seq2seq", "generic"): "fx2onnx.runtime.speech_seq2seq.Seq2SeqSpeechGenerator",
    ("speech-seq2seq", "placeholders"): "fx2onnx.runtime.audio_text.AudioTextGenerator",
    ("image-text-to-text", None): "fx2onnx.runtime.vision.VisionGenerator",
    ("image-text-to-text", "generic"): "fx2onnx.runtime.image_seq2seq.Seq2SeqImageGenerator",
    ("image-text-to-text", "prefix"): "fx2onnx.runtime.image_prefix.ImagePrefixGenerator",
    # the text encoder-decoders (T5, BART, Marian...), one loop for the three pipeline tasks of their classes
    **{(task, None): "fx2onnx.runtime.seq2seq.Seq2SeqTextGenerator"
       for task in ("text2text-generation", "summarization", "translation")},
    # the single-pass encoders: transformers' pipelines of their tasks
    **{(task, None): "fx2onnx.runtime.pipelines.Pipeline" for task in PIPELINE_TASKS},
    # the tasks of several pieces, each run by its own pipeline class
    **{(task, None): path for task, (_, path) in OWN_PIPELINES.items()},
    **SPLIT_PIPELINES,
    # DETR's panoptic segmenter: the pipeline reads the outputs fx2onnx.json names (logits, pred_masks)
    ("universal-segmentation", "detr"): "fx2onnx.runtime.pipelines.Pipeline",
}


def generator_class(task: str, split: str | None = None) -> type:
    """The class running a folder of ``task`` cut as ``split``; a ValueError naming the tasks a folder may hold."""
    path = GENERATORS.get((task, split))
    if path is None:
        known = sorted({t for t, _ in GENERATORS})
        raise ValueError(f"No loop runs a folder of task {task!r}" + (f" split {split!r}" if split else "") +
                         f": a folder written by export holds one of {known}.")
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def open_generator(folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None,
                   task: str | None = None) -> Any:
    """The generator of an exported folder, from its ``fx2onnx.json`` (``task``: refuse a folder of another task)."""
    metadata = _read_json(os.path.join(os.fspath(folder), FOLDER_METADATA))
    found = metadata.get("task", "text-generation")
    if task is not None and found != task:
        raise ValueError(f"{os.fspath(folder)} is a folder of task {found!r}, not {task!r}.")
    return generator_class(found, metadata.get("split"))(folder, providers, threads)
