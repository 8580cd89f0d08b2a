"""The two pieces of a mask-generation folder (SAM), cut as optimum and transformers.js cut it:

* ``onnx/vision_encoder.onnx``: ``pixel_values (batch, 3, H, W)`` -> ``image_embeddings`` and
  ``image_positional_embeddings`` (the image encoder, run once per image);
* ``onnx/prompt_encoder_mask_decoder.onnx``: ``image_embeddings``, ``image_positional_embeddings``,
  ``input_points (batch, point_batch, points, 2)``, ``input_labels (batch, point_batch, points)`` -> ``iou_scores``
  and ``pred_masks`` (the prompt encoder and the mask decoder, three masks per prompt, run on every batch of points).

transformers' mask-generation pipeline runs the second piece on a grid of points over the image (the runtime:
:mod:`fx2onnx.runtime.mask_generation`); a prompt of several points per mask (labels 1 for a point on the object, 0
off it, -10 for padding) takes the same graph. Both wrappers keep the checkpoint's parameter names (the weights
streamed by :func:`fx2onnx.weights.to_onnx_from_checkpoint`), each checked against itself around the eager float32
model on two input sets.

.. code-block:: python

    from fx2onnx.deploy import export_folder

    print(export_folder("sam_folder", "sam_onnx"))  # task mask-generation, two pieces
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..weights.empty import parameters_on_meta
from .encoder import _processor
from .onnx_pieces import export_onnx_pieces
from .speech import Piece

#: the model types whose pieces this module cuts (SAM's prompt encoder and mask decoder)
MASK_GENERATION_MODEL_TYPES = ("sam",)
#: the files of the two pieces, where transformers.js and optimum look for them
VISION_ENCODER_FILE, MASK_DECODER_FILE = "onnx/vision_encoder.onnx", "onnx/prompt_encoder_mask_decoder.onnx"


class SamVisionEncoderPiece(torch.nn.Module):
    """The image encoder: ``pixel_values`` -> the image embeddings and their positional embeddings (one per image)."""

    base_model_prefix = "model"

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embeddings = self.model.vision_encoder(pixel_values).last_hidden_state
        positions = self.model.get_image_wide_positional_embeddings()
        return embeddings, positions.expand(pixel_values.shape[0], -1, -1, -1)


class SamMaskDecoderPiece(torch.nn.Module):
    """The prompt encoder and the mask decoder: the points of each prompt -> three masks and their scores."""

    base_model_prefix = "model"

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def forward(self, image_embeddings: torch.Tensor, image_positional_embeddings: torch.Tensor,
                input_points: torch.Tensor, input_labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sparse, dense = self.model.prompt_encoder(input_points=input_points, input_labels=input_labels,
                                                  input_boxes=None, input_masks=None)
        masks, scores = self.model.mask_decoder(
            image_embeddings=image_embeddings, image_positional_embeddings=image_positional_embeddings,
            sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense, multimask_output=True)[:2]
        return scores, masks


def _prompts(config: Any, image_embeddings: torch.Tensor, positions: torch.Tensor, point_batch: int, points: int,
             rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """The inputs of the mask decoder: points in the resized image, labels 1, 0 and one padding point (-10)."""
    size = float(config.vision_config.image_size)
    batch = image_embeddings.shape[0]
    coords = torch.from_numpy(rng.uniform(0, size, (batch, point_batch, points, 2)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 2, (batch, point_batch, points))).to(torch.int64)
    if points > 1:
        labels[..., -1] = -10
    return dict(image_embeddings=image_embeddings, image_positional_embeddings=positions, input_points=coords,
                input_labels=labels)


def sam_pieces(model: Any, folder: str) -> list[Piece]:
    """The two pieces of a SAM folder (``model`` on the meta device for the export, on the CPU for the check) with
    two input sets each: one image and 6 prompts of one point, then two images and 4 prompts of 3 points."""
    config = model.config
    processor = _processor(folder, "image")
    rng = np.random.default_rng(0)
    images = [[rng.integers(0, 256, (30 + 8 * i, 44 - 6 * i, 3), dtype=np.uint8) for i in range(n)] for n in (1, 2)]
    pixels = [processor(images=batch, return_tensors="pt")["pixel_values"] for batch in images]
    vision = Piece("vision_encoder", VISION_ENCODER_FILE, SamVisionEncoderPiece(model), {"pixel_values": pixels[0]},
                   {"pixel_values": pixels[1]}, {"pixel_values": {0: "batch"}}, ["pixel_values"],
                   ["image_embeddings", "image_positional_embeddings"])
    side, channels = config.prompt_encoder_config.image_embedding_size, config.vision_config.output_channels
    g = torch.Generator().manual_seed(0)
    sets = []
    for batch, point_batch, points in ((1, 6, 1), (2, 4, 3)):
        embeddings = torch.randn(batch, channels, side, side, generator=g)
        positions = torch.randn(1, channels, side, side, generator=g).expand(batch, -1, -1, -1).contiguous()
        sets.append(_prompts(config, embeddings, positions, point_batch, points, rng))
    embedding_dims = {0: "batch"}
    decoder = Piece("prompt_encoder_mask_decoder", MASK_DECODER_FILE, SamMaskDecoderPiece(model), sets[0], sets[1],
                    {"image_embeddings": embedding_dims, "image_positional_embeddings": embedding_dims,
                     "input_points": {0: "batch", 1: "point_batch", 2: "points"},
                     "input_labels": {0: "batch", 1: "point_batch", 2: "points"}},
                    list(sets[0]), ["iou_scores", "pred_masks"])
    return [vision, decoder]


def export_mask_generation_pieces(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                                  options: dict[str, Any]) -> tuple[list[Piece], Any]:
    """Exports the two pieces of a SAM folder into ``out_dir/onnx/`` (the weights streamed from the checkpoint, the
    model built with its parameters on the meta device); returns them and the function rebuilding them around the
    eager model for the check."""
    import transformers  # deferred: heavy

    if config.model_type not in MASK_GENERATION_MODEL_TYPES:
        raise ValueError(f"{config.architectures[0]} is a mask-generation model of type {config.model_type!r}: "
                         f"exporting such a folder supports {list(MASK_GENERATION_MODEL_TYPES)} today.")
    with parameters_on_meta():
        model = getattr(transformers, config.architectures[0])._from_config(config, dtype=dtype).eval()
    pieces = sam_pieces(model, folder)
    export_onnx_pieces(folder, out_dir, pieces, config, dtype, options)
    return pieces, lambda eager, _config: sam_pieces(eager, folder)
