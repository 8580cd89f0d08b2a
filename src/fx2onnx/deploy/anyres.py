"""The pieces of an image-text model cutting each image into a grid of tiles of one of its resolutions
(LLaVA-OneVision's "anyres"): one image at a time.

LLaVA-OneVision's processor gives, per image, the image resized to the tower's size then the tiles of the resolution
of ``image_grid_pinpoints`` that fits it best (``pixel_values (images, tiles, 3, S, S)``, padded to the most tiles) and
the image's size (``image_sizes``). Its ``get_image_features`` counts the tiles, lays their features out on the grid
and crops the padding the resize added, each step sized by the **values** of ``image_sizes`` (torch.export: ``Could not
guard on data-dependent expression``). As for Mistral 3 (:mod:`fx2onnx.deploy.pixtral`), what picks a shape is done
**in the loop** (:class:`fx2onnx.runtime.vision.VisionGenerator`: the grid of the best resolution, transformers'
``select_best_resolution``): the vision piece gets one image at a time, its tiles laid out as their grid,
``grid_pixel_values (rows, cols, 3, S, S)``, beside ``pixel_values (1, 3, S, S)`` (the whole image) and
``image_sizes (1, 2)``; the grid is read from the shape (symbolic), the crop of the padding is computed from the size's
values in the graph (the rows or columns kept: a size the graph reads at run time, no Python branch), then the resize
transformers applies to a grid of more features than ``anyres_max_N`` allows (to its own size otherwise, which changes
nothing), the image's new-line feature after each row:

* ``vision.onnx``: ``pixel_values``, ``grid_pixel_values``, ``image_sizes`` -> ``image_features (features, hidden)``;
* ``decoder.onnx``: the decoder of :mod:`fx2onnx.deploy.vision`.
"""

from __future__ import annotations

from typing import Any

import torch

from .speech import Piece
from .vision import decoder_piece

#: the model types exported by :func:`anyres_pieces`
ANYRES_MODEL_TYPES = ("llava_onevision",)
#: the input of the vision piece holding an image's tiles laid out as their grid (the loop's cue)
GRID_INPUT = "grid_pixel_values"


def kept_mask(image_size: torch.Tensor, rows: Any, cols: Any) -> torch.Tensor:
    """transformers' ``unpad_image`` as a mask: which positions of a ``(rows, cols)`` grid of features hold the image
    of ``image_size (2,)`` (height, width) resized into it, the padding's rows (or columns) False, computed from the
    values with tensor arithmetic (float64, rounded at 7 digits as transformers)."""
    size = image_size.to(torch.float64)
    height, width = size[0], size[1]
    current_height = torch.full((), 1.0, dtype=torch.float64) * rows
    current_width = torch.full((), 1.0, dtype=torch.float64) * cols
    wider = width / height > current_width / current_height
    new_height = torch.floor(torch.round(height * (current_width / width) * 1e7) / 1e7)
    new_width = torch.floor(torch.round(width * (current_height / height) * 1e7) / 1e7)
    row_padding = torch.where(wider, torch.div(current_height - new_height, 2, rounding_mode="floor"), 0)
    col_padding = torch.where(wider, 0, torch.div(current_width - new_width, 2, rounding_mode="floor"))
    row = torch.arange(rows, dtype=torch.float64)
    col = torch.arange(cols, dtype=torch.float64)
    keep_row = (row >= row_padding) & (row < current_height - row_padding)
    keep_col = (col >= col_padding) & (col < current_width - col_padding)
    return keep_row[:, None] & keep_col[None, :]


class GridVisionPiece(torch.nn.Module):
    """LLaVA-OneVision's tower, projector and layout on one image: the whole image's features, then those of its tiles
    on their grid, cropped to the image and each row followed by the new-line feature (``get_image_features``)."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model.model
        self.base_model_prefix = "model"

    def tiles_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """The tower's selected layer(s) and the projector on ``pixels (tiles, 3, S, S)``: ``(tiles, tokens,
        hidden)``."""
        base, config = self.model, self.model.config
        out = base.vision_tower(pixels.to(base.vision_tower.dtype), output_hidden_states=True, return_dict=True)
        layer = config.vision_feature_layer
        layers = [layer] if isinstance(layer, int) else layer
        selected = torch.cat([out.hidden_states[i] for i in layers], dim=-1)
        if config.vision_feature_select_strategy == "default":
            selected = selected[:, 1:]
        return base.multi_modal_projector(selected)

    def forward(self, pixel_values: torch.Tensor, grid_pixel_values: torch.Tensor,
                image_sizes: torch.Tensor) -> torch.Tensor:
        rows, cols = grid_pixel_values.shape[0], grid_pixel_values.shape[1]
        features = self.tiles_features(torch.cat([pixel_values, grid_pixel_values.flatten(0, 1)]))
        config = self.model.config
        side = config.vision_config.image_size // config.vision_config.patch_size
        hidden = features.shape[-1]
        grid = features[1:].view(rows, cols, side, side, hidden).permute(0, 2, 1, 3, 4)
        grid = grid.reshape(rows * side, cols * side, hidden)
        keep = kept_mask(image_sizes[0], rows * side, cols * side)
        keep_rows, keep_cols = keep.any(dim=1), keep.any(dim=0)
        grid = grid[keep_rows][:, keep_cols]  # the image without the resize's padding: a size read from the values
        height, width = shrunk_size(keep_rows.sum(), keep_cols.sum(), side, config.vision_aspect_ratio)
        # transformers shrinks a grid of more features than anyres_max_N allows; a resize to its own size is exact
        grid = torch.nn.functional.interpolate(grid.permute(2, 0, 1)[None], [height, width], mode="bilinear")
        grid = grid[0].permute(1, 2, 0)
        newline = self.model.image_newline.to(grid.dtype)[None, None].expand(grid.shape[0], 1, hidden)
        return torch.cat([features[0], torch.cat([grid, newline], dim=1).reshape(-1, hidden)], dim=0)


def shrunk_size(height: torch.Tensor, width: torch.Tensor, side: int, aspect_ratio: str) -> tuple[Any, Any]:
    """The size transformers resizes a ``(height, width)`` grid of features to (both tensors): itself, or divided by
    its ratio to ``anyres_max_N`` tiles of ``side x side`` when over 1.1 (ints read from the values, checked
    positive)."""
    most = int(str(aspect_ratio).removeprefix("anyres_max_"))
    ratio = torch.sqrt(height.to(torch.float64) * width.to(torch.float64) / (most * side * side))
    shrink = ratio > 1.1
    sizes = []
    for size in (height, width):
        value = torch.where(shrink, torch.floor(size / ratio), size.to(torch.float64)).to(torch.int64).item()
        torch._check(value > 0)
        sizes.append(value)
    return sizes[0], sizes[1]


def anyres_pieces(model: Any, config: Any, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[Piece]:
    """The vision and decoder pieces of a LLaVA-OneVision model: the vision piece exported on an image of a grid of
    2 x 3 tiles and checked on one of 3 x 2 (rows and columns dynamic)."""
    g = torch.Generator().manual_seed(seed)
    size = config.vision_config.image_size

    def image(rows: int, cols: int, height: int, width: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": torch.randn(1, 3, size, size, generator=g).to(dtype),
                "grid_pixel_values": torch.randn(rows, cols, 3, size, size, generator=g).to(dtype),
                "image_sizes": torch.tensor([[height, width]], dtype=torch.int64)}

    side = size // config.vision_config.patch_size
    decoder = decoder_piece(model, config, dtype, g, per_image=side * side + side * (side + 1))
    encoder = Piece("vision", "vision.onnx", GridVisionPiece(model), image(2, 3, size * 2 - 3, size * 3),
                    image(3, 2, size * 3, size),
                    {"pixel_values": {}, GRID_INPUT: {0: "rows", 1: "cols"}, "image_sizes": {}},
                    ["pixel_values", GRID_INPUT, "image_sizes"], ["image_features"])
    return [encoder, decoder]
