"""The model of a keypoint-matching folder (EfficientLoFTR): ``onnx/model.onnx``, ``pixel_values (1, 2, 3, height,
width)`` (a pair of images made by the folder's image processor) -> ``matches`` (the index of each coarse cell's match
in the other image, -1 for none), ``matching_scores`` and ``keypoints`` (in fractions of the image's size), the outputs
transformers' keypoint-matching pipeline gives its image processor's ``post_process_keypoint_matching``.

The height and the width are dynamic, multiples of 32 from 64 to 4096; one pair a run (the batch is 1: the pipeline
runs each pair alone). The example inputs come from the folder's own image processor at its size and at a smaller
one, checked against the same wrapper around the eager float32 model.

SuperGlue and LightGlue are refused: their keypoint detector (SuperPoint) keeps the pixels scoring above a threshold,
then the best of them, a number of keypoints known only at run time, which the capture cannot follow.

.. code-block:: python

    from fx2onnx.deploy import export_folder

    print(export_folder("efficientloftr_folder", "efficientloftr_onnx"))  # task keypoint-matching
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

import numpy as np
import torch

from ..frozen import FrozenInputWarning
from ..runtime.pipelines import MODEL_FILE
from ..weights.empty import parameters_on_meta
from .encoder import _processor
from .onnx_pieces import export_onnx_pieces
from .speech import Piece

#: the model types whose folders are exported
KEYPOINT_MATCHING_MODEL_TYPES = ("efficientloftr",)
#: the model types refused, and why
REFUSED_MODEL_TYPES = {
    model_type: "its keypoint detector (SuperPoint) keeps the pixels scoring above a threshold, a number of "
                "keypoints known only at run time, which the capture cannot follow"
    for model_type in ("superglue", "lightglue")}
#: the image sizes are multiples of this (the coarse features are 8 times smaller, then pooled by 4)
SIZE_MULTIPLE = 32
OUTPUTS = ["matches", "matching_scores", "keypoints"]


class KeypointMatchingPiece(torch.nn.Module):
    """EfficientLoFTR returning the matches, their scores and the keypoints of a pair of images."""

    base_model_prefix = "model"

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.model(pixel_values=pixel_values)
        return out.matches, out.matching_scores, out.keypoints


@contextlib.contextmanager
def symbolic_image_size() -> Iterator[None]:
    """EfficientLoFTR's fine height ``torch_int(coarse_height * height / coarse_height)`` kept symbolic (``int()``
    fixes it to the example's height): ``torch.sym_int``, the same integer in eager. The refinement's stride
    ``fine_height // coarse_height`` is 8 for every height the export reads (multiples of 32): its frozen-size
    warning is not shown."""
    from transformers.models.efficientloftr import modeling_efficientloftr as modeling

    plain = modeling.torch_int
    modeling.torch_int = lambda x: torch.sym_int(x) if isinstance(x, torch.SymFloat) else plain(x)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", r".*pixel_values\.shape\[3\]\) // 8\)\)\) == 8 ", FrozenInputWarning)
            yield
    finally:
        modeling.torch_int = plain


def _pairs(folder: str) -> list[dict[str, torch.Tensor]]:
    """Two input sets of the folder's image processor: a pair of random images at its size, then a pair at a
    smaller size (other height and width)."""
    processor = _processor(folder, "image")
    rng = np.random.default_rng(0)
    size = dict(getattr(processor, "size", None) or {})
    height, width = int(size.get("height", 480)), int(size.get("width", 640))
    if height % SIZE_MULTIPLE or width % SIZE_MULTIPLE:
        raise ValueError(f"the image processor of {folder!r} makes images of {height}x{width}: the export reads "
                         f"sizes that are multiples of {SIZE_MULTIPLE}; save the processor with such a size.")
    smaller = {"height": max(64, height // 2 // SIZE_MULTIPLE * SIZE_MULTIPLE),
               "width": max(64, (width // 2 + SIZE_MULTIPLE) // SIZE_MULTIPLE * SIZE_MULTIPLE)}
    sets = []
    for options in ({}, {"size": smaller}):
        images = [rng.integers(0, 256, (40 + 24 * i, 56 - 8 * i, 3), dtype=np.uint8) for i in range(2)]
        pixels = processor(images=images, return_tensors="pt", **options)["pixel_values"]
        sets.append({"pixel_values": pixels.to(torch.float32)})
    return sets


def keypoint_piece(model: Any, folder: str) -> Piece:
    """The piece of an EfficientLoFTR folder with its two input sets (two image sizes)."""
    sets = _pairs(folder)
    dims = {3: SIZE_MULTIPLE * torch.export.Dim("height_blocks", min=2, max=128),
            4: SIZE_MULTIPLE * torch.export.Dim("width_blocks", min=2, max=128)}
    return Piece("model", MODEL_FILE, KeypointMatchingPiece(model), sets[0], sets[1], {"pixel_values": dims},
                 ["pixel_values"], list(OUTPUTS))


def export_keypoint_matching_pieces(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                                    options: dict[str, Any]) -> tuple[list[Piece], Any]:
    """Exports the model of an EfficientLoFTR folder into ``out_dir/onnx/model.onnx`` (the weights streamed from the
    checkpoint); returns the piece and the function rebuilding it around the eager model for the check."""
    import transformers  # deferred: heavy

    name = config.architectures[0]
    if config.model_type in REFUSED_MODEL_TYPES:
        raise ValueError(f"{name} is a keypoint-matching model of type {config.model_type!r}, which is not exported: "
                         f"{REFUSED_MODEL_TYPES[config.model_type]} (exported: {list(KEYPOINT_MATCHING_MODEL_TYPES)}).")
    if config.model_type not in KEYPOINT_MATCHING_MODEL_TYPES:
        raise ValueError(f"{name} is a keypoint-matching model of type {config.model_type!r}: exporting such a "
                         f"folder supports {list(KEYPOINT_MATCHING_MODEL_TYPES)} today.")
    with parameters_on_meta():
        model = getattr(transformers, name)._from_config(config, dtype=dtype).eval()
    piece = keypoint_piece(model, folder)
    export_onnx_pieces(folder, out_dir, [piece], config, dtype, options, task="keypoint-matching",
                       context=symbolic_image_size)
    return [piece], lambda eager, _config: [keypoint_piece(eager, folder)]
