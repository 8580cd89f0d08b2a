"""The split of an image-text-to-text folder transformers.js loads (its ``ImageTextToText`` sessions).

transformers.js runs a model of its image-text-to-text list as three files under ``onnx/``, the image written over
the placeholders in JavaScript between them:

* ``vision_encoder.onnx``: ``pixel_values`` -> ``image_features (rows, hidden)``; the vision piece of the folder
  (:class:`fx2onnx.deploy.vision.VisionPiece`), one file our loop reads too, but for Idefics 3
  (:class:`TiledVisionPiece` on the processor's ``(prompts, tiles, 3, H, W)``, our loop's on the tiles);
* ``embed_tokens.onnx``: ``input_ids`` -> ``inputs_embeds``, the token embeddings;
* ``decoder_model_merged.onnx``: ``inputs_embeds``, ``attention_mask``, ``position_ids`` and the cache named as
  optimum names it (``past_key_values.N.key``) -> ``logits`` of the last position and ``present.N.key``, the
  present fed back at the next step (never updated in place: transformers.js binds no buffer).

Our loop keeps its decoder (``decoder.onnx``: the merge in the graph, the cache in place), so the text weights are
written twice; :data:`SPLIT_MODEL_TYPES` lists the families written so (LLaVA: transformers.js' merge is the model's,
the features over every ``<image>`` placeholder in order; Qwen2-VL and Qwen2.5-VL: the decoder's three rows of
positions computed by transformers.js, Qwen2-VL's grid named ``grid_thw`` as transformers.js feeds it; Mistral 3;
Idefics 3; Gemma 3). Gemma 3's image tokens attend to each other in both directions, which a decoder fed
``inputs_embeds`` alone cannot know: its embeddings for transformers.js carry one more column
(:data:`FLAGGED_MODEL_TYPES`), 0 on the tokens' rows (``embed_tokens.onnx``) and 1 on the image features' rows (its own
``vision_encoder.onnx``), which transformers.js' merge copies with the row; the decoder reads the image tokens from it
(``token_type_ids``) and drops it. transformers.js counts Gemma 3's positions from 1: its decoder subtracts 1
(:data:`POSITION_START`). Its sliding layers keep their whole cache there (the window in the mask): transformers.js
reads the length of the cache from the first layer's. PaliGemma (through the generic pieces,
:mod:`fx2onnx.deploy.image_text_generic`) is a prefix language model: its prompt attends to itself in both
directions (:func:`prefix_mask`). Qwen3-VL's deepstack features, which its decoder adds to the image's rows of its
first layers, ride in more columns of the embeddings (:data:`STACKED_MODEL_TYPES`: zeros on the tokens' rows, so the
decoder adds them to every row; Qwen3-VL-MoE's too, its decoder the mixture of experts). SmolVLM's vision encoder
is its generic vision piece (:mod:`fx2onnx.deploy.image_text_generic`) on the processor's tiles ``(prompts, tiles, 3,
H, W)`` and its boolean ``pixel_attention_mask``, the inputs transformers.js' Idefics 3 processor makes; LightOnOCR's
is Mistral 3's (:mod:`fx2onnx.deploy.pixtral`). GLM-OCR's pieces are Qwen2.5-VL's (transformers.js runs it as one,
its positions grouped by image placeholder). Not split yet: LLaVA-OneVision and LFM2-VL, whose vision pieces take one
image at a time in our loop (:mod:`fx2onnx.deploy.anyres`, :mod:`fx2onnx.deploy.naflex`): transformers.js gives
LLaVA-OneVision's vision encoder ``pixel_values`` alone (no ``image_sizes``: no grid, no crop) and LFM2-VL's every
tile's padded patches at once (a loop over the tiles, each of its own grid, in the graph); Gemma 3n and Gemma 4,
which transformers.js loads with an ``audio_encoder.onnx`` beside the vision encoder and whose ``embed_tokens.onnx``
returns ``per_layer_inputs`` too (their folders are refused first: the decoder piece does not compute the per-layer
embeddings, :func:`fx2onnx.deploy.image_text_generic.split_reason`).

.. code-block:: python

    from fx2onnx.deploy.transformersjs_split import with_transformersjs_split

    vision, decoder, embed, merged = with_transformersjs_split([vision, decoder], model, config)
"""

from __future__ import annotations

import copy
import types
from typing import Any

import torch

from ..inputs.vlm_inputs import image_token
from .qwen_vl import QwenVisionPiece, _dense_deepstack
from .speech import Piece
from .vision import VisionPiece, last_logits

#: the model types whose folder gets transformers.js' split beside our decoder
SPLIT_MODEL_TYPES = ("llava", "qwen2_vl", "qwen2_5_vl", "mistral3", "idefics3", "gemma3", "paligemma", "qwen3_vl",
                     "smolvlm", "lighton_ocr", "qwen3_vl_moe", "glm_ocr")
#: the model types whose vision encoder for transformers.js is its own piece (:class:`TiledVisionPiece`): Idefics 3,
#: fed the processor's ``pixel_values (prompts, tiles, 3, H, W)`` by transformers.js, our loop the tiles only
TILED_MODEL_TYPES = ("idefics3",)
#: the model types whose embeddings for transformers.js carry a last column marking the image features' rows (1) from
#: the tokens' (0), the vision encoder its own piece (:class:`FlaggedVisionPiece`): Gemma 3, whose image tokens attend
#: to each other in both directions (``token_type_ids``)
FLAGGED_MODEL_TYPES = ("gemma3",)
#: the model types whose vision features added to the first layers of the decoder (Qwen3-VL's deepstack) ride in
#: more columns of the embeddings for transformers.js (:class:`StackedVisionPiece`), zeros on the tokens' rows
STACKED_MODEL_TYPES = ("qwen3_vl", "qwen3_vl_moe")
#: the prefix language models: the prompt (the image and the text, transformers' ``token_type_ids`` of 0 from the
#: processor) attends to itself in both directions, the tokens generated after it causally (PaliGemma)
PREFIX_MODEL_TYPES = ("paligemma",)
#: where transformers.js starts the positions it computes for a model type (0 elsewhere, as transformers)
POSITION_START = {"gemma3": 1}
#: the inputs of the vision piece transformers.js names otherwise (Qwen2-VL's grid; our loop feeds either name)
VISION_INPUT_NAMES = {"qwen2_vl": {"image_grid_thw": "grid_thw"}}
#: the pieces written for transformers.js only (not for weights it cannot run: bfloat16)
SPLIT_PIECES = ("embed_tokens", "decoder_model_merged", "vision_encoder")
#: the file of the vision piece where transformers.js reads it
VISION_ENCODER_FILE = "onnx/vision_encoder.onnx"


def has_transformersjs_split(config: Any) -> bool:
    """Whether a folder of ``config`` gets transformers.js' image-text split."""
    return getattr(config, "model_type", None) in SPLIT_MODEL_TYPES


def with_transformersjs_split(pieces: list[Piece], model: Any, config: Any, seed: int = 0) -> list[Piece]:
    """``pieces`` (our vision piece and decoder), the vision piece moved where transformers.js reads it and its
    ``embed_tokens`` and ``decoder_model_merged`` added, for a model of :data:`SPLIT_MODEL_TYPES`; unchanged
    otherwise."""
    if not has_transformersjs_split(config):
        return pieces
    vision, decoder = pieces
    split = transformersjs_pieces(model, config, decoder, seed)
    if config.model_type in FLAGGED_MODEL_TYPES + STACKED_MODEL_TYPES:
        module = FlaggedVisionPiece(model) if config.model_type in FLAGGED_MODEL_TYPES else StackedVisionPiece(model)
        return [vision, decoder, *split,
                Piece("vision_encoder", VISION_ENCODER_FILE, module, vision.inputs, vision.inputs2,
                      vision.dynamic_shapes, list(vision.input_names), ["image_features"])]
    if config.model_type in TILED_MODEL_TYPES:
        def tiles(inputs: dict[str, Any], prompts: int) -> dict[str, Any]:
            pixels = inputs["pixel_values"]
            return {"pixel_values": pixels[None].expand(prompts, *pixels.shape).contiguous()}

        return [vision, decoder, *split,
                Piece("vision_encoder", VISION_ENCODER_FILE, TiledVisionPiece(model), tiles(vision.inputs, 1),
                      tiles(vision.inputs2, 2), {"pixel_values": {0: "prompts", 1: "tiles"}}, ["pixel_values"],
                      ["image_features"])]
    vision.filename = VISION_ENCODER_FILE
    renames = VISION_INPUT_NAMES.get(config.model_type, {})
    vision.input_names = [renames.get(name, name) for name in vision.input_names]
    return [vision, decoder, *split]


class TiledVisionPiece(VisionPiece):
    """:class:`fx2onnx.deploy.vision.VisionPiece` on the tiles of every prompt, ``(prompts, tiles, 3, H, W)``."""

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return super().forward(pixel_values.flatten(0, 1))


class FlaggedVisionPiece(VisionPiece):
    """:class:`fx2onnx.deploy.vision.VisionPiece` with a last column of ones: the rows of the image features."""

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return with_flag(super().forward(pixel_values), 1.0)


class StackedVisionPiece(QwenVisionPiece):
    """:class:`fx2onnx.deploy.qwen_vl.QwenVisionPiece` of Qwen3-VL, its deepstack features as more columns:
    ``(rows, hidden * (1 + deepstack))``."""

    def forward(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
        return torch.cat(super().forward(pixel_values, image_grid_thw), dim=-1)


def deepstack_count(config: Any) -> int:
    """The number of deepstack features of a Qwen3-VL ``config`` (0 for another model)."""
    if config.model_type not in STACKED_MODEL_TYPES:
        return 0
    vision = config.vision_config
    return len([i for i in getattr(vision, "deepstack_visual_indexes", None) or () if i < vision.depth])


def with_flag(embeds: torch.Tensor, value: float) -> torch.Tensor:
    """``embeds (..., hidden)`` with one more column of ``value``."""
    return torch.cat([embeds, torch.full_like(embeds[..., :1], value)], dim=-1)


class EmbedTokensPiece(torch.nn.Module):
    """The token embeddings: ``input_ids -> inputs_embeds`` (:data:`FLAGGED_MODEL_TYPES`: a last column of zeros)."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model.model
        self.base_model_prefix = "model"
        self.flagged = model.config.model_type in FLAGGED_MODEL_TYPES
        self.stacked = deepstack_count(model.config)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeds = self.model.get_input_embeddings()(input_ids)
        if self.stacked:  # no deepstack feature on a token's row
            return torch.cat([embeds, embeds.new_zeros(*embeds.shape[:-1], embeds.shape[-1] * self.stacked)], dim=-1)
        return with_flag(embeds, 0.0) if self.flagged else embeds


class EmbedsDecoderPiece(torch.nn.Module):
    """The language model and its head on embeddings the caller merged: the logits of the last position and the
    new cache. :data:`FLAGGED_MODEL_TYPES`: the image tokens read from the embeddings' last column
    (``token_type_ids`` of the model's own mask); the positions as transformers.js counts them
    (:data:`POSITION_START`)."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model.model
        self.lm_head = model.lm_head
        self.base_model_prefix = "model"
        self.flagged = model.config.model_type in FLAGGED_MODEL_TYPES
        self.prefix = model.config.model_type in PREFIX_MODEL_TYPES
        self.position_start = POSITION_START.get(model.config.model_type, 0)
        self.stacked = deepstack_count(model.config)
        if self.stacked:  # the deepstack features added without a boolean index
            text = self.model.language_model
            text._deepstack_process = types.MethodType(_dense_deepstack, text)

    def forward(self, inputs_embeds, attention_mask, position_ids, past_key_values):
        if self.position_start:
            position_ids = position_ids - self.position_start
        if self.stacked:
            # the deepstack features in the columns after the embeddings: added to every row (zeros on the tokens')
            chunks = inputs_embeds.chunk(1 + self.stacked, dim=-1)
            rows = torch.ones_like(inputs_embeds[..., 0], dtype=torch.bool)
            out = self.model.language_model(
                inputs_embeds=chunks[0], attention_mask=attention_mask, position_ids=position_ids,
                past_key_values=past_key_values, use_cache=True, visual_pos_masks=rows,
                deepstack_visual_embeds=[c.reshape(-1, c.shape[-1]) for c in chunks[1:]])
        elif self.flagged:
            token_types = (inputs_embeds[..., -1] > 0.5).to(torch.int64)
            out = self.model(inputs_embeds=inputs_embeds[..., :-1], attention_mask=attention_mask,
                             position_ids=position_ids, past_key_values=past_key_values, use_cache=True,
                             token_type_ids=token_types)
        else:
            text = getattr(self.model, "language_model", None) or self.model.text_model
            if self.prefix:
                attention_mask = prefix_mask(self.model.config.get_text_config(), inputs_embeds, attention_mask,
                                             past_key_values, position_ids)
            out = text(inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=position_ids,
                       past_key_values=past_key_values, use_cache=True)
        return {"logits": last_logits(self.lm_head, out.last_hidden_state), "past_key_values": out.past_key_values}


def prefix_mask(config: Any, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, past_key_values: Any,
                position_ids: torch.Tensor) -> Any:
    """The masks of a prefix language model (:data:`PREFIX_MODEL_TYPES`) fed only embeddings: the positions of this
    call form one block attending to itself in both directions, which transformers' mask extends to the cache's
    length as causal. So a prompt (no cache) is its own prefix, as transformers runs the processor's
    ``token_type_ids`` of 0 on it; one token after it attends causally (``token_type_ids`` ignored after the prompt);
    ``{"full_attention", "sliding_attention"}`` for a text model of a sliding window (PaliGemma 2)."""
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask  # deferred: heavy

    kwargs = dict(config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                  past_key_values=past_key_values, position_ids=position_ids,
                  block_sequence_ids=torch.zeros_like(inputs_embeds[..., 0], dtype=torch.int64))
    mask = create_causal_mask(**kwargs)
    if getattr(config, "sliding_window", None) is None:
        return mask
    return {"full_attention": mask, "sliding_attention": create_sliding_window_causal_mask(**kwargs)}


#: the inputs of our decoder that transformers.js' decoder takes as embeddings
FEATURE_INPUTS = ("input_ids", "image_features", "deepstack_features")


def transformersjs_pieces(model: Any, config: Any, decoder: Piece, seed: int = 0) -> list[Piece]:
    """The ``embed_tokens`` and ``decoder_model_merged`` pieces of ``model``, with the input sets of our ``decoder``
    piece (:func:`fx2onnx.deploy.vision.decoder_piece`): its token ids for the embeddings, embeddings of their shape
    for the decoder (the image features are the caller's; :data:`FLAGGED_MODEL_TYPES`: the column marking the
    placeholders' rows, every layer's cache whole)."""
    hidden = config.get_text_config().hidden_size
    g = torch.Generator().manual_seed(seed)
    dtype = decoder.inputs["image_features"].dtype
    flagged = config.model_type in FLAGGED_MODEL_TYPES
    start = POSITION_START.get(config.model_type, 0)
    # transformers.js reads the cache's length from the first layer's: a sliding layer keeps its whole cache
    whole = "sliding_attention" in (getattr(config.get_text_config(), "layer_types", None) or [])

    def embeds(inputs: dict[str, Any]) -> dict[str, Any]:
        ids = inputs["input_ids"]
        out = copy.deepcopy({k: v for k, v in inputs.items() if k not in FEATURE_INPUTS})
        out["position_ids"] = out["position_ids"] + start
        embeds = torch.randn(*ids.shape, hidden * (1 + deepstack_count(config)), generator=g)
        if flagged:
            embeds = torch.cat([embeds, (ids == image_token(config)).to(embeds.dtype)[..., None]], dim=-1)
        if whole:
            out["past_key_values"] = whole_cache(out["past_key_values"])
        return {"inputs_embeds": embeds.to(dtype), **out}

    shapes = {k: v for k, v in decoder.dynamic_shapes.items() if k not in FEATURE_INPUTS}
    if whole:
        shapes["past_key_values"] = [{0: "batch", 2: "past_seq"} for _ in shapes["past_key_values"]]
    embed = Piece("embed_tokens", "onnx/embed_tokens.onnx", EmbedTokensPiece(model),
                  {"input_ids": decoder.inputs["input_ids"]}, {"input_ids": decoder.inputs2["input_ids"]},
                  {"input_ids": decoder.dynamic_shapes["input_ids"]}, ["input_ids"], ["inputs_embeds"])
    merged = Piece("decoder_model_merged", "onnx/decoder_model_merged.onnx", EmbedsDecoderPiece(model),
                   embeds(decoder.inputs), embeds(decoder.inputs2),
                   {"inputs_embeds": decoder.dynamic_shapes["input_ids"], **shapes}, [], [], {})
    return [embed, merged]


def whole_cache(cache: Any) -> Any:
    """``cache`` (a ``DynamicCache``) with every layer keeping all its positions, a sliding window's too (the window
    applied by the mask)."""
    from transformers.cache_utils import DynamicCache  # deferred: transformers is heavy

    return DynamicCache([(layer.keys, layer.values) for layer in cache.layers])
