"""The model of a table-question-answering folder (TAPAS): ``onnx/model.onnx``, ``input_ids``, ``attention_mask``
and ``token_type_ids (batch, sequence, 7)`` (the segment, column, row and rank ids the tokenizer gives each token of
the question and the flattened table) -> ``logits`` (a score per token: is its cell in the answer) and
``logits_aggregation`` (none, sum, average, count), the outputs transformers' pipeline reads.

The example inputs come from the folder's own tokenizer on a small table and two sets of questions (a batch of 2
then 3); the batch and the length are dynamic. Checked against the same wrapper around the eager float32 model.

.. code-block:: python

    from fx2onnx.deploy import export_folder

    print(export_folder("tapas_folder", "tapas_onnx"))  # task table-question-answering
"""

from __future__ import annotations

from typing import Any

import torch

from ..runtime.pipelines import MODEL_FILE
from ..weights.empty import parameters_on_meta
from .encoder import _processor
from .onnx_pieces import export_onnx_pieces
from .speech import Piece

#: the table and the questions of the example inputs
TABLE = {"city": ["paris", "london", "rome"], "people": ["2", "9", "3"], "sea": ["no", "no", "yes"]}
QUESTIONS = (("how many people in paris?", "which city is by the sea?"),
             ("what is the sum of people?", "is london by the sea?", "which city has 3 people?"))
#: the inputs the tokenizer gives
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class TableQuestionAnsweringPiece(torch.nn.Module):
    """TAPAS returning the cell logits of each token and the aggregation logits."""

    base_model_prefix = "model"

    def __init__(self, model: Any):
        super().__init__()
        self.model = model
        self.aggregate = bool(getattr(model.config, "num_aggregation_labels", 0))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return (out.logits, out.logits_aggregation) if self.aggregate else (out.logits,)


def table_piece(model: Any, folder: str) -> Piece:
    """The piece of a TAPAS folder with two input sets of its tokenizer (2 then 3 questions on one table)."""
    import pandas  # deferred: the tokenizer reads tables as data frames

    tokenizer = _processor(folder, "text")
    table = pandas.DataFrame(TABLE)
    encoded = [tokenizer(table=table, queries=list(questions), padding=True, return_tensors="pt",
                         truncation="drop_rows_to_fit") for questions in QUESTIONS]
    sets = [{k: e[k] for k in INPUTS} for e in encoded]  # in the order of the wrapper's inputs
    module = TableQuestionAnsweringPiece(model)
    outputs = ["logits", "logits_aggregation"] if module.aggregate else ["logits"]
    return Piece("model", MODEL_FILE, module, sets[0], sets[1], {n: {0: "batch", 1: "sequence"} for n in INPUTS},
                 list(INPUTS), outputs)


def export_table_qa_pieces(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                           options: dict[str, Any]) -> tuple[list[Piece], Any]:
    """Exports the model of a TAPAS folder into ``out_dir/onnx/model.onnx`` (the weights streamed from the
    checkpoint); returns the piece and the function rebuilding it around the eager model for the check."""
    import transformers  # deferred: heavy

    if config.model_type != "tapas":
        raise ValueError(f"{config.architectures[0]} is a table-question-answering model of type "
                         f"{config.model_type!r}: exporting such a folder supports ['tapas'] today.")
    with parameters_on_meta():
        model = getattr(transformers, config.architectures[0])._from_config(config, dtype=dtype).eval()
    piece = table_piece(model, folder)
    export_onnx_pieces(folder, out_dir, [piece], config, dtype, options, task="table-question-answering")
    return [piece], lambda eager, _config: [table_piece(eager, folder)]
