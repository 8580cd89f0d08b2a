"""The image features of a vision-language model as one tensor, and the dynamic shapes of a cache whose
layers may be sliding windows: what the image-text pieces of a folder and the tiny VLMs of the zoo share.

.. code-block:: python

    from fx2onnx.inputs.vision_features import cache_dynamic_shapes

    print(cache_dynamic_shapes(text_config, num_layers=2))  # [{0: 'batch', 2: 'past_seq'}, ...]
"""

from __future__ import annotations

from typing import Any

import torch


def _select_features(model: torch.nn.Module, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The vision hidden states LLaVA projects: the configured layer(s), the class token
    dropped with the ``default`` strategy, several layers concatenated on the last axis."""
    config = model.config
    layers = config.vision_feature_layer
    default = config.vision_feature_select_strategy == "default"
    pool = [hidden_states[layer] for layer in ([layers] if isinstance(layers, int) else layers)]
    if default:
        pool = [h[:, 1:] for h in pool]
    return pool[0] if len(pool) == 1 else torch.cat(pool, dim=-1)


def image_features(base: torch.nn.Module, pixel_values: torch.Tensor) -> torch.Tensor:
    """The projected features ``[images, tokens, hidden]`` of the images, ``base`` the model
    holding ``vision_tower`` and ``multi_modal_projector`` (``model.model``): LLaVA's selection
    of layers, ``get_image_features`` for the others (Gemma 3), Idefics 3's vision model and
    connector on every image or tile (none of them padding: its ``get_image_features`` drops
    the images made of zeros, a number of rows read from the values)."""
    if hasattr(base, "connector"):
        return base.connector(base.vision_model(pixel_values=pixel_values).last_hidden_state)
    if not hasattr(base.config, "vision_feature_select_strategy"):
        features = base.get_image_features(pixel_values, return_dict=True).pooler_output
        if not isinstance(features, torch.Tensor):
            raise TypeError(
                f"{type(base).__name__}.get_image_features returns {type(features).__name__}, "
                f"VisionEncoder needs one tensor [images, tokens, hidden]"
            )
        return features
    outputs = base.vision_tower(pixel_values, output_hidden_states=True, return_dict=True)
    return base.multi_modal_projector(_select_features(base, outputs.hidden_states))


def cache_dynamic_shapes(text_config: Any, num_layers: int) -> list[dict[int, str]]:
    """The dynamic shapes of a flattened cache ``[key_0, value_0, ...]``: ``past_seq``, or
    ``sliding_seq`` for a layer of a sliding window (see :func:`fx2onnx.zoo.vlm.decoder_dynamic_shapes`)."""
    kinds = getattr(text_config, "layer_types", None) or ["full_attention"] * num_layers
    return [
        {0: "batch", 2: "sliding_seq" if kind == "sliding_attention" else "past_seq"}
        for kind in kinds[:num_layers]
        for _ in range(2)
    ]
