"""A table and questions to the answers transformers' table-question-answering pipeline returns, with a TAPAS
folder written by ``export`` (``onnx/model.onnx``: :mod:`fx2onnx.deploy.table_qa`).

As the pipeline: each question with the table through the folder's tokenizer (rows dropped to fit its length), the
model, then the tokenizer's ``convert_logits_to_predictions`` (the cells whose tokens score above one half, the
aggregation of the best score): ``{"answer", "coordinates", "cells"}`` and ``"aggregator"`` when the model
aggregates. A table is a pandas data frame of strings, a dict of columns, or a CSV file.

.. code-block:: python

    import fx2onnx

    answer = fx2onnx.pipeline("tapas_onnx")(table={"city": ["paris", "rome"], "people": ["2", "3"]},
                                             query="how many people in rome?")
    print(answer["answer"])
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from .pipelines import Pipeline, open_task_folder


def read_table(table: Any) -> Any:
    """A pandas data frame of strings from a data frame, a dict of columns or the path of a CSV file; one line when
    it is none of them or holds no cell."""
    import pandas  # deferred: optional for the other tasks

    if isinstance(table, (str, os.PathLike)):
        if not os.path.isfile(table):
            raise FileNotFoundError(f"Table file {os.fspath(table)!r} does not exist.")
        try:
            table = pandas.read_csv(table, dtype=str, keep_default_na=False)
        except (ValueError, UnicodeDecodeError, pandas.errors.ParserError) as e:
            raise ValueError(f"{os.fspath(table)!r} does not read as a CSV table ({type(e).__name__}): give a CSV "
                             "file whose first line names the columns.") from None
    elif isinstance(table, dict):
        table = pandas.DataFrame(table)
    elif not isinstance(table, pandas.DataFrame):
        raise ValueError(f"a table is a pandas data frame, a dict of columns or a CSV file, not {type(table).__name__}.")
    if table.empty:
        raise ValueError("the table is empty: give at least one row.")
    return table.astype(str)


class TableQuestionAnsweringPipeline(Pipeline):
    """A TAPAS folder, called as transformers' table-question-answering pipeline.

    :param folder: a folder written by ``python -m fx2onnx export`` for task ``table-question-answering``
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None,  # noqa: D107
                 threads: int | None = None):
        open_task_folder(self, folder, "table-question-answering", providers, threads)

    def __call__(self, inputs: Any = None, table: Any = None, query: str | Sequence[str] | None = None,
                 sequential: bool = False, **unused: Any) -> Any:
        """What transformers' ``pipeline("table-question-answering", model=folder)(table=..., query=...)`` returns:
        one answer for one question, a list for several (``inputs``: a dict holding ``table`` and ``query``)."""
        given = {k: v for k, v in unused.items() if v is not None}
        if given:
            raise ValueError(f"a table-question-answering folder takes no {sorted(given)}.")
        if sequential:
            raise ValueError("sequential=True (the questions of a conversation, each answer marking the table for "
                             "the next) is not run by this folder's pipeline: ask the questions one at a time.")
        if isinstance(inputs, dict):
            table, query = inputs.get("table"), inputs.get("query")
        elif inputs is not None:  # the questions given first, the table by name
            query = inputs if query is None else query
        if table is None:
            raise ValueError("a table-question-answering folder needs a table (--table FILE.csv) beside the "
                             "questions.")
        questions = [query] if isinstance(query, str) else list(query or [])
        if not questions or not all(isinstance(q, str) and q for q in questions):
            raise ValueError("give at least one question (a non-empty text) about the table.")
        table = read_table(table)
        answers = [self._answer(table, question) for question in questions]
        return answers if len(answers) > 1 else answers[0]

    def _answer(self, table: Any, question: str) -> dict[str, Any]:
        """The answer to one question: the cells the model selects, with the aggregation it predicts."""
        import torch  # deferred: the tokenizer's post-processing reads torch tensors

        tokenizer = self.processor
        encoded = tokenizer(table, question, return_tensors="pt", truncation="drop_rows_to_fit", padding=True)
        outputs = self._run({k: v.numpy() for k, v in encoded.items()}, all_outputs=True)
        logits = [torch.from_numpy(np.asarray(o)) for o in outputs]
        aggregate = len(logits) > 1
        coordinates_batch, *aggregations = tokenizer.convert_logits_to_predictions(encoded, *logits)
        coordinates = coordinates_batch[0]
        cells = [table.iat[coordinate] for coordinate in coordinates]
        answer: dict[str, Any] = {"answer": ", ".join(cells), "coordinates": coordinates, "cells": cells}
        if aggregate:
            labels = {int(k): v for k, v in (self.config.get("aggregation_labels") or {}).items()}
            predicted = int(aggregations[0][0])
            answer["aggregator"] = labels[predicted]
            if predicted != self.config.get("no_aggregation_label_index"):
                answer["answer"] = f"{labels[predicted]} > {answer['answer']}"
        return answer
