"""The pieces of any image-text-to-text model which writes its image features over placeholder
tokens, read from the model instead of a list of families.

A model qualifies when its configuration names an image placeholder (``image_token_id`` or
``image_token_index``) and the model has ``get_image_features`` (transformers' own, or its base
model's), with a base model and an ``lm_head`` (LLaVA's layout) or a decoder-only ``language_model``
beside its towers (BLIP-2's, InstructBLIP's: their Q-Former's queries are the image's features;
InstructBLIP's Q-Former reads the prompt too, ``qformer_input_ids`` from the processor, an input of the
vision piece). The vision piece takes the image inputs that ``get_image_features`` takes, in the form
the task zoo builds them (:func:`fx2onnx.inputs.vlm_inputs.image_inputs`: ``pixel_values`` alone,
or with ``image_sizes``, ``pixel_attention_mask``, ``pixel_mask``, ``spatial_shapes``) and
returns the features of every image one after the other, ``(rows, hidden)``; the decoder is the
one of :mod:`fx2onnx.deploy.vision`. What cannot be split this way raises
:class:`UnsplittableModel` naming the reason (no placeholder token; patches of a grid outside the Qwen-VL
family). BLIP and Florence-2 go through :mod:`fx2onnx.deploy.captioner`, GIT through
:mod:`fx2onnx.deploy.image_prefix`.

.. code-block:: python

    from fx2onnx.deploy.image_text_generic import generic_vision_pieces
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "aya_vision"))
    vision, decoder = generic_vision_pieces(model, config)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any

import torch

from ..inputs.vlm_inputs import (
    features_per_image,
    flat_image_features,
    image_features_function,
    image_inputs,
    image_kind,
    image_token,
)
from ..patches.idefics3 import _make_image_features
from ..weights.empty import empty_weights
from .speech import Piece
from .vision import decoder_piece

#: the image inputs a generic vision piece may take besides ``pixel_values``, in its signature's order
#: (InstructBLIP's Q-Former reads the prompt too, tokenized by its own tokenizer: ``qformer_*``)
EXTRA_IMAGE_INPUTS = ("image_sizes", "pixel_attention_mask", "pixel_mask", "spatial_shapes", "qformer_input_ids",
                      "qformer_attention_mask", "target_sizes")
#: the image kinds of :func:`fx2onnx.inputs.vlm_inputs.image_kind` a generic vision piece takes
GENERIC_KINDS = ("images", "image_sizes", "pixel_attention_mask", "pixel_mask", "naflex", "target_sizes")


class UnsplittableModel(ValueError):
    """An image-text-to-text model the generic split does not cover, with the reason."""


class GenericVisionPiece(torch.nn.Module):
    """``get_image_features`` on the image inputs: ``(rows, hidden)``, every image's features one
    after the other (a list of per-image tensors concatenated)."""

    def __init__(self, model: Any):
        super().__init__()
        # the base model, or the whole model when it has none (BLIP-2: its towers and language model side by
        # side); either way the parameters keep the checkpoint's names once "model." is removed
        self.model = model.model if has_base_model(model) else model
        self.base_model_prefix = "model"
        # the model's own get_image_features (not registered twice: its parameters are self.model's)
        object.__setattr__(self, "_owner", model)

    def forward(self, pixel_values: torch.Tensor, image_sizes: torch.Tensor | None = None,
                pixel_attention_mask: torch.Tensor | None = None, pixel_mask: torch.Tensor | None = None,
                spatial_shapes: torch.Tensor | None = None, qformer_input_ids: torch.Tensor | None = None,
                qformer_attention_mask: torch.Tensor | None = None,
                target_sizes: torch.Tensor | None = None) -> torch.Tensor:
        extras = {"image_sizes": image_sizes, "pixel_attention_mask": pixel_attention_mask,
                  "pixel_mask": pixel_mask, "spatial_shapes": spatial_shapes, "qformer_input_ids": qformer_input_ids,
                  "qformer_attention_mask": qformer_attention_mask, "target_sizes": target_sizes}
        return flat_image_features(one_tensor_features_function(self._owner), pixel_values,
                                   **{k: v for k, v in extras.items() if v is not None})


def one_tensor_features_function(model: Any) -> Any:
    """``get_image_features`` of ``model``, or, where it splits the features per prompt with ``tolist()``
    (Idefics 3's copy in SmolVLM, which torch.export's batch cannot follow: the capture specialized it), the
    replacement of :mod:`fx2onnx.patches.idefics3` on its base model: the same features as one tensor."""
    fn = image_features_function(model)
    for owner in (model, getattr(model, "model", None)):  # the model's, or its base model's (which it calls)
        try:
            source = inspect.getsource(inspect.unwrap(type(owner).get_image_features))
        except (OSError, TypeError, AttributeError):
            continue
        if "num_real_images_per_batch.tolist()" in source and hasattr(owner, "connector"):
            return functools.partial(_make_image_features(owner.get_image_features), owner)
    return fn


def has_base_model(model: Any) -> bool:
    """Whether ``model`` has a base model with token embeddings and an ``lm_head`` (LLaVA's layout), not
    a causal language model beside its towers (BLIP-2's ``language_model``)."""
    return hasattr(getattr(model, "model", None), "get_input_embeddings") and hasattr(model, "lm_head")


def _causal_language_model(model: Any) -> Any:
    """BLIP-2's layout: ``model.language_model``, a decoder-only causal language model with its head, or None."""
    language = getattr(model, "language_model", None)
    if language is None or not callable(getattr(language, "get_output_embeddings", None)):
        return None
    if language.get_output_embeddings() is None or getattr(language.config, "is_encoder_decoder", False):
        return None
    return language


class LanguageModelDecoderPiece(torch.nn.Module):
    """The decoder of BLIP-2's layout: the token embeddings, the image features written over the
    placeholders, then the causal language model (its head on the last position)."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model
        self.base_model_prefix = "model"

        self.image_token_id = int(image_token(model.config))

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, image_features):
        embeds = self.model.get_input_embeddings()(input_ids)
        mask = (input_ids == self.image_token_id).unsqueeze(-1).expand_as(embeds)
        embeds = embeds.masked_scatter(mask, image_features.to(embeds.dtype))
        out = self.model.language_model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids,
                                        past_key_values=past_key_values, use_cache=True, logits_to_keep=1)
        return {"logits": out.logits[:, -1:], "past_key_values": out.past_key_values}


def split_reason(model: Any, config: Any) -> str | None:
    """Why ``model`` cannot be split into a vision piece and a decoder writing its features over
    placeholder tokens, None when it can."""

    if image_token(config) is None:
        return "its configuration names no image placeholder token (the image is not written over the prompt)"
    if image_features_function(model) is None:
        return "it has no get_image_features"
    if not has_base_model(model) and _causal_language_model(model) is None:
        return ("it has no base model with token embeddings and an lm_head, nor a decoder-only language_model with "
                "its head (BLIP-2's)")
    if per_layer_input_size(config):
        return ("its language model adds per-layer embeddings looked up from the token ids (hidden_size_per_layer_input, "
                "Gemma 3n's and Gemma 4's), which the decoder piece, fed the prompt's embeddings with the image features "
                "written over the placeholders, does not compute")
    kind = image_kind(model)
    if kind not in GENERIC_KINDS:
        return f"its images are {kind!r} inputs (patches of a grid), split only for the Qwen-VL family"
    if getattr(config, "is_encoder_decoder", False):
        return "it is an encoder-decoder"
    recurrent = recurrent_layer_types(config)
    if recurrent:
        return (f"its language model has {', '.join(recurrent)} layers (a recurrent state, not a key/value cache): "
                "the decoder piece takes a key/value cache only")
    return None


def per_layer_input_size(config: Any) -> int:
    """The width of the per-layer embeddings the text model looks up from the token ids (Gemma 3n's, Gemma 4's
    ``hidden_size_per_layer_input``; 0 without)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "hidden_size_per_layer_input", 0) or 0)


#: the layer types which keep a recurrent state instead of keys and values (linear attention, Mamba, short convolutions)
RECURRENT_LAYER_TYPES = ("linear_attention", "mamba", "conv")


def recurrent_layer_types(config: Any) -> list[str]:
    """The layer types of the text model which keep a recurrent state (Qwen3.5's ``linear_attention``)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    types = getattr(text, "layer_types", None) or []
    return sorted({t for t in types if isinstance(t, str) and t in RECURRENT_LAYER_TYPES})


#: the image inputs of a tiled processor (Idefics 3's: ``(prompts, tiles, 3, H, W)`` and its mask), tiles on dim 1
TILED_INPUTS = ("pixel_values", "pixel_attention_mask")


def tiled(inputs: dict[str, Any]) -> bool:
    """Whether image ``inputs`` are a tiled processor's (tiles and the mask of their pixels: Idefics 3's, SmolVLM's;
    not LLaVA-NeXT's patches, counted from ``image_sizes``)."""
    return inputs["pixel_values"].dim() == 5 and "pixel_attention_mask" in inputs


def with_tiles(tensor: torch.Tensor, count: int) -> torch.Tensor:
    """``tensor``'s first tile and ``count - 1`` more (the first one's pixels reversed), tiles on dim 1: example
    inputs with as many tiles as a processor splitting an image gives, a count the capture keeps dynamic."""
    first = tensor[:, :1]
    return torch.cat([first, *[first.flip(-1) for _ in range(count - 1)]], dim=1)


def generic_vision_pieces(model: Any, config: Any, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[Piece]:
    """The vision and decoder pieces of an image-text-to-text model with a placeholder token and
    ``get_image_features`` (:func:`split_reason` is None), with example inputs of two shapes: two
    images then three for the vision piece, the decoder on a prompt holding one image's placeholders
    then on two later tokens.

    :raises UnsplittableModel: with :func:`split_reason`
    """
    def refuse(reason: str) -> UnsplittableModel:
        return UnsplittableModel(f"{type(model).__name__} (image-text-to-text) cannot be split into a vision piece "
                                 f"and a decoder: {reason}.")

    reason = split_reason(model, config)
    if reason:
        raise refuse(reason)

    def images(count: int, seed: int) -> dict[str, Any]:
        inputs, _, _ = image_inputs(model, config, count, seed)
        inputs = {k: v for k, v in inputs.items() if k == "pixel_values" or k in EXTRA_IMAGE_INPUTS}
        if "qformer_input_ids" in inspect.signature(inspect.unwrap(image_features_function(model))).parameters:
            # InstructBLIP: the prompt of each image, tokenized for its Q-Former (of another length in each set)
            ids = torch.randint(3, 16, (count, 3 + count), generator=torch.Generator().manual_seed(seed))
            inputs.update(qformer_input_ids=ids, qformer_attention_mask=torch.ones_like(ids))
        if tiled(inputs):  # Idefics 3's tiles (SmolVLM): a count of its own in each set
            inputs = {k: with_tiles(v, count) if k in TILED_INPUTS else v for k, v in inputs.items()}
        return {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}

    try:
        first, second = images(2, seed), images(3, seed + 1)
        # a model on the meta device (its weights streamed from a checkpoint) runs on uninitialized CPU storage:
        # the values are garbage, the number of features is the model's (the meta device refuses .item())
        meta = any(p.is_meta for p in model.parameters())
        with torch.no_grad(), empty_weights(model) if meta else contextlib.nullcontext():
            per_image = features_per_image(model, {k: v.float() if v.is_floating_point() else v
                                                   for k, v in first.items()}, 2)
    except Exception as e:  # noqa: BLE001 - said in one line
        raise refuse(f"its get_image_features did not run on example images without reading their values "
                     f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None
    names = [n for n in ("pixel_values", *EXTRA_IMAGE_INPUTS) if n in first]
    shapes = {n: {0: "images", **({1: "qformer_seq"} if n.startswith("qformer_") else {}),
                  **({1: "tiles"} if n in TILED_INPUTS and tiled(first) else {})} for n in names}
    if "target_sizes" in names:  # MiniCPM-V: every image's patches packed in one row
        shapes["pixel_values"] = {3: "patches"}
    vision = Piece("vision", "vision.onnx", GenericVisionPiece(model), first, second, shapes, names,
                   ["image_features"])
    g = torch.Generator().manual_seed(seed)
    module = None if has_base_model(model) else LanguageModelDecoderPiece(model)
    return [vision, decoder_piece(model, config, dtype, g, per_image, module=module)]
