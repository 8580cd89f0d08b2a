"""SigLIP 2's position embeddings resized for every image at once, from the sizes as tensors.

``Siglip2VisionEmbeddings.resize_positional_embeddings`` loops over the batch and reads each image's grid of patches
with ``spatial_shapes[i].tolist()`` to give :func:`torch.nn.functional.interpolate` (bilinear, antialiased) its
size: Python numbers read from the data, which torch.export cannot capture (and a loop over the batch it would
freeze). An antialiased bilinear resize is separable and linear: the resized table is ``A_h @ table @ A_w^T``
where row ``i`` of ``A_h`` holds the triangle filter's weights of output row ``i`` over the input rows, stretched
by the scale when shrinking, normalized to sum 1 (the weights torch's ``_upsample_bilinear2d_aa`` computes). The
patch computes those weights for the row and the column of each of the ``max_length`` positions of each image
(position ``k`` of an image of ``h x w`` patches is row ``k // w``, column ``k % w``; the padding positions past
``h * w`` take the first one's embedding, as eager), then one weighted sum: every size a tensor, the batch free.
"""

from __future__ import annotations

from typing import Any

import torch


def triangle_weights(index: torch.Tensor, out_size: torch.Tensor, in_size: int) -> torch.Tensor:
    """The antialiased bilinear weights (``(..., in_size)``, rows summing to 1) of output positions ``index`` of a
    resize from ``in_size`` to ``out_size`` (tensors broadcast together), align_corners=False."""
    scale = in_size / out_size.to(torch.float32)
    support = torch.clamp(scale, min=1.0)  # the filter is stretched when shrinking, bilinear's when enlarging
    center = scale * (index.to(torch.float32) + 0.5)
    source = torch.arange(in_size, dtype=torch.float32, device=index.device) + 0.5
    weights = torch.clamp(1.0 - ((source - center[..., None]) / support[..., None]).abs(), min=0.0)
    return weights / weights.sum(-1, keepdim=True)


def resize_positional_embeddings(positional_embeddings: torch.Tensor, spatial_shapes: torch.Tensor,
                                 max_length: int) -> torch.Tensor:
    """``Siglip2VisionEmbeddings.resize_positional_embeddings`` without a loop over the batch nor ``tolist()``:
    ``positional_embeddings`` (height, width, dim), ``spatial_shapes`` (batch, 2) -> (batch, max_length, dim)."""
    source_dtype = positional_embeddings.dtype
    table = positional_embeddings.to(torch.float32)
    height, width = spatial_shapes[:, :1], spatial_shapes[:, 1:]  # (batch, 1)
    position = torch.arange(max_length, device=spatial_shapes.device)[None]  # (1, max_length)
    inside = position < height * width  # the padding positions take the first position's embedding
    row = torch.where(inside, torch.div(position, width, rounding_mode="floor"), 0)
    column = torch.where(inside, torch.remainder(position, width), 0)
    rows = triangle_weights(row, height, table.shape[0])  # (batch, max_length, table height)
    columns = triangle_weights(column, width, table.shape[1])  # (batch, max_length, table width)
    resized = torch.einsum("blh,hwd,blw->bld", rows, table, columns)
    return resized.to(source_dtype)


def _make_resize_positional_embeddings(original: Any) -> Any:
    def resize(positional_embeddings: torch.Tensor, spatial_shapes: torch.Tensor, max_length: int) -> torch.Tensor:
        return resize_positional_embeddings(positional_embeddings, spatial_shapes, max_length)

    resize.__wrapped__ = original  # type: ignore[attr-defined]
    return resize
