"""The vision attention of Qwen2-VL and the towers built like it, over all images at once.

``VisionAttention.forward`` (Qwen2-VL; the same code in Qwen2.5-VL and Qwen3-VL, GLM-OCR's with its heads
normalized before the rotation) runs the patches
of every image in one sequence, but attends within one image at a time: without flash attention
it splits queries, keys and values by ``(cu_seqlens[1:] - cu_seqlens[:-1]).tolist()`` and runs
one attention per image. ``tolist()`` reads the tensor's values: torch.export cannot capture it
(a data-dependent expression, or the number and sizes of the images frozen).

The replacement runs **one attention over all the patches with a block-diagonal mask** built
from ``cu_seqlens`` as tensors (:func:`block_diagonal_bias`): a patch sees the patches of its own
segment only, the other scores get the lowest value of the type, whose exponential is 0 in the
softmax. The result is the one of an attention per image (the same sums, in another order: equal
up to rounding), for any number of images of any sizes, with no Python list of lengths. It costs
``patches x patches`` scores instead of the sum of the squares of every image's patches.

The rest of the forward is the original's: the same projections, the module's own
``apply_rotary_pos_emb_vision`` and attention interface (read from the original's module), and
flash attention, which takes ``cu_seqlens`` itself, still goes to the original.
"""

from __future__ import annotations

from typing import Any

import torch

from .qwen_vl_geometry import TowerGeometry
from .registry import source_guard

#: (modeling module, attention class) of the vision towers whose attention is split by tolist()
SPLIT_ATTENTIONS = (
    ("transformers.models.qwen2_vl.modeling_qwen2_vl", "VisionAttention"),
    ("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", "Qwen2_5_VLVisionAttention"),
    ("transformers.models.qwen3_vl.modeling_qwen3_vl", "Qwen3VLVisionAttention"),
    ("transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", "Qwen3VLMoeVisionAttention"),
    ("transformers.models.glm_ocr.modeling_glm_ocr", "GlmOcrVisionAttention"),
)


def segment_ids(cu_seqlens: torch.Tensor, length: int | torch.SymInt) -> torch.Tensor:
    """The segment (image) of each of ``length`` positions, ``cu_seqlens`` the boundaries
    ``[0, end_0, end_1, ...]``: the number of ends at or before the position."""
    positions = torch.arange(length, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    return (positions[:, None] >= cu_seqlens[None, 1:]).sum(dim=-1)


def block_diagonal_bias(cu_seqlens: torch.Tensor, length: int | torch.SymInt, dtype: torch.dtype) -> torch.Tensor:
    """``(length, length)`` additive attention mask: 0 between positions of one segment, the
    lowest value of ``dtype`` elsewhere (a zero probability after the softmax)."""
    segments = segment_ids(cu_seqlens, length)
    same = segments[:, None] == segments[None, :]
    return torch.zeros((), dtype=dtype, device=cu_seqlens.device).masked_fill(~same, torch.finfo(dtype).min)


def make_block_diagonal_attention(original: Any) -> Any:
    """The forward of a split vision attention (:data:`SPLIT_ATTENTIONS`) with one attention and a
    block-diagonal mask."""
    import inspect

    namespace = inspect.unwrap(original).__globals__
    rotary = namespace["apply_rotary_pos_emb_vision"]
    functions, eager = namespace["ALL_ATTENTION_FUNCTIONS"], namespace["eager_attention_forward"]
    flash = namespace["is_flash_attention_requested"]

    def forward(self: Any, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None, max_seqlen: int | None = None,
                **kwargs: Any) -> torch.Tensor:
        if flash(self.config):  # takes cu_seqlens itself
            return original(self, hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
        seq_length = hidden_states.shape[0]
        query, key, value = (
            self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        )
        if getattr(self, "q_norm", None) is not None:  # GLM-OCR normalizes each head before the rotation
            query, key = self.q_norm(query), self.k_norm(key)
        cos, sin = position_embeddings
        query, key = rotary(query, key, cos, sin)
        query, key, value = (t.transpose(0, 1).unsqueeze(0) for t in (query, key, value))
        interface = functions.get_interface(self.config._attn_implementation, eager)
        mask = block_diagonal_bias(cu_seqlens, seq_length, query.dtype)[None, None]
        output, _ = interface(self, query, key, value, attention_mask=mask, scaling=self.scaling,
                              dropout=0.0 if not self.training else self.attention_dropout, is_causal=False, **kwargs)
        return self.proj(output.reshape(seq_length, -1).contiguous())

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


guard_split_attention = source_guard(
    "VisionAttention.forward", "lengths.tolist()", "torch.split(", "apply_rotary_pos_emb_vision(query_states",
    "self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)",
    absent="the vision attention does not split the images with lengths.tolist() in this version",
)


#: (modeling module, model class) whose ``get_image_features`` splits the features per image by
#: ``(image_grid_thw.prod(-1) // merge**2).tolist()``
SPLIT_FEATURES = (
    ("transformers.models.qwen2_vl.modeling_qwen2_vl", "Qwen2VLModel"),
    ("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", "Qwen2_5_VLModel"),
    ("transformers.models.qwen3_vl.modeling_qwen3_vl", "Qwen3VLModel"),
    ("transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", "Qwen3VLMoeModel"),
    ("transformers.models.glm_ocr.modeling_glm_ocr", "GlmOcrModel"),
)


def make_unsplit_image_features(original: Any) -> Any:
    """``get_image_features`` returning every image's features as one entry.

    The original splits the vision tower's output into one tensor per image with sizes read by
    ``tolist()`` from the grid: torch.export fixes the number of images to the example's (it
    iterates over the grid's first dimension). The forward only concatenates the list again
    (``torch.cat(pooler_output)``, and each deepstack level's list for Qwen3-VL), so one entry holding
    all images gives the same tensor. While the patch is applied, ``pooler_output`` (and each
    deepstack level) is a list of one tensor, not one per image.

    The tower itself loops over the grid's rows to compute its rotary positions, image boundaries,
    windows (Qwen2.5-VL) and resampled position embeddings (Qwen3-VL); the replacement gives it those
    computed from the grid as tensors (:class:`fx2onnx.patches.qwen_vl_geometry.TowerGeometry`, what the vision
    piece of an exported folder does)."""

    def get_image_features(self: Any, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor | None = None,
                           **kwargs: Any) -> Any:
        return_dict = kwargs.pop("return_dict", True)
        if image_grid_thw is None:
            return original(self, pixel_values, image_grid_thw, return_dict=return_dict, **kwargs)
        tower = TowerGeometry(self.visual.config, self.visual).tower_inputs(image_grid_thw, pixel_values.shape[0])
        outputs = self.visual(pixel_values.type(self.visual.dtype), grid_thw=image_grid_thw, return_dict=True,
                              **tower, **kwargs)
        outputs.pooler_output = [outputs.pooler_output]
        if getattr(outputs, "deepstack_features", None) is not None:
            outputs.deepstack_features = [[feature] for feature in outputs.deepstack_features]
        return outputs if return_dict else outputs.to_tuple()

    get_image_features.__wrapped__ = original  # type: ignore[attr-defined]
    return get_image_features


guard_unsplit_image_features = source_guard(
    "get_image_features", "split_sizes = (image_grid_thw.prod(-1) // self.visual.spatial_merge_size**2).tolist()",
    "self.visual(",
    absent="get_image_features does not split the features with tolist() in this version",
)
