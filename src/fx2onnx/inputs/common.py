"""What the builders of example inputs share: the sizes read from a configuration, a seeded generator, the
names a forward takes.

.. code-block:: python

    import transformers
    from fx2onnx.inputs.common import image_shape

    print(image_shape(transformers.ViTConfig(image_size=64)))  # (3, 64, 64)
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

#: tasks whose inputs are a batch of images ``pixel_values [batch, channels, size, size]``
IMAGE_TASKS = (
    "image-classification",
    "object-detection",
    "semantic-segmentation",
    "instance-segmentation",
    "universal-segmentation",
    "depth-estimation",
)


def _vision_config(config: Any) -> Any:
    for key in ("vision_config", "backbone_config", "encoder_config"):
        sub = getattr(config, key, None)
        if sub is not None and hasattr(sub, "image_size"):
            return sub
    return config


def image_shape(config: Any) -> tuple[int, int, int]:
    """``(channels, height, width)`` of the images the configuration expects (32x32 by default)."""
    vision = _vision_config(config)
    size = getattr(vision, "image_size", None) or getattr(config, "image_size", None) or 32
    size = size[0] if isinstance(size, (list, tuple)) else size
    channels = getattr(vision, "num_channels", None) or getattr(config, "num_channels", 3)
    return channels, size, size


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _forward_parameters(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _sub_config_value(config: Any, key: str) -> Any:
    """``config.<key>``, else the first sub-configuration's (encoder, audio...)."""
    value = getattr(config, key, None)
    if value is not None:
        return value
    for name in ("encoder_config", "audio_config", "speech_config"):
        sub = getattr(config, name, None)
        if sub is not None and getattr(sub, key, None) is not None:
            return getattr(sub, key)
    return None
