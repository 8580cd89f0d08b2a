"""Image inputs of the models whose forward does not take ``pixel_values [batch, channels, size, size]``.

:func:`fx2onnx.zoo.task_inputs.build_task_inputs` gives a batch of images to the image tasks;
a few models take them in another form, read from their forward's signature:

* ``spatial_shapes`` (SigLIP 2, NaFlex): the images cut into patches ``[batch, patches,
  channels x patch x patch]`` with the patch grid of each image and a mask of the valid patches;
* ``pixel_values_videos`` and no ``pixel_values`` (VidEoMT, VideoPrism): a clip of frames;
* ``task_inputs`` (OneFormer): the tokens of the task prompt beside the images;
* ``input_ids`` and no ``pixel_values`` (ImageGPT): the image as color-cluster tokens;
* ``input_ids`` and an image token (ShieldGemma 2): a prompt with the image's placeholders.

.. code-block:: python

    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model
    from fx2onnx.zoo.task_inputs import build_task_inputs

    arch = get_task_architecture("image-classification", "siglip2")
    model, config = tiny_task_model(arch)
    inputs, dynamic_shapes = build_task_inputs(arch.task, model, config, batch=2)
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .common import _forward_parameters, _generator, _vision_config, image_shape
from .vlm_inputs import image_text_inputs


def _names(model: Any) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _image_token(model: Any) -> bool:
    config = getattr(model, "config", None)
    return any(isinstance(getattr(config, k, None), int) for k in ("image_token_id", "image_token_index"))


def needs_other_image_inputs(model: Any) -> bool:
    """True for a model :func:`other_image_inputs` builds the images of."""
    names = _names(model)
    return "spatial_shapes" in names or "task_inputs" in names or "pixel_values" not in names and (
        "pixel_values_videos" in names or "input_ids" in names) or "input_ids" in names and _image_token(model)


def other_image_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The images in the form the model's forward takes (see the module's docstring)."""
    names = _names(model)
    g = _generator(seed)
    channels, height, width = image_shape(config)
    if "pixel_values" in names and "input_ids" in names and _image_token(model):
        # a vision-language model classifying images (ShieldGemma 2): its prompt with the image's
        # placeholders, as image-text-to-text builds it
        return _image_text_inputs(model, config, batch, seed)
    if "pixel_values" not in names and "pixel_values_videos" in names:
        return _video_inputs(model, config, batch, seed)
    if "pixel_values" not in names and "input_ids" in names:
        # ImageGPT: one token per pixel, a color cluster (the last id starts the sequence)
        vocab = getattr(config, "vocab_size", 64)
        ids = torch.randint(0, vocab - 1, (batch, 16), generator=g)
        return {"input_ids": ids}, {"input_ids": {0: "batch"}}
    if "spatial_shapes" in names:
        vision = _vision_config(config)
        patch = getattr(vision, "patch_size", 16)
        rows, cols = height // patch, width // patch
        pixels = torch.rand(batch, rows * cols, channels * patch * patch, generator=g)
        inputs = {
            "pixel_values": pixels,
            "pixel_attention_mask": torch.ones(batch, rows * cols, dtype=torch.int64),
            "spatial_shapes": torch.tensor([[rows, cols]] * batch, dtype=torch.int64),
        }
        return inputs, {k: {0: "batch"} for k in inputs}
    inputs = {"pixel_values": torch.rand(batch, channels, height, width, generator=g)}
    if "task_inputs" in names:  # OneFormer: the tokenized "the task is semantic" prompt
        vocab = getattr(config, "text_encoder_vocab_size", None) or 64
        length = getattr(config, "task_seq_len", None) or 8
        inputs["task_inputs"] = torch.randint(1, min(vocab, 64), (batch, length), generator=g)
    return inputs, {k: {0: "batch"} for k in inputs}


def _image_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    if needs_other_image_inputs(model):  # patches (NaFlex), videos, a task prompt, pixel tokens
        return other_image_inputs(model, config, batch, seed)
    channels, height, width = image_shape(config)
    pixels = torch.rand(batch, channels, height, width, generator=_generator(seed))
    return {"pixel_values": pixels}, {"pixel_values": {0: "batch"}}


def _video_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    channels, height, width = image_shape(config)
    frames = getattr(_vision_config(config), "num_frames", None) or getattr(config, "num_frames", 4)
    pixels = torch.rand(batch, frames, channels, height, width, generator=_generator(seed))
    name = "pixel_values_videos" if "pixel_values_videos" in _forward_parameters(model) else "pixel_values"
    return {name: pixels}, {name: {0: "batch"}}


def _vision_to_text_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A model without image placeholders (BLIP, GIT, Pix2Struct, vision encoder-decoders): the
    images, and the text it conditions on or the decoder's start where its forward takes them."""
    inputs, shapes = _image_inputs(model, config, batch, seed)
    names = _forward_parameters(model)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None) or 64
    g = _generator(seed + 1)
    for name in ("input_ids", "decoder_input_ids"):
        if name in names and (name == "input_ids" or getattr(config, "is_encoder_decoder", False)):
            inputs[name] = torch.randint(3, min(vocab, 64), (batch, 4), generator=g)
            shapes[name] = {0: "batch"}
    return inputs, shapes


def _image_text_inputs(model: Any, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A prompt per image: a text token, the image's placeholder tokens (as many as its
    features, counted by the model's ``get_image_features``), two text tokens; the images in the
    form the model takes (:mod:`fx2onnx.inputs.vlm_inputs`)."""
    token = getattr(config, "image_token_id", None)
    if token is None:
        token = getattr(config, "image_token_index", None)
    if token is None and "pixel_values" in _forward_parameters(model):
        return _vision_to_text_inputs(model, config, batch, seed)
    return image_text_inputs(model, config, batch, seed)
