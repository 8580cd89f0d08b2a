"""The pieces of a Mistral 3 or LightOnOCR folder (a Pixtral vision tower): images of one size.

Mistral 3's processor pads the images of a prompt to the largest of them and gives their sizes
(``image_sizes``); the vision tower crops every image back to its size, runs its patches and
merges them by blocks of ``spatial_merge_size x spatial_merge_size``, each step sized by the
values of ``image_sizes`` (torch.export: ``Could not guard on data-dependent expression``). The
data-dependent part, the crop, is done **in the loop**
(:class:`fx2onnx.runtime.vision.VisionGenerator`): it gives the vision piece one image of its own
size at a time, and the piece reads the size from the shape (symbolic), so nothing reads a value.
transformers.js' Pixtral image processor gives no ``image_sizes``: it resizes the images of a call
to one size and stacks them, which the piece takes as a batch:

* ``vision.onnx`` (``onnx/vision_encoder.onnx`` in transformers.js' split):
  ``pixel_values (images, 3, height, width)`` -> ``image_features (rows, hidden)``, the vision
  tower's selected layer and the projector (its patch merger), every image's rows one after the
  other (:class:`ImagesVisionPiece`; folders written before took one image, :class:`OneImageVisionPiece`);
* ``decoder.onnx``: the decoder of :mod:`fx2onnx.deploy.vision` (the features of every image,
  one after the other, written over the ``[IMG]`` placeholders).
"""

from __future__ import annotations

from typing import Any

import torch

from .speech import Piece
from .vision import VisionPiece, decoder_piece

#: the model types exported by :func:`pixtral_pieces`
PIXTRAL_MODEL_TYPES = ("mistral3", "lighton_ocr")


class OneImageVisionPiece(VisionPiece):
    """The Pixtral vision tower and its projector on one image: ``pixel_values (1, 3, H, W) -> image_features``
    (Mistral 3's ``vision_tower`` and ``multi_modal_projector`` on its selected layers; LightOnOCR's
    ``vision_encoder`` and ``vision_projection`` on the last one)."""

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        base = self.model
        tower = getattr(base, "vision_tower", None) or base.vision_encoder
        projector = getattr(base, "multi_modal_projector", None) or base.vision_projection
        sizes = [tuple(pixel_values.shape[-2:])]  # the image's own size, symbolic
        out = tower(pixel_values.to(tower.dtype), image_sizes=sizes, output_hidden_states=True, return_dict=True)
        layer = getattr(base.config, "vision_feature_layer", None)
        if layer is None:
            selected = out.last_hidden_state
        else:
            layers = [layer] if isinstance(layer, int) else layer
            selected = torch.cat([out.hidden_states[i] for i in layers], dim=-1)
        return projector(selected.squeeze(0), sizes)


class ImagesVisionPiece(OneImageVisionPiece):
    """The Pixtral vision tower and its projector on images of one size, ``pixel_values (images, 3, H, W) ->
    image_features``, the features of every image one after the other: the images go through the tower's layers as a
    batch (each attends to its own patches, as the tower's block mask has them), their blocks of patches merged
    image by image."""

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        base = self.model
        tower = getattr(base, "vision_tower", None) or base.vision_encoder
        projector = getattr(base, "multi_modal_projector", None) or base.vision_projection
        merge = base.config.spatial_merge_size
        embeds = tower.patch_conv(pixel_values.to(tower.patch_conv.weight.dtype))  # (images, hidden, rows, cols)
        images, hidden, rows, cols = embeds.shape
        states = [tower.ln_pre(embeds.flatten(2).transpose(1, 2))]  # (images, rows * cols, hidden)
        row, col = torch.arange(rows, device=embeds.device), torch.arange(cols, device=embeds.device)
        positions = torch.stack(torch.meshgrid(row, col, indexing="ij"), -1).reshape(rows * cols, 2)
        rotary = tower.patch_positional_embedding(states[0], positions)
        for layer in tower.transformer.layers:
            states.append(layer(states[-1], None, position_embeddings=rotary))
        layer = getattr(base.config, "vision_feature_layer", None)
        layers = [-1] if layer is None else [layer] if isinstance(layer, int) else layer
        selected = projector.norm(torch.cat([states[i] for i in layers], dim=-1))
        grid = selected.transpose(1, 2).reshape(images, selected.shape[-1], rows, cols)
        blocks = torch.nn.functional.unfold(grid, kernel_size=merge, stride=merge)  # (images, hidden * merge**2, n)
        merged = projector.patch_merger.merging_layer(blocks.transpose(1, 2).reshape(-1, blocks.shape[1]))
        return projector.linear_2(projector.act(projector.linear_1(merged)))


def pixtral_pieces(model: Any, config: Any, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[Piece]:
    """The vision and decoder pieces of a Mistral 3 or LightOnOCR model: the vision piece (:class:`ImagesVisionPiece`)
    exported on two images of one size and checked on three of another (images, height and width dynamic, multiples
    of ``patch_size * spatial_merge_size``)."""
    g = torch.Generator().manual_seed(seed)
    side = config.vision_config.patch_size * config.spatial_merge_size

    def pixels(images, height, width):
        return {"pixel_values": torch.randn(images, 3, height * side, width * side, generator=g).to(dtype)}

    decoder = decoder_piece(model, config, dtype, g, per_image=4)
    encoder = Piece("vision", "vision.onnx", ImagesVisionPiece(model), pixels(2, 3, 4), pixels(3, 5, 2),
                    {"pixel_values": {0: "images", 2: "height", 3: "width"}}, ["pixel_values"], ["image_features"])
    return [encoder, decoder]
