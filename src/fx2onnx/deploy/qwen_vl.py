"""The pieces of a Qwen2-VL, Qwen2.5-VL or Qwen3-VL folder (and GLM-OCR's, built like Qwen2.5-VL's without its
windows): a vision tower over the patches of every image, a decoder with 3D rotary positions.

* ``vision.onnx``: ``pixel_values (patches, channels * temporal_patch * patch * patch)`` and
  ``image_grid_thw (images, 3)``, as the processor gives them (the patches of every image one
  after the other, each image's grid of patches) -> ``image_features (rows, hidden)``, the merged
  features of every image one after the other. The vision rotary positions and the boundaries of
  the images (``cu_seqlens``) are computed from the grid **in the graph**
  (:func:`grid_positions`, tensors only, no value read in Python) and given to the tower as its
  precomputed ``position_ids`` and ``cu_seqlens``; its attention runs once over all the patches
  with a block-diagonal mask (:mod:`fx2onnx.patches.qwen_vl`), so the number of images and their
  sizes stay dynamic. Qwen2.5-VL's tower also attends within windows of merged features: their
  order and boundaries are computed from the grid in the graph as well (:func:`window_positions`);
  Qwen3-VL's resamples its learned position embeddings to every grid (:func:`interpolation_positions`)
  and also returns the features of some blocks (``deepstack_features_<i>``).
* ``decoder.onnx``: the decoder of :mod:`fx2onnx.deploy.vision` (Qwen3-VL's adds the deepstack features
  to its first layers: :class:`DeepstackDecoderPiece`; the image features written over
  the ``<|image_pad|>`` placeholders in the graph), its ``position_ids`` of shape
  ``(3, batch, seq)``: the multimodal rotary positions (time, height, width) that
  ``get_rope_index`` computes from the grid's values are computed **in the loop**
  (:func:`fx2onnx.runtime.mrope.rope_index`, numpy), then every later token takes the largest
  position plus one.

An image is one frame (``grid_t = 1``); a video (Qwen2-VL, Qwen2.5-VL) is ``grid_t`` temporal patches, each
frame attending within itself (``cu_seqlens`` ends every frame), run by the same vision piece on the processor's
``pixel_values_videos`` and ``video_grid_thw``; the decoder writes the features of both over their placeholders in
the prompt's order (:data:`fx2onnx.deploy.vision.VIDEO_MODEL_TYPES`; Qwen3-VL's deepstack features too).
"""

from __future__ import annotations

from typing import Any

import torch

from ..patches.qwen_vl_geometry import (  # noqa: F401 (kept importable from here)
    TowerGeometry,
    grid_positions,
    interpolation_positions,
    window_positions,
)
from .speech import Piece
from .vision import ImageTextDecoderPiece, decoder_piece, last_logits

#: the model types exported by :func:`qwen_vl_pieces` (GLM-OCR: the same grid of patches, its 3D positions computed as
#: Qwen2-VL's for images)
QWEN_VL_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm_ocr")


class QwenVisionPiece(torch.nn.Module):
    """The vision tower and its merger: ``(pixel_values, image_grid_thw) -> image_features (rows, hidden)``."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model.model
        self.base_model_prefix = "model"
        self.geometry = TowerGeometry(model.config.vision_config, model.model.visual)

    def forward(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
        visual = self.model.visual
        out = visual(pixel_values.to(visual.dtype), grid_thw=image_grid_thw,
                     **self.geometry.tower_inputs(image_grid_thw, pixel_values.shape[0]))
        if self.geometry.side:  # Qwen3-VL: the features of some blocks, added to the first layers of the decoder
            return (out.pooler_output, *out.deepstack_features)
        return out.pooler_output


def _dense_deepstack(self: Any, hidden_states: torch.Tensor, visual_pos_masks: torch.Tensor,
                     visual_embeds: torch.Tensor) -> torch.Tensor:
    """Qwen3-VL's ``_deepstack_process`` without a boolean index: the features scattered over the
    image positions of a zero tensor, added (the same sums; a step without image tokens adds zeros,
    where the original's ``hidden_states[mask] + visual_embeds`` would not broadcast)."""
    mask = visual_pos_masks[..., None].expand_as(hidden_states)
    dense = torch.zeros_like(hidden_states).masked_scatter(mask, visual_embeds.to(hidden_states.dtype))
    return hidden_states + dense


class DeepstackDecoderPiece(ImageTextDecoderPiece):
    """Qwen3-VL's decoder: :class:`fx2onnx.deploy.vision.ImageTextDecoderPiece` with the deepstack
    features of the vision piece added to the image positions of the first layers (the text model's
    ``_deepstack_process`` replaced on this model by :func:`_dense_deepstack`)."""

    def __init__(self, model: Any):
        import types

        super().__init__(model)
        text = self.model.language_model
        text._deepstack_process = types.MethodType(_dense_deepstack, text)

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, image_features, deepstack_features):
        embeds = self.model.get_input_embeddings()(input_ids)
        positions = self.placeholders(input_ids)  # the image and video placeholders
        embeds = embeds.masked_scatter(positions.unsqueeze(-1).expand_as(embeds), image_features.to(embeds.dtype))
        out = self.model.language_model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids,
                                         past_key_values=past_key_values, use_cache=True, visual_pos_masks=positions,
                                         deepstack_visual_embeds=list(deepstack_features))
        return {"logits": last_logits(self.lm_head, out.last_hidden_state), "past_key_values": out.past_key_values}


def _grids(vision: Any, images: list[tuple[int, int]], dtype: torch.dtype, g: torch.Generator) -> dict[str, Any]:
    """Random patches of images of ``(rows, columns)`` patches, and their grid."""
    grid = torch.tensor([[1, h, w] for h, w in images], dtype=torch.int64)
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    patches = int(grid.prod(-1).sum())
    return {"pixel_values": torch.randn(patches, width, generator=g).to(dtype), "image_grid_thw": grid}


def qwen_vl_pieces(model: Any, config: Any, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[Piece]:
    """The vision and decoder pieces of a Qwen2-VL, Qwen2.5-VL or Qwen3-VL model: the vision piece
    exported on two images of different sizes and checked on one image of a third size; the
    decoder's positions in 3 rows."""
    vision = config.vision_config
    g = torch.Generator().manual_seed(seed)
    merge = vision.spatial_merge_size
    # the blocks whose features are added to the decoder's first layers (those the tower has)
    deepstack = len([i for i in getattr(vision, "deepstack_visual_indexes", None) or () if i < vision.depth])
    encoder = Piece("vision", "vision.onnx", QwenVisionPiece(model),
                    _grids(vision, [(2 * merge, 2 * merge), (2 * merge, 3 * merge)], dtype, g),
                    _grids(vision, [(3 * merge, merge)], dtype, g),
                    {"pixel_values": {0: "patches"}, "image_grid_thw": {0: "images"}},
                    ["pixel_values", "image_grid_thw"],
                    ["image_features", *(f"deepstack_features_{i}" for i in range(deepstack))])
    return [encoder, decoder_piece(model, config, dtype, g, per_image=4, position_rows=3, deepstack=deepstack,
                                    module=DeepstackDecoderPiece(model) if deepstack else None)]
