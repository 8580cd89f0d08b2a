"""The pieces of an image-text model whose vision tower is SigLIP 2's NaFlex (LFM2-VL): one image at a time.

A NaFlex processor cuts every image (or tile) into a sequence of patches of its own grid, pads the sequences to the
longest and gives each grid (``spatial_shapes``, rows and columns of patches) with the mask of the real patches
(``pixel_attention_mask``). The tower resizes its position embeddings to each grid and the projector lays the
features out on it, each step sized by the **values** of ``spatial_shapes`` (torch.export: ``Could not guard on
data-dependent expression``). As for Mistral 3 (:mod:`fx2onnx.deploy.pixtral`), the data-dependent part is done
**in the loop** (:class:`fx2onnx.runtime.vision.VisionGenerator`): it crops every image's patches to its grid and
gives the vision piece one image at a time as ``pixel_values (1, rows, cols, patch_values)``; the piece reads the
grid from the shape (symbolic), so nothing reads a value:

* ``vision.onnx``: ``pixel_values (1, rows, cols, patch_values)`` -> ``image_features (rows', hidden)``, the tower and
  the projector on one grid (the features ``get_image_features`` gives for that image);
* ``decoder.onnx``: the decoder of :mod:`fx2onnx.deploy.vision`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .speech import Piece
from .vision import decoder_piece

#: the model types exported by :func:`naflex_pieces`
NAFLEX_MODEL_TYPES = ("lfm2_vl",)


def resize_to_grids(positional_embeddings: torch.Tensor, grids: list[tuple[Any, Any]], max_length: int) -> torch.Tensor:
    """SigLIP 2's ``resize_positional_embeddings`` on grids given as ints (symbolic in a capture) instead of a
    tensor's values: the position embeddings ``(height, width, dim)`` resized to each grid, ``(images, rows * cols,
    dim)`` (one grid per image, unpadded: ``max_length`` is its size)."""
    dtype = positional_embeddings.dtype
    grid = positional_embeddings.permute(2, 0, 1).unsqueeze(0).to(torch.float32)  # as SigLIP 2 on the CPU
    resized = []
    for rows, cols in grids:
        out = torch.nn.functional.interpolate(grid, size=(rows, cols), mode="bilinear", align_corners=False,
                                              antialias=True)
        resized.append(out.reshape(grid.shape[1], rows * cols).transpose(0, 1).to(dtype))
    return torch.stack(resized)


@contextlib.contextmanager
def grids_from_shapes(tower: Any) -> Iterator[None]:
    """While active, ``tower``'s embeddings take ``spatial_shapes`` as a list of ``(rows, cols)`` ints
    (:func:`resize_to_grids`); restored after."""
    embeddings = tower.embeddings
    embeddings.resize_positional_embeddings = resize_to_grids  # an instance attribute over the static method
    try:
        yield
    finally:
        del embeddings.resize_positional_embeddings


class OneGridVisionPiece(torch.nn.Module):
    """The NaFlex tower and the projector on one image's grid of patches: ``pixel_values (1, rows, cols,
    patch_values) -> image_features (rows', hidden)``, what LFM2-VL's ``get_image_features`` gives for it."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model.model
        self.base_model_prefix = "model"

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        base = self.model
        rows, cols = pixel_values.shape[1], pixel_values.shape[2]
        with grids_from_shapes(base.vision_tower):  # every patch real: no mask
            hidden = base.vision_tower(pixel_values=pixel_values.flatten(1, 2), spatial_shapes=[(rows, cols)],
                                       pixel_attention_mask=None, return_dict=True).last_hidden_state
        features = base.multi_modal_projector(hidden.reshape(1, rows, cols, hidden.shape[-1]))
        return features.reshape(-1, features.shape[-1])


def naflex_pieces(model: Any, config: Any, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[Piece]:
    """The vision and decoder pieces of a NaFlex image-text model (LFM2-VL): the vision piece exported on one grid of
    4 x 6 patches and checked on one of 6 x 2 (rows and columns dynamic, multiples of the projector's
    ``downsample_factor``). A language model with short-convolution layers (the published checkpoints') gives the
    decoder its convolution states beside the keys and values, as the text-only LFM2 decoder
    (:func:`fx2onnx.deploy.vision.recurrent_states`).
    """
    g = torch.Generator().manual_seed(seed)
    vision = config.vision_config
    values = vision.num_channels * vision.patch_size ** 2
    factor = config.downsample_factor

    def grid(rows: int, cols: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": torch.randn(1, rows * factor, cols * factor, values, generator=g).to(dtype)}

    decoder = decoder_piece(model, config, dtype, g, per_image=6)
    encoder = Piece("vision", "vision.onnx", OneGridVisionPiece(model), grid(2, 3), grid(3, 1),
                    {"pixel_values": {1: "rows", 2: "cols"}}, ["pixel_values"], ["image_features"])
    return [encoder, decoder]
