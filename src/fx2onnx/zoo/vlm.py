"""A tiny vision-language model split the way generation runs it.

A vision-language model (LLaVA, Gemma 3) generates text in two parts: the vision encoder
with its projector turns the images into features once, then the text decoder
runs on embeddings where those features replace the image placeholder tokens,
first on the whole prompt (prefill), then one token at a time with its cache
(decode). Both parts are exported apart:

* :class:`VisionEncoder`: ``pixel_values [images, 3, H, W] -> [images, tokens, hidden]``,
* :class:`TextDecoder`: ``inputs_embeds, attention_mask, past_key_values -> logits,
  present`` (the cache flattened as ``[key_0, value_0, key_1, value_1, ...]``),

and :func:`merge_image_features` does what the model does between them: embed the
tokens and put the image features where the placeholder tokens are.
:func:`greedy_onnx` decodes with both parts on onnxruntime, :func:`greedy_eager`
with the model's own forward. :func:`tiny_llava` and :func:`tiny_gemma3` build the
models (Gemma 3's decoder also takes ``token_type_ids``: the tokens of one image
attend to each other in both directions).

.. code-block:: python

    import fx2onnx
    from fx2onnx.zoo.vlm import VisionEncoder, tiny_llava, vision_inputs

    vlm = tiny_llava()
    encoder = VisionEncoder(vlm.model)
    onx = fx2onnx.to_onnx(encoder, (vision_inputs(vlm, 2),), dynamic_shapes=({0: "images"},))

Everything is built from configurations in code with seeded random weights: no
download.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..convert.api import to_onnx
from ..inputs.vision_features import (  # noqa: F401
    _select_features,
    cache_dynamic_shapes,
    image_features,
)
from ..patches import torch_export_patches

#: token id of the image placeholder in the tiny models (the last of the vocabulary)
IMAGE_TOKEN_ID = 127


@dataclasses.dataclass
class TinyVLM:
    """A tiny vision-language model and what its inputs need.

    :param model: the ``...ForConditionalGeneration`` model, in eval mode
    :param image_token_id: the placeholder token an image's features replace
    :param tokens_per_image: the number of features (placeholder tokens) of one image
    :param image_size: height and width of the images
    :param num_layers: layers of the text decoder (the cache has ``2 * num_layers`` tensors)
    :param token_type_ids: the text decoder takes ``token_type_ids`` (1 for image tokens,
        Gemma 3: the tokens of an image attend to each other in both directions)
    """

    #: the ``...ForConditionalGeneration`` model, in eval mode
    model: torch.nn.Module
    #: the placeholder token an image's features replace
    image_token_id: int
    #: the number of features (placeholder tokens) of one image
    tokens_per_image: int
    #: height and width of the images
    image_size: int
    #: layers of the text decoder (the cache has ``2 * num_layers`` tensors)
    num_layers: int
    #: whether the text decoder takes ``token_type_ids`` (1 for image tokens)
    token_type_ids: bool = False

    @property
    def config(self) -> Any:
        """The model's configuration."""
        return self.model.config


def tiny_llava(seed: int = 0, num_layers: int = 1) -> TinyVLM:
    """A tiny ``LlavaForConditionalGeneration``: a Llama text model (hidden size 32,
    vocabulary 128) and a CLIP vision tower on 16x16 images in 4x4 patches
    (16 features per image once the class token is dropped)."""
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    text = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        use_cache=False,  # the one-pass forward returns no cache; TextDecoder asks for one
    )
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        image_size=16,
        patch_size=4,
        projection_dim=32,
    )
    config = LlavaConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=IMAGE_TOKEN_ID,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    return TinyVLM(model, IMAGE_TOKEN_ID, tokens_per_image=16, image_size=16, num_layers=num_layers)


def tiny_gemma3(seed: int = 0, num_layers: int = 2, sliding_window: int | None = None) -> TinyVLM:
    """A tiny ``Gemma3ForConditionalGeneration``: a Gemma 3 text model (hidden size 32,
    vocabulary 128) and a SigLIP vision tower on 16x16 images in 4x4 patches, pooled
    into 4 features per image.

    Every text layer attends to all tokens unless ``sliding_window`` is given: then
    the layers alternate a sliding layer of that window and a full one, as Gemma 3
    does; a sliding layer keeps at most ``sliding_window - 1`` positions, so its cache
    length has its own name in :func:`decoder_dynamic_shapes` (``sliding_seq``).
    """
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )

    if sliding_window is None:
        layer_types = ["full_attention"] * num_layers
    else:
        layer_types = ["sliding_attention", "full_attention"] * num_layers
    text = Gemma3TextConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        pad_token_id=0,
        sliding_window=sliding_window or 256,
        layer_types=layer_types[:num_layers],
        use_cache=False,
    )
    vision = SiglipVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, image_size=16, patch_size=4
    )
    config = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=4,
        image_token_id=IMAGE_TOKEN_ID,
        boi_token_index=IMAGE_TOKEN_ID - 2,
        eoi_token_index=IMAGE_TOKEN_ID - 1,
    )
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config).eval()
    return TinyVLM(model, IMAGE_TOKEN_ID, tokens_per_image=4, image_size=16, num_layers=num_layers, token_type_ids=True)


def vision_inputs(vlm: TinyVLM, images: int, seed: int = 0) -> torch.Tensor:
    """Random ``pixel_values`` for ``images`` images."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(images, 3, vlm.image_size, vlm.image_size, generator=generator)


def prompt_ids(vlm: TinyVLM, batch: int, images_per_prompt: int, text_tokens: int, seed: int = 0) -> torch.Tensor:
    """Token ids ``[batch, seq]``: a first text token, the placeholders of
    ``images_per_prompt`` images, then ``text_tokens - 1`` text tokens
    (random ids, never the placeholder)."""
    if text_tokens < 1:
        raise ValueError(f"text_tokens must be at least 1, got {text_tokens}")
    generator = torch.Generator().manual_seed(seed)
    n_image = images_per_prompt * vlm.tokens_per_image
    ids = torch.randint(1, vlm.image_token_id - 2, (batch, text_tokens + n_image), generator=generator)
    ids[:, 1 : 1 + n_image] = vlm.image_token_id
    return ids


def one_pass_inputs(vlm: TinyVLM, batch: int, images_per_prompt: int, text_tokens: int, seed: int = 0) -> dict[str, Any]:
    """Inputs of the model's own forward: ids, attention mask and the pixels of
    ``batch * images_per_prompt`` images."""
    ids = prompt_ids(vlm, batch, images_per_prompt, text_tokens, seed)
    inputs = {
        "input_ids": ids,
        "pixel_values": vision_inputs(vlm, batch * images_per_prompt, seed),
        "attention_mask": torch.ones_like(ids),
    }
    if vlm.token_type_ids:
        inputs["token_type_ids"] = image_token_types(vlm, ids)
    return inputs


def image_token_types(vlm: TinyVLM, input_ids: torch.Tensor) -> torch.Tensor:
    """``token_type_ids``: 1 where the image placeholders are, 0 elsewhere."""
    return (input_ids == vlm.image_token_id).to(torch.int64)


class VisionEncoder(torch.nn.Module):
    """The vision tower and the projector of a vision-language model:
    ``pixel_values [images, 3, H, W] -> image features [images, tokens, hidden]``.

    For LLaVA, it computes what ``get_image_features`` computes but returns one
    tensor instead of a list per image, so the number of images stays a dimension;
    for the other models (Gemma 3), it returns ``get_image_features``'s tensor.
    """

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return image_features(self.model.model, pixel_values)


class TextDecoder(torch.nn.Module):
    """The text decoder of a vision-language model, on embeddings:
    ``(inputs_embeds, attention_mask, past_key_values) -> (logits, present)``.

    ``past_key_values`` is a ``DynamicCache`` (possibly empty, for the prefill);
    the outputs are the logits and the updated cache. ``token_type_ids`` (Gemma 3)
    marks the image tokens, which attend to each other in both directions.
    """

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor,
        past_key_values: Any,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        outputs = self.model(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            use_cache=True,
            **extra,
        )
        return outputs.logits, outputs.past_key_values


def merge_image_features(
    model: torch.nn.Module, input_ids: torch.Tensor, image_features: torch.Tensor, image_token_id: int
) -> torch.Tensor:
    """Embeds ``input_ids`` and writes the image features over the placeholder tokens,
    in order (the first image's features over the first placeholders), as the model's
    forward does. Raises a ValueError when the counts differ."""
    embeds = model.get_input_embeddings()(input_ids)
    mask = input_ids == image_token_id
    features = image_features.reshape(-1, embeds.shape[-1]).to(embeds.dtype)
    if int(mask.sum()) != features.shape[0]:
        raise ValueError(
            f"{int(mask.sum())} image placeholder tokens but {features.shape[0]} image features "
            f"({tuple(image_features.shape)}): give one image per block of placeholders."
        )
    return embeds.masked_scatter(mask.unsqueeze(-1), features)


def empty_cache(vlm: TinyVLM, batch: int, dtype: torch.dtype = torch.float32) -> Any:
    """A ``DynamicCache`` holding no token yet, the cache of a prefill."""
    return random_cache(vlm, batch, 0, dtype=dtype)


def random_cache(vlm: TinyVLM, batch: int, past: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> Any:
    """A ``DynamicCache`` of ``past`` tokens with random keys and values."""
    from transformers.cache_utils import DynamicCache

    text = vlm.config.text_config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    shape = (batch, text.num_key_value_heads, past, head_dim)
    generator = torch.Generator().manual_seed(seed)
    pairs = [
        (torch.randn(shape, generator=generator, dtype=dtype), torch.randn(shape, generator=generator, dtype=dtype))
        for _ in range(vlm.num_layers)
    ]
    return DynamicCache(pairs, config=text)


def decoder_inputs(vlm: TinyVLM, batch: int, seq: int, past: int, seed: int = 0) -> dict[str, Any]:
    """Random inputs of :class:`TextDecoder`: embeddings of ``seq`` new tokens, a mask
    over ``past + seq`` tokens and a cache of ``past`` tokens."""
    generator = torch.Generator().manual_seed(seed + 1)
    hidden = vlm.config.text_config.hidden_size
    inputs = {
        "inputs_embeds": torch.randn(batch, seq, hidden, generator=generator),
        "attention_mask": torch.ones(batch, past + seq, dtype=torch.int64),
        "past_key_values": random_cache(vlm, batch, past, seed),
    }
    if vlm.token_type_ids:
        # a block of image tokens in the middle of the new tokens when there are enough
        types = torch.zeros(batch, seq, dtype=torch.int64)
        types[:, 1 : max(1, seq - 1)] = 1
        inputs["token_type_ids"] = types
    return inputs


def decoder_dynamic_shapes(vlm: TinyVLM) -> dict[str, Any]:
    """Dynamic shapes of :class:`TextDecoder`: ``batch``, ``seq``, ``past_seq``,
    ``total_seq`` (the mask) and ``sliding_seq`` for the layers of a sliding window
    (their cache stops growing at the window: one name for both lengths would tell
    onnxruntime they are equal, and they are not once the cache is longer than the window)."""
    shapes = {
        "inputs_embeds": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total_seq"},
        "past_key_values": cache_dynamic_shapes(vlm.config.text_config, vlm.num_layers),
    }
    if vlm.token_type_ids:
        shapes["token_type_ids"] = {0: "batch", 1: "seq"}
    return shapes


def decoder_output_names(vlm: TinyVLM) -> list[str]:
    """``logits`` then ``present_key_i``, ``present_value_i`` for every layer."""
    names = ["logits"]
    for i in range(vlm.num_layers):
        names.extend([f"present_key_{i}", f"present_value_{i}"])
    return names


def export_vision_encoder(vlm: TinyVLM, images: int = 2, **kwargs: Any) -> Any:
    """Exports :class:`VisionEncoder` with :func:`fx2onnx.to_onnx`, the number of
    images dynamic (``images``); ``kwargs`` go to ``to_onnx``."""

    return to_onnx(
        VisionEncoder(vlm.model),
        (vision_inputs(vlm, images),),
        dynamic_shapes=({0: "images"},),
        input_names=["pixel_values"],
        output_names=["image_features"],
        **kwargs,
    )


def export_text_decoder(vlm: TinyVLM, batch: int = 2, seq: int = 3, past: int = 4, **kwargs: Any) -> Any:
    """Exports :class:`TextDecoder` with :func:`fx2onnx.to_onnx` inside
    :func:`fx2onnx.torch_export_patches`, batch, sequence and cache length dynamic;
    the example cache is not empty (a cache of length 0 would be specialized) but the
    model takes one of length 0 for the prefill."""

    with torch_export_patches(patch_transformers=True) as modificator:
        return to_onnx(
            TextDecoder(vlm.model),
            (),
            kwargs=modificator(decoder_inputs(vlm, batch, seq, past)),
            dynamic_shapes=decoder_dynamic_shapes(vlm),
            output_names=decoder_output_names(vlm),
            **kwargs,
        )


def greedy_eager(vlm: TinyVLM, input_ids: torch.Tensor, pixel_values: torch.Tensor, steps: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Greedy decoding with the model's own forward: a prefill on the prompt and
    the images, then one token per step with the cache. Returns the tokens
    ``[batch, steps]`` and the last-position logits of every step."""
    from transformers.cache_utils import DynamicCache

    model = vlm.model
    cache = DynamicCache(config=vlm.config.text_config)
    mask = torch.ones_like(input_ids)
    tokens, logits = [], []
    with torch.no_grad():
        extra = {"token_type_ids": image_token_types(vlm, input_ids)} if vlm.token_type_ids else {}
        out = model(
            input_ids=input_ids,
            pixel_values=pixel_values,
            attention_mask=mask,
            past_key_values=cache,
            use_cache=True,
            **extra,
        )
        for step in range(steps):
            last = out.logits[:, -1]
            logits.append(last)
            tokens.append(last.argmax(-1))
            if step + 1 == steps:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            if vlm.token_type_ids:
                extra = {"token_type_ids": torch.zeros_like(tokens[-1][:, None])}
            out = model(
                input_ids=tokens[-1][:, None],
                attention_mask=mask,
                past_key_values=out.past_key_values,
                use_cache=True,
                **extra,
            )
    return torch.stack(tokens, dim=1), logits


def greedy_onnx(
    vlm: TinyVLM, vision: Any, decoder: Any, input_ids: torch.Tensor, pixel_values: torch.Tensor, steps: int
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Greedy decoding on onnxruntime with the two exported parts (sessions):
    the vision encoder once, :func:`merge_image_features`, the prefill with an
    empty cache, then one token per step feeding the present cache back.
    Returns the tokens ``[batch, steps]`` and the last-position logits of every step."""
    import numpy as np

    text = vlm.config.text_config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    batch = input_ids.shape[0]
    features = vision.run(None, {vision.get_inputs()[0].name: pixel_values.numpy()})[0]
    embed = vlm.model.get_input_embeddings()
    with torch.no_grad():
        embeds = merge_image_features(vlm.model, input_ids, torch.from_numpy(features), vlm.image_token_id)
    empty = np.zeros((batch, text.num_key_value_heads, 0, head_dim), dtype=np.float32)
    past = [empty] * (2 * vlm.num_layers)
    mask = np.ones(input_ids.shape, dtype=np.int64)
    names = [i.name for i in decoder.get_inputs()]
    types = image_token_types(vlm, input_ids).numpy()
    tokens, logits = [], []
    for step in range(steps):
        values = [embeds.numpy(), mask, *past]
        feeds = dict(zip([n for n in names if n != "token_type_ids"], values))
        if vlm.token_type_ids:
            feeds["token_type_ids"] = types
            types = np.zeros((batch, 1), dtype=np.int64)
        outputs = decoder.run(None, feeds)
        last = torch.from_numpy(outputs[0][:, -1])
        logits.append(last)
        tokens.append(last.argmax(-1))
        past = outputs[1:]
        mask = np.concatenate([mask, np.ones((batch, 1), dtype=np.int64)], axis=1)
        with torch.no_grad():
            embeds = embed(tokens[-1][:, None])
    return torch.stack(tokens, dim=1), logits
