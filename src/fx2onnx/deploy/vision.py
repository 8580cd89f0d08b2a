"""The pieces of an image-text-to-text folder (LLaVA, Gemma 3, Idefics 3; Qwen2-VL, Qwen2.5-VL and
Qwen3-VL in :mod:`fx2onnx.deploy.qwen_vl`, Mistral 3 in :mod:`fx2onnx.deploy.pixtral`): a vision
encoder and a decoder with its cache.

* ``vision.onnx``: ``pixel_values (images, 3, H, W)`` -> ``image_features (rows, hidden)``, the
  vision tower and the projector, the features of every image one after the other (LLaVA's
  selection of layers and of the class token, Gemma 3's pooling, Idefics 3's connector on every
  tile: :func:`fx2onnx.zoo.vlm.image_features`);
* ``decoder.onnx``: ``input_ids``, ``attention_mask``, ``position_ids``, the cache and
  ``image_features`` -> ``logits`` and the new cache. The merge is **in the graph**: the token
  embeddings, then the image features written over the ``<image>`` placeholders in order (the
  model's own ``masked_scatter``). A step after the prompt has no placeholder and the features
  are fed unchanged (an input of :class:`fx2onnx.runtime.OnnxGenerator`'s ``constant_inputs``,
  in onnxruntime memory, never copied): one decoder graph for the prompt and every later token.
  Gemma 3's decoder also marks the image tokens (``token_type_ids`` computed from the ids) for
  the model's own mask: the tokens of one image attend to each other in both directions; the
  cache of its sliding layers has its own length (``sliding_seq``).

Both are :class:`torch.nn.Module` wrappers whose parameters keep the checkpoint's names (the
weights streamed by :func:`fx2onnx.weights.to_onnx_from_checkpoint`), each checked against
the same wrapper in eager float32.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..inputs.decoder import _decoder_inputs, _dynamic_shapes
from ..inputs.model_cache import model_caches
from ..inputs.vision_features import cache_dynamic_shapes, image_features
from ..inputs.vlm_inputs import image_token, text_token_range
from .._moved import moved_names
from .speech import Piece

#: the model types whose vision piece is :class:`VisionPiece` (the others but Qwen-VL and Mistral 3:
#: :mod:`fx2onnx.deploy.image_text_generic`)
OWN_PIECES_MODEL_TYPES = ("llava", "gemma3", "idefics3")
#: the model types whose decoder marks the image tokens (``token_type_ids``) for a bidirectional attention
TOKEN_TYPE_MODELS = ("gemma3",)
#: the model types whose decoder also writes features over the placeholders of videos (``video_token_id``): the
#: features of the images and videos in the order of their placeholders (the vision piece runs on both)
VIDEO_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")


class VisionPiece(torch.nn.Module):
    """The vision tower and the projector: ``pixel_values -> image_features (rows, hidden)``."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model.model
        self.base_model_prefix = "model"

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        features = image_features(self.model, pixel_values)
        return features.reshape(-1, features.shape[-1])


class ImageTextDecoderPiece(torch.nn.Module):
    """The text decoder on token ids whose ``<image>`` placeholders take the image features."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model.model
        self.lm_head = model.lm_head
        self.base_model_prefix = "model"

        self.image_token_id = int(image_token(model.config))
        self.token_types = model.config.model_type in TOKEN_TYPE_MODELS
        self.video_token_id = int(model.config.video_token_id) if model.config.model_type in VIDEO_MODEL_TYPES \
            else None

    def placeholders(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Where the features go: the image placeholders (and the video ones, :data:`VIDEO_MODEL_TYPES`)."""
        found = input_ids == self.image_token_id
        if self.video_token_id is not None:
            found = found | (input_ids == self.video_token_id)
        return found

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, image_features):
        embeds = self.model.get_input_embeddings()(input_ids)
        mask = self.placeholders(input_ids).unsqueeze(-1).expand_as(embeds)
        embeds = embeds.masked_scatter(mask, image_features.to(embeds.dtype))
        if self.token_types:
            # Gemma 3: the tokens of one image attend to each other in both directions (the model's
            # own mask from token_type_ids, 1 on the image tokens); none on a step after the prompt
            out = self.model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=past_key_values, use_cache=True,
                             token_type_ids=(input_ids == self.image_token_id).to(torch.int64))
        else:
            text = getattr(self.model, "language_model", None) or self.model.text_model  # Idefics 3: text_model
            out = text(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids,
                       past_key_values=past_key_values, use_cache=True)
        # a dict: the cache output has the path of the cache input (the fx2onnx.cache metadata pairs them)
        return {"logits": last_logits(self.lm_head, out.last_hidden_state), "past_key_values": out.past_key_values}


def last_logits(head: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The logits of the last position, ``(batch, 1, vocabulary)``: the loop reads nothing else (prompts
    are padded on the left), and a prompt of hundreds of image tokens runs the head once."""
    return head(hidden[:, -1:])


def image_tokens(config: Any) -> int:
    """The features of one image (LLaVA: the patches, the class token dropped by ``default``;
    Gemma 3: ``mm_tokens_per_image``, the patches pooled; Idefics 3: of one tile)."""
    if getattr(config, "mm_tokens_per_image", None):
        return int(config.mm_tokens_per_image)
    vision = config.vision_config
    if getattr(config, "scale_factor", None):  # Idefics 3: the patches of one tile shuffled into fewer rows
        return (vision.image_size // vision.patch_size) ** 2 // config.scale_factor ** 2
    patches = (vision.image_size // vision.patch_size) ** 2
    return patches + (0 if config.vision_feature_select_strategy == "default" else 1)


def decoder_piece(model: Any, config: Any, dtype: torch.dtype, g: torch.Generator, per_image: int,
                  position_rows: int = 0, deepstack: int = 0, token: int | None = None,
                  features: str = "image_features", module: torch.nn.Module | None = None) -> Piece:
    """The decoder piece of an image-text model with example inputs of two shapes (the first holding
    the placeholders of an image of ``per_image`` features); ``position_rows``: positions of shape
    ``(rows, batch, seq)`` (Qwen2-VL's 3), ``(batch, seq)`` when 0; ``deepstack``: the number of
    feature tensors added to the first layers (Qwen3-VL, whose caller gives its
    :class:`fx2onnx.deploy.qwen_vl.DeepstackDecoderPiece` as ``module``).
    Another modality (:mod:`fx2onnx.deploy.audio_text_generic`) gives its placeholder ``token``, the
    name of its ``features`` input and the ``module``."""

    text = config.get_text_config()
    token = image_token(config) if token is None else token
    _, high = text_token_range(config)

    sizes = ((2, per_image + 2, 3), (3, 1, 5))  # (batch, new tokens, past tokens) of the two example inputs
    states = recurrent_states(text, sizes, dtype, g)
    # with convolution states, the ids, mask and positions of a text model of attention layers (the cache replaced)
    kv_text = text if states is None else attention_only(text)

    def step(batch, seq, past, images):
        inputs = _decoder_inputs(kv_text, batch, seq, past, with_cache=True, position_ids=True, generator=g)
        inputs["input_ids"][:, :] = inputs["input_ids"].clamp(max=high - 1)  # below every special token
        rows = images * per_image
        if rows <= batch * seq:  # a prompt holding the images: their placeholders
            inputs["input_ids"].view(-1)[:rows] = token
        cache = inputs["past_key_values"]
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys.to(dtype), layer.values.to(dtype)
        inputs[features] = torch.randn(rows, text.hidden_size, generator=g).to(dtype)
        if position_rows:
            inputs["position_ids"] = inputs["position_ids"][None].repeat(position_rows, 1, 1)
        if deepstack:
            inputs["deepstack_features"] = [torch.randn(rows, text.hidden_size, generator=g).to(dtype)
                                            for _ in range(deepstack)]
        return inputs

    first, second = step(*sizes[0], 1), step(*sizes[1], 2)
    if states:  # convolution states beside the keys and values: the cache the text model returns
        (first["past_key_values"], second["past_key_values"]), state_shapes = states
    shapes = _dynamic_shapes({k: v for k, v in first.items() if k not in (features, "deepstack_features")}, text)
    shapes[features] = {0: features.replace("_features", "_rows")}
    if deepstack:
        shapes["deepstack_features"] = [{0: "image_rows"}] * deepstack
    if position_rows:
        shapes["position_ids"] = {1: "batch", 2: "seq"}
    layers = len(first["past_key_values"].layers)
    # a layer of a sliding window keeps fewer positions than the others once the prompt is longer (Gemma 3)
    shapes["past_key_values"] = state_shapes if states else cache_dynamic_shapes(text, layers)
    if module is None:
        module = ImageTextDecoderPiece(model)
    decoder = Piece("decoder", "decoder.onnx", module, first, second, shapes, [], [], {})
    decoder.layers = layers  # type: ignore[attr-defined]
    return decoder


#: the layer types of a text model which keep a state other than keys and values (LFM2's short convolutions)
STATE_LAYER_TYPES = ("conv",)


def recurrent_states(text: Any, sizes: tuple[tuple[int, int, int], ...], dtype: torch.dtype,
                     g: torch.Generator) -> tuple[list[Any], list[Any]] | None:
    """The example caches of a text model with layers of :data:`STATE_LAYER_TYPES` (LFM2-VL's language model mixes
    short convolutions with attention) and their dynamic shapes, read from a prefill of its causal LM as the
    text-generation folder reads them (:func:`fx2onnx.inputs.model_cache.model_caches`); None for a cache of keys
    and values only."""
    import transformers  # deferred: heavy

    if not set(getattr(text, "layer_types", None) or []) & set(STATE_LAYER_TYPES):
        return None
    causal = transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(text.model_type)
    if causal is None:
        raise ValueError(f"the text model {text.model_type!r} keeps convolution states and has no causal LM class "
                         "in transformers to read its cache from")
    text = copy.deepcopy(text)
    text.architectures = [causal]
    return model_caches(text, sizes, dtype, g)


def attention_only(text: Any) -> Any:
    """A copy of the text configuration ``text`` whose layers are all attention (example ids, mask and positions)."""
    text = copy.deepcopy(text)
    text.layer_types = ["full_attention"] * len(text.layer_types)
    return text


#: the dispatch of an image-text folder moved to :mod:`fx2onnx.deploy.image_text` (kept here for one release)
__getattr__ = moved_names(__name__, "fx2onnx.deploy.image_text", ("has_own_pieces", "vision_pieces", "export_vision_pieces"))
