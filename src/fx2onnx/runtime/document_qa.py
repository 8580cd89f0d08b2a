"""A question about a page and its words to the answers transformers' document-question-answering pipeline returns,
with a LayoutLM or LayoutLMv3 folder written by ``export`` (``onnx/model.onnx``: :mod:`fx2onnx.deploy.document_qa`).

As the pipeline: the question and the page's words (with their boxes, 0-1000, as an OCR gives them) through the
folder's tokenizer in spans of its length (``doc_stride`` overlapping tokens), the model on each span, then
transformers' own ``select_starts_ends``: the ``top_k`` answers ``{"score", "answer", "start", "end"}`` (the
first and last word). The words and boxes are given (``word_boxes``, ``--word-boxes FILE.json``): the OCR the
pipeline runs on an image (Tesseract) is not run here.

.. code-block:: python

    import fx2onnx

    words = [("paris", [10, 10, 100, 40]), ("is", [110, 10, 150, 40]), ("nice", [160, 10, 220, 40])]
    print(fx2onnx.pipeline("layoutlm_onnx")(question="what is nice?", word_boxes=words))
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

import numpy as np

from .pipelines import Pipeline, open_task_folder


def read_word_boxes(value: Any) -> list[tuple[str, list[int]]]:
    """The words of a page and their boxes from a list of ``(word, [x0, y0, x1, y1])`` or the path of a JSON file
    holding one; one line when it is not such a list."""
    if isinstance(value, (str, os.PathLike)):
        if not os.path.isfile(value):
            raise FileNotFoundError(f"Word boxes file {os.fspath(value)!r} does not exist.")
        try:
            with open(value, encoding="utf-8") as f:
                value = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{os.fspath(value)!r} is not a JSON file ({type(e).__name__}): give a list of "
                             "[word, [x0, y0, x1, y1]].") from None
    try:
        pairs = [(str(word), [int(v) for v in box]) for word, box in value]
    except (TypeError, ValueError):
        pairs = []
    if not pairs or any(len(box) != 4 for _, box in pairs):
        raise ValueError("the word boxes are a non-empty list of [word, [x0, y0, x1, y1]] (boxes from 0 to 1000).")
    return pairs


def token_boxes(tokenizer: Any, encoding: Any, span: int, boxes: list[Any]) -> list[list[int]]:
    """The box of each token of one span of ``encoding``, as transformers' pipeline gives them: its word's box on the
    page's side, ``[1000] * 4`` for a separator, ``[0] * 4`` otherwise."""
    result = []
    for token, sequence, word in zip(encoding["input_ids"][span], encoding.sequence_ids(span), encoding.word_ids(span)):
        if sequence == 1:
            result.append(list(boxes[word]))
        elif token == tokenizer.sep_token_id:
            result.append([1000] * 4)
        else:
            result.append([0] * 4)
    return result


def encode_page(tokenizer: Any, model_type: str, questions: Sequence[str], words: list[str], boxes: list[Any],
                **options: Any) -> tuple[Any, list[list[list[int]]]]:
    """The tokenizer's encoding of questions about a page, as transformers' pipeline makes it, and the box of each token
    of each span: LayoutLM's tokenizer reads the words (:func:`token_boxes`), LayoutLMv3's the words and their boxes."""
    if model_type == "layoutlm":
        encoding = tokenizer([q.split() for q in questions], [words] * len(questions), is_split_into_words=True,
                             return_token_type_ids=True, **options)
        return encoding, [token_boxes(tokenizer, encoding, i, boxes) for i in range(len(encoding["input_ids"]))]
    encoding = tokenizer(list(questions), [words] * len(questions), boxes=[boxes] * len(questions),
                         return_token_type_ids=True, **options)
    return encoding, [[list(box) for box in span] for span in encoding["bbox"]]


class DocumentQuestionAnsweringPipeline(Pipeline):
    """A LayoutLM or LayoutLMv3 folder, called as transformers' document-question-answering pipeline.

    :param folder: a folder written by ``python -m fx2onnx export`` for task ``document-question-answering``
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None,  # noqa: D107
                 threads: int | None = None):
        open_task_folder(self, folder, "document-question-answering", providers, threads)

    def __call__(self, image: Any = None, question: str | None = None, word_boxes: Any = None, top_k: int | None = 1,
                 doc_stride: int | None = None, max_seq_len: int | None = None, max_answer_len: int = 15,
                 handle_impossible_answer: bool = False, **unused: Any) -> list[dict[str, Any]]:
        """What transformers' ``pipeline("document-question-answering", model=folder)(image, question,
        word_boxes=...)`` returns: the ``top_k`` answers, best first."""
        given = {k: v for k, v in unused.items() if v is not None}
        if given:
            raise ValueError(f"a document-question-answering folder takes no {sorted(given)}.")
        if isinstance(image, dict):  # {"image", "question", "word_boxes"}, as the pipeline takes it
            image, question, word_boxes = image.get("image"), image.get("question"), image.get("word_boxes")
        if not isinstance(question, str) or not question.strip():
            raise ValueError("give a question (a non-empty text) about the document.")
        if word_boxes is None:
            raise ValueError("give the words of the page and their boxes (word_boxes, --word-boxes FILE.json): the "
                             "OCR transformers' pipeline runs on an image (Tesseract) is not run here.")
        pairs = read_word_boxes(word_boxes)
        return self._answers(question, pairs, 1 if top_k is None else top_k, doc_stride, max_seq_len, max_answer_len,
                             handle_impossible_answer)

    def _answers(self, question: str, pairs: list[tuple[str, list[int]]], top_k: int, doc_stride: int | None,
                 max_seq_len: int | None, max_answer_len: int, impossible: bool) -> list[dict[str, Any]]:
        """The pipeline's preprocess (spans), forward and extractive post-processing on the folder's model."""
        from transformers.pipelines.document_question_answering import select_starts_ends  # deferred: heavy

        tokenizer = self.processor
        max_seq_len = tokenizer.model_max_length if max_seq_len is None else max_seq_len
        doc_stride = min(max_seq_len // 2, 256) if doc_stride is None else doc_stride
        words, boxes = [w for w, _ in pairs], [b for _, b in pairs]
        encoding, spans_boxes = encode_page(
            tokenizer, str(self.config.get("model_type")), [question], words, boxes, padding="do_not_pad",
            max_length=max_seq_len, stride=doc_stride, truncation="only_second", return_overflowing_tokens=True)
        min_null_score, answers = 1000000.0, []
        for span in range(len(encoding["input_ids"])):
            ids = np.array(encoding["input_ids"][span])
            p_mask = np.array([s != 1 for s in encoding.sequence_ids(span)])
            if tokenizer.cls_token_id is not None:
                p_mask[ids == tokenizer.cls_token_id] = False
            feeds = {k: np.array(encoding[k][span:span + 1]) for k in ("input_ids", "attention_mask", "token_type_ids")}
            feeds["bbox"] = np.array([spans_boxes[span]], dtype=np.int64)
            start, end = self._run(feeds, all_outputs=True)
            starts, ends, scores, min_null_score = select_starts_ends(
                start=start, end=end, p_mask=p_mask, attention_mask=feeds["attention_mask"],
                min_null_score=min_null_score, top_k=top_k, handle_impossible_answer=impossible,
                max_answer_len=max_answer_len)
            word_ids = encoding.word_ids(span)
            for first, last, score in zip(starts, ends, scores):
                if word_ids[first] is not None and word_ids[last] is not None:
                    answer = " ".join(words[word_ids[first]:word_ids[last] + 1])
                    answers.append({"score": float(score), "answer": answer, "start": word_ids[first],
                                    "end": word_ids[last]})
        if impossible:
            answers.append({"score": min_null_score, "answer": "", "start": 0, "end": 0})
        return sorted(answers, key=lambda x: x.get("score", 0), reverse=True)[:top_k]
