"""Text in, text out from a text encoder-decoder folder (T5, BART, Marian...) in the layout transformers.js and
optimum read (:mod:`fx2onnx.deploy.seq2seq`: ``onnx/encoder_model.onnx``, ``onnx/decoder_model_merged.onnx``).

:class:`Seq2SeqTextGenerator` does what transformers' ``model.generate(**tokenizer(texts), do_sample=False)`` does,
greedy: the folder's tokenizer (several texts padded), the encoder once, then the merged decoder from the start
token, its ``use_cache_branch`` false at the first step (the cross-attention keys and values computed from the
encoder's output), true after; the generation config's logits processors as
:class:`fx2onnx.runtime.speech_seq2seq.Seq2SeqSpeechGenerator` applies them (forced BOS / EOS tokens, suppressed
tokens, minimum length); a generation config asking for beam search or penalties is refused.

.. code-block:: python

    from fx2onnx.runtime.seq2seq import Seq2SeqTextGenerator

    gen = Seq2SeqTextGenerator("t5_onnx")
    result = gen.generate_text("translate English to German: a house", max_new_tokens=20)
    print(result.text, result.new_ids)
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from .folder import FOLDER_METADATA, _read_json, session_options
from .generate import CACHE_BRANCH, OnnxGenerator
from .integrity import check_folder_files
from .speech_base import SpeechResult
from .speech_seq2seq import Seq2SeqSpeechGenerator, encoder_constants  # noqa: F401 (importable from here)

#: the tasks of a text encoder-decoder folder (transformers' pipelines of the seq2seq LM classes)
TEXT2TEXT_TASKS = ("text2text-generation", "summarization", "translation")
#: the file of the merged decoder (its dtype variants add a suffix): a folder holding it is in the layout of
#: transformers.js and optimum
MERGED_DECODER = "onnx/decoder_model_merged.onnx"
#: the refusal of a folder of another task
NOT_TEXT2TEXT = ("{folder} is not a text encoder-decoder folder (task {task}): export a T5, BART or Marian checkpoint "
                 "with python -m fx2onnx export CHECKPOINT --out FOLDER.")


def is_merged_layout(metadata: dict[str, Any]) -> bool:
    """Whether a folder's ``fx2onnx.json`` names the merged decoder transformers.js and optimum load."""
    found = metadata.get("pieces", {}).get("decoder", {}).get("file", "")
    return found.startswith(MERGED_DECODER[: -len(".onnx")])  # decoder_model_merged_q4.onnx too


def open_merged(folder: str, task: str, refusal: str, providers: Sequence[str] | None,
                threads: int | None) -> tuple[dict[str, Any], Any, OnnxGenerator]:
    """``(pieces, the encoder's session, the merged decoder's generator)`` of a folder in the layout of
    transformers.js and optimum; the decoder's constant inputs are the encoder's output and mask (its
    ``use_cache_branch`` fed by the loop). A folder of another task raises ValueError with ``refusal``."""
    import onnxruntime

    metadata = _read_json(os.path.join(folder, FOLDER_METADATA))
    pieces = metadata.get("pieces", {})
    if metadata.get("task") != task or not is_merged_layout(metadata):
        raise ValueError(refusal.format(folder=repr(folder), task=repr(metadata.get("task"))))
    check_folder_files(folder, metadata)
    options = session_options(threads)
    providers = list(providers or ["CPUExecutionProvider"])
    encoder = onnxruntime.InferenceSession(os.path.join(folder, pieces["encoder"]["file"]), options,
                                           providers=providers)
    decoder = pieces["decoder"]
    constants = [n for n in decoder["inputs"] if n not in decoder.get("cache", {}) and n not in
                 ("input_ids", CACHE_BRANCH)]
    return pieces, encoder, OnnxGenerator(os.path.join(folder, decoder["file"]), providers, options,
                                          constant_inputs=constants)


class Seq2SeqTextGenerator(Seq2SeqSpeechGenerator):
    """The encoder, merged decoder, tokenizer and generation config of a text encoder-decoder folder.

    :param folder: a folder written by :func:`fx2onnx.deploy.export_folder` from a T5, BART, Marian... checkpoint
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    refusal = NOT_TEXT2TEXT

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None):
        # the task the folder was exported for (summarization, translation...): the same loop
        self.task = _read_json(os.path.join(os.fspath(folder), FOLDER_METADATA)).get("task", TEXT2TEXT_TASKS[0])
        if self.task not in TEXT2TEXT_TASKS:
            self.task = TEXT2TEXT_TASKS[0]
        super().__init__(folder, providers, threads)

    def features(self, texts: Any) -> dict[str, np.ndarray]:
        """The encoder's inputs for one text or a list (padded to the longest), or token ids (a list of ints or of
        lists of ints)."""
        if isinstance(texts, np.ndarray) or (isinstance(texts, (list, tuple)) and texts and
                                             not isinstance(texts[0], str)):
            ids = np.atleast_2d(np.asarray(texts, dtype=np.int64))
            return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise ValueError(f"{self.folder!r} has no tokenizer: give token ids.")
        texts = [texts] if isinstance(texts, str) else list(texts)
        out = tokenizer(texts, padding=True, return_tensors="np")
        return {"input_ids": np.asarray(out["input_ids"], dtype=np.int64),
                "attention_mask": np.asarray(out["attention_mask"], dtype=np.int64)}

    def generate_text(self, texts: Any, max_new_tokens: int = 32, on_text: Callable[[str], None] | None = None,
                      as_text: bool = True) -> SpeechResult:
        """Greedy generation after one text or a list (or token ids): the tokens transformers' generate returns,
        cut after the end-of-sequence token, and their text."""
        return self.generate_ids(self.features(texts), max_new_tokens, on_text=on_text, as_text=as_text)
