"""A LLaVA checkpoint folder made in code: weights, tokenizer, image processor, processor; no download.

:func:`write_llava_folder` writes the random weights of a :class:`transformers.LlavaConfig`
(a Llama text model and a CLIP vision tower), the tokenizer of
:func:`fx2onnx.models.tokenizer.tiny_tokenizer` with the ``<image>`` placeholder added, a
:class:`transformers.CLIPImageProcessor` at the vision tower's size and the
:class:`transformers.LlavaProcessor` that expands one ``<image>`` into the tokens of one image.

.. code-block:: python

    from fx2onnx.models.vlm_folder import tiny_llava_config, write_llava_folder
    write_llava_folder(tiny_llava_config(), "llava_folder", dtype="bfloat16")
"""

from __future__ import annotations

import os
from typing import Any

#: the placeholder of an image in a prompt
IMAGE_TOKEN = "<image>"


def tiny_llava_config(layers: int = 2, image_size: int = 16, patch_size: int = 4) -> Any:
    """A tiny :class:`transformers.LlavaConfig`: Llama (hidden size 64), CLIP (hidden size 32)."""
    import transformers

    text = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    max_position_embeddings=256, vocab_size=512)
    vision = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, image_size=image_size, patch_size=patch_size,
                                           projection_dim=32)
    return transformers.LlavaConfig(text_config=text, vision_config=vision, vision_feature_layer=-1,
                                    vision_feature_select_strategy="default",
                                    architectures=["LlavaForConditionalGeneration"])


def write_llava_folder(config: Any, folder: str | os.PathLike, dtype: str = "bfloat16", *, seed: int = 0,
                       std: float | None = None) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of a LLaVA model: random weights
    (:func:`fx2onnx.weights.write_random_checkpoint`), the tokenizer with :data:`IMAGE_TOKEN`
    (``config.text_config.vocab_size`` becomes its size, ``config.image_token_id`` its id), the
    image and text processors, a generation config.

    :return: what :func:`fx2onnx.weights.write_random_checkpoint` returns
    """
    import transformers

    from ..weights import write_random_checkpoint
    from .tokenizer import tiny_tokenizer

    tok = tiny_tokenizer(384)
    tok.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    text = config.text_config
    text.vocab_size = len(tok)
    config.image_token_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    text.eos_token_id = text.pad_token_id = tok.eos_token_id
    text.bos_token_id = None
    config.pad_token_id = tok.eos_token_id
    vision = config.vision_config
    written = write_random_checkpoint(config, folder, dtype, seed=seed, std=std)
    folder = os.fspath(folder)
    images = transformers.CLIPImageProcessor(size={"shortest_edge": vision.image_size},
                                             crop_size={"height": vision.image_size, "width": vision.image_size})
    processor = transformers.LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=vision.patch_size,
                                            vision_feature_select_strategy=config.vision_feature_select_strategy,
                                            image_token=IMAGE_TOKEN, num_additional_image_tokens=1)
    processor.save_pretrained(folder)
    transformers.GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id).save_pretrained(folder)
    return written
