"""What a Qwen2-VL, Qwen2.5-VL or Qwen3-VL vision tower computes from the values of its grid (``image_grid_thw``),
computed from the grid as tensors, so that torch.export keeps the number of images and their sizes dynamic.

The tower's Python loops over the grid's rows to build its rotary positions and image boundaries
(:func:`grid_positions`), Qwen2.5-VL's attention windows (:func:`window_positions`) and Qwen3-VL's resampled
position embeddings (:func:`interpolation_positions`); :class:`TowerGeometry` gives them to the tower as
inputs. Used by the patch :mod:`fx2onnx.patches.qwen_vl` and by the vision piece of an exported folder
(:mod:`fx2onnx.deploy.qwen_vl`).

.. code-block:: python

    import torch
    from fx2onnx.patches.qwen_vl_geometry import grid_positions

    grid = torch.tensor([[1, 4, 6], [1, 2, 2]])
    positions, cu_seqlens = grid_positions(grid, int(grid.prod(-1).sum()), 2)
    print(positions.shape, cu_seqlens)  # torch.Size([28, 2]) tensor([ 0, 24, 28], dtype=torch.int32)
"""

from __future__ import annotations

from typing import Any

import torch


def grid_positions(grid_thw: torch.Tensor, patches: Any, merge_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(position_ids (patches, 2), cu_seqlens (frames + 1,) int32)`` of the patches of images (or
    videos) of grids ``grid_thw``: the row and column of every patch, the patches laid out by blocks
    of ``merge_size x merge_size`` (transformers' ``get_vision_position_ids``), and the end of every
    frame, the patches of one frame attending to each other (``get_vision_cu_seqlens``: an image is
    one frame; the number of frames is read from the values, a boolean selection of every frame's
    last patch); tensor operations only."""
    row, column, height, width, ends = _patch_grid(grid_thw, patches, merge_size)
    index = torch.arange(patches, device=grid_thw.device, dtype=torch.int64)
    last = (row == height - 1) & (column == width - 1)  # the last patch of a frame (blocks end there too)
    frame_ends = (index + 1)[last]
    cu_seqlens = torch.cat([frame_ends.new_zeros(1), frame_ends]).to(torch.int32)
    return torch.stack([row, column], dim=-1), cu_seqlens


def _patch_grid(grid_thw: torch.Tensor, patches: Any, merge_size: int) -> tuple[torch.Tensor, ...]:
    """``(row, column, height, width, ends)``: the row and column of every patch in its image, the
    height and width of its image (in patches), the end of every image."""
    grid = grid_thw.to(torch.int64)
    sizes = grid[:, 0] * grid[:, 1] * grid[:, 2]
    ends = sizes.cumsum(0)
    index = torch.arange(patches, device=grid.device, dtype=torch.int64)
    image = (index[:, None] >= ends[None, :]).sum(dim=-1)  # the image of every patch
    height, width = grid[image, 1], grid[image, 2]
    local = (index - (ends[image] - sizes[image])) % (height * width)  # every frame has the same positions
    block = local // (merge_size * merge_size)
    blocks_per_row = width // merge_size
    row = (block // blocks_per_row) * merge_size + (local // merge_size) % merge_size
    column = (block % blocks_per_row) * merge_size + local % merge_size
    return row, column, height, width, ends


def interpolation_positions(grid_thw: torch.Tensor, patches: Any, merge_size: int,
                            side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(interp_indices, interp_weights)`` ``(patches, 4)``: the bilinear taps (``align_corners``)
    of Qwen3-VL's square table of ``side x side`` learned position embeddings resampled to the grid
    of every image (transformers' ``get_vision_interpolation_indices_and_weights``, which repeats
    values by the grid's: here from the rows and columns of :func:`grid_positions`)."""
    row, column, height, width, _ = _patch_grid(grid_thw, patches, merge_size)

    def taps(index: torch.Tensor, size: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        source = index.to(torch.float32) * (side - 1) / torch.clamp(size - 1, min=1)
        floor = torch.floor(source)
        offsets = torch.arange(0, 2, device=index.device)
        weights = (1 - (source[:, None] - floor[:, None] - offsets).abs()).clamp(min=0)
        return (floor.long()[:, None] + offsets).clamp(0, side - 1), weights

    row_taps, row_weights = taps(row, height)
    column_taps, column_weights = taps(column, width)
    indices = (row_taps[:, :, None] * side + column_taps[:, None, :]).reshape(-1, 4)
    return indices, (row_weights[:, :, None] * column_weights[:, None, :]).reshape(-1, 4)


def window_positions(grid_thw: torch.Tensor, patches: Any, merge_size: int,
                     window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(window_index (features,), cu_window_seqlens (features + 1,) int32)`` of Qwen2.5-VL's window
    attention, tensor operations only: the merged features of every image are cut into windows of
    ``window x window`` features (smaller at the bottom and right edges), ``window_index`` lists
    them window after window and ``cu_window_seqlens`` the end of every window, in patches
    (transformers' ``get_vision_window_index``; the number of windows is read from the values: a
    boolean selection of the first feature of every window)."""
    unit = merge_size * merge_size
    grid = grid_thw.to(torch.int64)
    height, width = grid[:, 1] // merge_size, grid[:, 2] // merge_size
    sizes = grid[:, 0] * height * width
    ends = sizes.cumsum(0)
    index = torch.arange(patches // unit, device=grid.device, dtype=torch.int64)
    image = (index[:, None] >= ends[None, :]).sum(dim=-1)
    start, rows, columns = ends[image] - sizes[image], height[image], width[image]
    local = index - start
    frame = start + (local // (rows * columns)) * rows * columns
    row, column = (local % (rows * columns)) // columns, local % columns
    window_row, window_column = row // window, column // window
    window_rows = torch.clamp(rows - window_row * window, max=window)  # the window's size
    window_columns = torch.clamp(columns - window_column * window, max=window)
    before = frame + window_row * window * columns + window_rows * window_column * window
    destination = before + (row % window) * window_columns + column % window
    # the end of every window, read at its first feature (the first features come in the windows' order)
    first = (row % window == 0) & (column % window == 0)
    window_ends = (before + window_rows * window_columns)[first] * unit
    cu_window_seqlens = torch.cat([window_ends.new_zeros(1), window_ends]).to(torch.int32)
    return torch.argsort(destination), cu_window_seqlens


class TowerGeometry:
    """What a Qwen-VL vision tower computes from the grid's values, computed from the grid as tensors.

    ``merge_size``: patches merged per side; ``window`` (Qwen2.5-VL): the side of an attention window in
    merged features; ``side`` (Qwen3-VL): the side of its square table of learned position embeddings."""

    def __init__(self, vision_config: Any, visual: Any):
        self.merge_size = int(vision_config.spatial_merge_size)
        self.window = vision_config.window_size // vision_config.spatial_merge_size // vision_config.patch_size \
            if getattr(vision_config, "window_size", None) else None
        self.side = int(vision_config.num_position_embeddings ** 0.5) \
            if getattr(vision_config, "num_position_embeddings", None) else None
        if self.side and (visual.interpolation_mode, visual.interpolation_align_corners) != ("bilinear", True):
            raise ValueError("The Qwen3-VL vision tower is exported with its position embeddings resampled "
                             "bilinearly, corners aligned.")

    def tower_inputs(self, image_grid_thw: torch.Tensor, patches: Any) -> dict[str, torch.Tensor]:
        """The keyword arguments giving the tower its positions, image boundaries (and windows, resampling)."""
        positions, cu_seqlens = grid_positions(image_grid_thw, patches, self.merge_size)
        inputs = {"position_ids": positions, "cu_seqlens": cu_seqlens}
        if self.window:
            inputs.update(zip(("window_index", "cu_window_seqlens"),
                              window_positions(image_grid_thw, patches, self.merge_size, self.window)))
        if self.side:
            inputs.update(zip(("interp_indices", "interp_weights"),
                              interpolation_positions(image_grid_thw, patches, self.merge_size, self.side)))
        return inputs
