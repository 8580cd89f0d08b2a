"""The model of a DETR panoptic segmenter's folder (``DetrForSegmentation``; RF-DETR's instance segmenter names its
outputs as DETR): ``onnx/model.onnx``, ``pixel_values`` and ``pixel_mask`` -> ``logits``, ``pred_boxes`` and
``pred_masks`` (a class and a mask per query), the outputs DETR's image processor post-processes into panoptic,
instance or semantic masks (transformers' image-segmentation
pipeline; :class:`fx2onnx.runtime.pipelines.Pipeline` runs it with the outputs ``fx2onnx.json`` names).

The universal segmenters of the encoder family (Mask2Former, MaskFormer) return ``class_queries_logits`` and
``masks_queries_logits``; DETR's outputs have DETR's names, hence this family (``split`` ``detr``). The example
inputs are the folder's image processor's on images of other sizes (the height and width dynamic: DETR keeps each
image's aspect ratio), checked against the same wrapper around the eager float32 model.

.. code-block:: python

    from fx2onnx.deploy import export_folder

    print(export_folder("detr_panoptic_folder", "detr_onnx"))  # universal-segmentation, split detr
"""

from __future__ import annotations

from typing import Any

import torch

from ..runtime.pipelines import MODEL_FILE
from ..weights.empty import parameters_on_meta
from .encoder import DYNAMIC_DIMS, example_inputs
from .onnx_pieces import export_onnx_pieces
from .speech import Piece

#: the outputs DETR's post-processing reads
OUTPUTS = ("logits", "pred_boxes", "pred_masks")
#: the inputs its image processor gives
INPUTS = ("pixel_values", "pixel_mask")


class DetrSegmentationPiece(torch.nn.Module):
    """DETR with its mask head: a class, a box and a mask per query."""

    base_model_prefix = "model"

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor, pixel_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(pixel_values=pixel_values, pixel_mask=pixel_mask)
        return out.logits, out.pred_boxes, out.pred_masks


def is_detr_segmenter(model_type: str | None, task: str) -> bool:
    """A folder of DETR's panoptic segmenter or of a segmenter naming its outputs as DETR does (RF-DETR's)."""
    return task == "universal-segmentation" and model_type in ("detr", "conditional_detr", "rf_detr")


def detr_piece(model: Any, folder: str) -> Piece:
    """The piece of a DETR segmenter's folder with two input sets of its image processor (2 then 3 images)."""
    first, second = example_inputs(folder, "image", set(INPUTS), any_size=True)
    dims = DYNAMIC_DIMS["sized image"]
    shapes = {n: {d % first[n].dim(): name for d, name in dims.items() if -first[n].dim() <= d < first[n].dim()}
              for n in INPUTS}
    return Piece("model", MODEL_FILE, DetrSegmentationPiece(model), {n: first[n] for n in INPUTS},
                 {n: second[n] for n in INPUTS}, shapes, list(INPUTS), list(OUTPUTS))


def export_detr_segmentation_pieces(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                                    options: dict[str, Any]) -> tuple[list[Piece], Any]:
    """Exports the model of a DETR segmenter's folder into ``out_dir/onnx/model.onnx`` (the weights streamed from
    the checkpoint); returns the piece and the function rebuilding it around the eager model for the check."""
    import transformers  # deferred: heavy

    with parameters_on_meta():
        model = getattr(transformers, config.architectures[0])._from_config(config, dtype=dtype).eval()
    piece = detr_piece(model, folder)
    export_onnx_pieces(folder, out_dir, [piece], config, dtype, options, task="universal-segmentation")
    return [piece], lambda eager, _config: [detr_piece(eager, folder)]
