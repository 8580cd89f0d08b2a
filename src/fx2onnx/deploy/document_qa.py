"""The model of a document-question-answering folder (LayoutLM): ``onnx/model.onnx``, ``input_ids``, ``bbox``
(each token's box on the page, 0-1000), ``attention_mask`` and ``token_type_ids`` -> ``start_logits`` and
``end_logits``, the outputs transformers' pipeline reads to pick the answer's words.

The example inputs come from the folder's own tokenizer: a question and the words of a page split into words as the
pipeline splits them, each token given its word's box (the separator ``[1000] * 4``, the question ``[0] * 4``); the
batch and the length are dynamic. Checked against the same wrapper around the eager float32 model. LayoutLMv3 is
exported the same way (its tokenizer gives each token's box), without the page's pixels: transformers' pipeline given
the words runs it so. LayoutLMv2, whose visual backbone is detectron2's, is not exported.

.. code-block:: python

    from fx2onnx.deploy import export_folder

    print(export_folder("layoutlm_folder", "layoutlm_onnx"))  # task document-question-answering
"""

from __future__ import annotations

from typing import Any

import torch

from ..runtime.document_qa import encode_page
from ..runtime.pipelines import MODEL_FILE
from ..weights.empty import parameters_on_meta
from .encoder import _processor
from .onnx_pieces import export_onnx_pieces
from .speech import Piece

#: the model types exported (LayoutLM reads the words and their boxes; LayoutLMv3 too, the page's pixels left out
#: as the pipeline leaves them out given the words; v2 reads the pixels through detectron2)
DOCUMENT_QA_MODEL_TYPES = ("layoutlm", "layoutlmv3")
#: the inputs of the model, in the wrapper's order
INPUTS = ("input_ids", "bbox", "attention_mask", "token_type_ids")
#: the words and boxes of the example page and the questions of the two input sets (one, then two)
PAGE = (("paris", (10, 10, 100, 40)), ("is", (110, 10, 150, 40)), ("the", (160, 10, 220, 40)),
        ("capital", (230, 10, 400, 40)), ("of", (10, 60, 50, 90)), ("france", (60, 60, 200, 90)))
QUESTIONS = (("what is the capital of france?",), ("what is the capital?", "is paris a city by the sea?"))


class DocumentQuestionAnsweringPiece(torch.nn.Module):
    """LayoutLM (or LayoutLMv3) returning the start and end logits of the answer."""

    base_model_prefix = "model"

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, bbox: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=input_ids, bbox=bbox, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.start_logits, out.end_logits


def document_piece(model: Any, folder: str) -> Piece:
    """The piece of a LayoutLM(v3) folder with two input sets of its tokenizer (1 then 2 questions on one page)."""
    tokenizer = _processor(folder, "text")
    words, boxes = [w for w, _ in PAGE], [b for _, b in PAGE]
    sets = []
    for questions in QUESTIONS:
        encoding, spans_boxes = encode_page(tokenizer, model.config.model_type, questions, words, boxes, padding=True)
        tensors = {k: torch.tensor(encoding[k]) for k in ("input_ids", "attention_mask", "token_type_ids")}
        tensors["bbox"] = torch.tensor(spans_boxes)
        sets.append({k: tensors[k] for k in INPUTS})
    return Piece("model", MODEL_FILE, DocumentQuestionAnsweringPiece(model), sets[0], sets[1],
                 {n: {0: "batch", 1: "sequence"} for n in INPUTS}, list(INPUTS), ["start_logits", "end_logits"])


def export_document_qa_pieces(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                              options: dict[str, Any]) -> tuple[list[Piece], Any]:
    """Exports the model of a LayoutLM folder into ``out_dir/onnx/model.onnx`` (the weights streamed from the
    checkpoint); returns the piece and the function rebuilding it around the eager model for the check."""
    import transformers  # deferred: heavy

    if config.model_type not in DOCUMENT_QA_MODEL_TYPES:
        raise ValueError(f"{config.architectures[0]} is a document-question-answering model of type "
                         f"{config.model_type!r}: exporting such a folder supports {list(DOCUMENT_QA_MODEL_TYPES)} "
                         "(the words and their boxes, no pixels) today.")
    with parameters_on_meta():
        model = getattr(transformers, config.architectures[0])._from_config(config, dtype=dtype).eval()
    piece = document_piece(model, folder)
    export_onnx_pieces(folder, out_dir, [piece], config, dtype, options, task="document-question-answering")
    return [piece], lambda eager, _config: [document_piece(eager, folder)]
