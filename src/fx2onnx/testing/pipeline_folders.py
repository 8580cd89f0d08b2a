"""Checkpoint folders made in code for the pipeline tasks of several pieces or of their own post-processing: a tiny
SAM with its image processor (mask-generation); what a published folder holds, without a download.

.. code-block:: python

    from fx2onnx.testing.pipeline_folders import write_sam_folder

    write_sam_folder("sam_folder")
"""

from __future__ import annotations

import os
from typing import Any


def sam_config() -> Any:
    """A SAM of 64x64 images: a 2-layer image encoder of 32 units on 16x16 patches (4x4 embeddings, one global
    attention layer), a 2-layer mask decoder of 16 units, low-resolution masks of 16x16."""
    import transformers

    vision = dict(hidden_size=32, output_channels=16, num_hidden_layers=2, num_attention_heads=2, image_size=64,
                  patch_size=16, mlp_dim=64, global_attn_indexes=[1], window_size=2, num_pos_feats=8)
    prompt = dict(hidden_size=16, image_size=64, patch_size=16, mask_input_channels=4, num_point_embeddings=4)
    decoder = dict(hidden_size=16, mlp_dim=32, num_hidden_layers=2, num_attention_heads=2, iou_head_hidden_dim=16)
    return transformers.SamConfig(vision_config=vision, prompt_encoder_config=prompt, mask_decoder_config=decoder,
                                  initializer_range=0.2, architectures=["SamModel"])


def write_sam_folder(folder: str | os.PathLike, seed: int = 0) -> str:
    """Writes a ``save_pretrained`` folder of the tiny SAM of :func:`sam_config` (random weights, seeded) with its
    image processor (images resized to 64 pixels on their longer side, padded to 64x64); returns the folder."""
    import torch
    import transformers

    folder = os.fspath(folder)
    torch.manual_seed(seed)
    model = transformers.SamModel(sam_config()).eval()
    transformers.utils.logging.disable_progress_bar()
    try:
        model.save_pretrained(folder)
    finally:
        transformers.utils.logging.enable_progress_bar()
    transformers.SamImageProcessor(size={"longest_edge": 64}, pad_size={"height": 64, "width": 64},
                                   mask_size={"longest_edge": 16}, mask_pad_size={"height": 16, "width": 16}
                                   ).save_pretrained(folder)
    return folder
