"""LLaVA, Gemma 3, Idefics 3, Qwen-VL, Mistral 3 and TrOCR-like checkpoint folders made in code: weights, tokenizer, image
processor, processor; no download.

:func:`write_llava_folder` writes the random weights of a :class:`transformers.LlavaConfig`
(a Llama text model and a CLIP vision tower), the tokenizer of
:func:`fx2onnx.testing.tokenizer.tiny_tokenizer` with the ``<image>`` placeholder added, a
:class:`transformers.CLIPImageProcessor` at the vision tower's size and the
:class:`transformers.LlavaProcessor` that expands one ``<image>`` into the tokens of one image.

:func:`write_gemma3_folder` does the same for a :class:`transformers.Gemma3Config` (SigLIP, a Gemma 3
text model whose layers alternate a sliding window and a full attention) with its
:class:`transformers.Gemma3Processor`; :func:`write_idefics3_folder` for a
:class:`transformers.Idefics3Config` (SmolVLM's architecture) with its tiling
:class:`transformers.Idefics3Processor`; :func:`write_qwen2_vl_folder` for a
:class:`transformers.Qwen2VLConfig` with its :class:`transformers.Qwen2VLProcessor` (images resized
to grids of patches of their own sizes; Qwen2.5-VL and Qwen3-VL alike); :func:`write_mistral3_folder` for a
:class:`transformers.Mistral3Config` with its :class:`transformers.PixtralProcessor`;
:func:`write_vision_encoder_decoder_folder` for an image encoder-decoder (TrOCR's architecture) with its
image processor.

.. code-block:: python

    from fx2onnx.testing.vlm_folder import tiny_llava_config, write_llava_folder
    write_llava_folder(tiny_llava_config(), "llava_folder", dtype="bfloat16")
"""

from __future__ import annotations

import os
from typing import Any

from ..inputs.tasks import get_task_architecture, tiny_task_config
from ..weights import write_random_checkpoint
from .tokenizer import CORPUS, tiny_tokenizer

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


def tiny_gemma3_config(layers: int = 2, image_size: int = 16, patch_size: int = 4, sliding_window: int = 8) -> Any:
    """A tiny :class:`transformers.Gemma3Config`: a Gemma 3 text model (hidden size 64) whose layers
    alternate a sliding window of ``sliding_window`` positions and a full attention, a SigLIP vision
    tower (hidden size 32) pooled into 4 features per image."""
    import transformers

    text = transformers.Gemma3TextConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, vocab_size=512,
        sliding_window=sliding_window,
        layer_types=[("sliding_attention", "full_attention")[i % 2] for i in range(layers)])
    vision = transformers.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, image_size=image_size, patch_size=patch_size)
    return transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                     architectures=["Gemma3ForConditionalGeneration"])


#: Gemma 3's tokens around and inside an image (the prompt holds ``boi_token``, the processor expands it)
GEMMA3_TOKENS = {"boi_token": "<start_of_image>", "image_token": "<image_soft_token>", "eoi_token": "<end_of_image>"}


def multimodal_chat_template(processor: Any) -> str:
    """The tiny tokenizer's chat template (:data:`fx2onnx.testing.tokenizer.CHAT_TEMPLATE`) whose
    messages may also be lists of parts: an image part becomes the processor's placeholder of an
    image (Qwen-VL's between its vision markers), a text part its text."""
    placeholder = processor.image_token
    vocabulary = processor.tokenizer.get_vocab()
    if "<|vision_start|>" in vocabulary and "<|vision_end|>" in vocabulary:
        placeholder = "<|vision_start|>" + placeholder + "<|vision_end|>"
    return (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}" + placeholder + "{% else %}{{ part['text'] }}{% endif %}{% endfor %}"
        "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


def _write_folder(config: Any, folder: str | os.PathLike, dtype: str, seed: int, std: float | None,
                  tokens: dict[str, str], image_token: str, processor: Any, keep_vocab: bool = False) -> dict[str, Any]:
    """The random weights, the tokenizer with ``tokens`` (named attributes of the tokenizer),
    ``processor(tokenizer)`` saved, a generation config. The text model's vocabulary becomes the
    tokenizer's, unless ``keep_vocab`` (a benchmark keeps the published size: the ids past the
    tokenizer's decode to nothing)."""
    import transformers

    tok = tiny_tokenizer(384)
    tok.add_special_tokens({"additional_special_tokens": [t for v in tokens.values() for t in
                                                          ([v] if isinstance(v, str) else v)]})
    if any(name != "additional_special_tokens" for name in tokens):
        tok._set_model_specific_special_tokens(special_tokens=tokens)
    text = config.text_config
    text.vocab_size = max(text.vocab_size, len(tok)) if keep_vocab else len(tok)
    config.image_token_id = tok.convert_tokens_to_ids(image_token)
    text.eos_token_id = text.pad_token_id = tok.eos_token_id
    text.bos_token_id = None
    config.pad_token_id = tok.eos_token_id
    made = processor(tok)  # may set the config's ids of other tokens
    # a chat template placing every image of a message where the processor expects it
    made.chat_template = tok.chat_template = multimodal_chat_template(made)
    written = write_random_checkpoint(config, folder, dtype, seed=seed, std=std)
    folder = os.fspath(folder)
    made.save_pretrained(folder)
    transformers.GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id).save_pretrained(folder)
    return written


def write_llava_folder(config: Any, folder: str | os.PathLike, dtype: str = "bfloat16", *, seed: int = 0,
                       std: float | None = None) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of a LLaVA model: random weights
    (:func:`fx2onnx.weights.write_random_checkpoint`), the tokenizer with :data:`IMAGE_TOKEN`
    (``config.text_config.vocab_size`` becomes its size, ``config.image_token_id`` its id), the
    image and text processors, a generation config.

    :return: what :func:`fx2onnx.weights.write_random_checkpoint` returns
    """
    import transformers

    vision = config.vision_config

    def processor(tok):
        images = transformers.CLIPImageProcessor(size={"shortest_edge": vision.image_size},
                                                 crop_size={"height": vision.image_size, "width": vision.image_size})
        return transformers.LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=vision.patch_size,
                                           vision_feature_select_strategy=config.vision_feature_select_strategy,
                                           image_token=IMAGE_TOKEN, num_additional_image_tokens=1)

    return _write_folder(config, folder, dtype, seed, std, {"additional_special_tokens": IMAGE_TOKEN}, IMAGE_TOKEN,
                         processor)


def write_gemma3_folder(config: Any, folder: str | os.PathLike, dtype: str = "bfloat16", *, seed: int = 0,
                        std: float | None = None) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of a Gemma 3 model as :func:`write_llava_folder` does: the
    tokenizer with :data:`GEMMA3_TOKENS` (``config.image_token_id`` the id of ``image_token``), a
    :class:`transformers.Gemma3ImageProcessor` at the vision tower's size and the
    :class:`transformers.Gemma3Processor` expanding every ``<start_of_image>`` of a prompt into
    ``config.mm_tokens_per_image`` image tokens between ``<start_of_image>`` and ``<end_of_image>``.
    """
    import transformers

    size = config.vision_config.image_size

    def processor(tok):
        config.boi_token_index = tok.convert_tokens_to_ids(GEMMA3_TOKENS["boi_token"])
        config.eoi_token_index = tok.convert_tokens_to_ids(GEMMA3_TOKENS["eoi_token"])
        images = transformers.Gemma3ImageProcessor(size={"height": size, "width": size})
        return transformers.Gemma3Processor(image_processor=images, tokenizer=tok,
                                            image_seq_length=config.mm_tokens_per_image)

    return _write_folder(config, folder, dtype, seed, std, GEMMA3_TOKENS, GEMMA3_TOKENS["image_token"], processor)


def tiny_idefics3_config(layers: int = 2, image_size: int = 16, patch_size: int = 4) -> Any:
    """A tiny :class:`transformers.Idefics3Config` (SmolVLM's architecture): Llama (hidden size 64),
    an Idefics 3 vision model (hidden size 32) on tiles of ``image_size`` pixels, the connector
    shuffling 2x2 patches into one feature (4 features per tile)."""
    import transformers

    text = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    max_position_embeddings=256, vocab_size=512)
    vision = transformers.Idefics3VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                               num_attention_heads=4, image_size=image_size, patch_size=patch_size)
    return transformers.Idefics3Config(text_config=text, vision_config=vision, scale_factor=2,
                                       architectures=["Idefics3ForConditionalGeneration"])


#: Idefics 3's tokens: around an image, the image, the global image and the tiles' rows and columns
IDEFICS3_TOKENS = ["<fake_token_around_image>", IMAGE_TOKEN, "<end_of_utterance>", "<global-img>",
                   *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))]


def write_idefics3_folder(config: Any, folder: str | os.PathLike, dtype: str = "bfloat16", *, seed: int = 0,
                          std: float | None = None) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of an Idefics 3 model as :func:`write_llava_folder` does:
    the tokenizer with :data:`IDEFICS3_TOKENS`, a :class:`transformers.Idefics3ImageProcessor`
    splitting an image into tiles of the vision model's size (the longest edge resized to two
    tiles, and the whole image as one more tile) and the :class:`transformers.Idefics3Processor`
    expanding every ``<image>`` of a prompt into the tokens of its tiles."""
    import transformers

    size = config.vision_config.image_size
    per_tile = (size // config.vision_config.patch_size) ** 2 // config.scale_factor ** 2

    def processor(tok):
        images = transformers.Idefics3ImageProcessor(size={"longest_edge": 2 * size},
                                                     max_image_size={"longest_edge": size}, do_image_splitting=True)
        return transformers.Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=per_tile)

    return _write_folder(config, folder, dtype, seed, std, {"additional_special_tokens": IDEFICS3_TOKENS},
                         IMAGE_TOKEN, processor)


def tiny_qwen2_vl_config(layers: int = 2, patch_size: int = 4) -> Any:
    """A tiny :class:`transformers.Qwen2VLConfig`: a Qwen2-VL text model (hidden size 64, its
    rotary positions in 3 sections: time, height, width) and a vision tower (hidden size 32) on
    patches of ``patch_size`` pixels, 2x2 patches merged into one feature."""
    import transformers

    text = transformers.Qwen2VLTextConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, vocab_size=512,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
    vision = transformers.Qwen2VLVisionConfig(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2,
                                              patch_size=patch_size, spatial_merge_size=2, temporal_patch_size=2)
    return transformers.Qwen2VLConfig(text_config=text.to_dict(), vision_config=vision.to_dict(),
                                      architectures=["Qwen2VLForConditionalGeneration"])


def tiny_qwen2_5_vl_config(layers: int = 2, patch_size: int = 4) -> Any:
    """A tiny :class:`transformers.Qwen2_5_VLConfig`: the text model of :func:`tiny_qwen2_vl_config`,
    a vision tower (hidden size 32) whose first block attends within windows of 2x2 merged features
    (``window_size``: 4 patches) and the second over each whole image."""
    import transformers

    text = tiny_qwen2_vl_config(layers, patch_size).text_config.to_dict()
    vision = transformers.Qwen2_5_VLVisionConfig(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64, patch_size=patch_size,
        spatial_merge_size=2, temporal_patch_size=2, window_size=4 * patch_size, fullatt_block_indexes=[1])
    return transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision.to_dict(),
                                         architectures=["Qwen2_5_VLForConditionalGeneration"])


def tiny_qwen3_vl_config(layers: int = 2, patch_size: int = 4) -> Any:
    """A tiny :class:`transformers.Qwen3VLConfig`: a Qwen3-VL text model (hidden size 64, head size 16,
    3 rotary sections), a vision tower (hidden size 32) whose learned position embeddings (a 4x4
    table) are resampled to every image's grid and whose first block's features are added to the
    first decoder layer (deepstack)."""
    import transformers

    text = transformers.Qwen3VLTextConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, vocab_size=512,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                         "mrope_interleaved": True})
    vision = transformers.Qwen3VLVisionConfig(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64, patch_size=patch_size,
        spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16, deepstack_visual_indexes=[0])
    return transformers.Qwen3VLConfig(text_config=text.to_dict(), vision_config=vision.to_dict(),
                                      architectures=["Qwen3VLForConditionalGeneration"])


#: Qwen2-VL's tokens around and inside an image or a video (a prompt holds them all, the processor
#: expands ``<|image_pad|>`` into the features of its image)
QWEN2_VL_TOKENS = {"vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>",
                   "image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>"}


def write_qwen2_vl_folder(config: Any, folder: str | os.PathLike, dtype: str = "bfloat16", *, seed: int = 0,
                          std: float | None = None, max_patches: int = 64, keep_vocab: bool = False) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of a Qwen2-VL or Qwen2.5-VL model as :func:`write_llava_folder` does:
    the tokenizer with :data:`QWEN2_VL_TOKENS` (the config's ids set to theirs), a
    :class:`transformers.Qwen2VLImageProcessor` resizing an image to a grid of patches (both sides a
    multiple of two patches, at least 2x2 and at most ``max_patches`` patches, the aspect ratio kept:
    images of other sizes give other numbers of features), its video processor and the
    :class:`transformers.Qwen2VLProcessor` (:class:`transformers.Qwen2_5_VLProcessor`);
    ``keep_vocab``: see :func:`_write_folder`."""
    import transformers

    vision = config.vision_config
    side = vision.patch_size * vision.spatial_merge_size
    sizes = dict(patch_size=vision.patch_size, merge_size=vision.spatial_merge_size,
                 temporal_patch_size=vision.temporal_patch_size,
                 size={"shortest_edge": side * side, "longest_edge": max_patches * vision.patch_size ** 2})

    def processor(tok):
        for key, token in QWEN2_VL_TOKENS.items():
            setattr(config, key, tok.convert_tokens_to_ids(token))
        kind = {"qwen2_5_vl": transformers.Qwen2_5_VLProcessor, "qwen3_vl": transformers.Qwen3VLProcessor}.get(
            config.model_type, transformers.Qwen2VLProcessor)
        video = transformers.Qwen3VLVideoProcessor if config.model_type == "qwen3_vl" else \
            transformers.Qwen2VLVideoProcessor
        return kind(image_processor=transformers.Qwen2VLImageProcessor(**sizes), video_processor=video(**sizes),
                    tokenizer=tok)

    tokens = {"additional_special_tokens": list(QWEN2_VL_TOKENS.values())}
    return _write_folder(config, folder, dtype, seed, std, tokens, QWEN2_VL_TOKENS["image_token_id"], processor,
                         keep_vocab)


def write_qwen2_5_vl_folder(config: Any, folder: str | os.PathLike, dtype: str = "bfloat16", *, seed: int = 0,
                            std: float | None = None, max_patches: int = 64, keep_vocab: bool = False) -> dict[str, Any]:
    """:func:`write_qwen2_vl_folder` of a :class:`transformers.Qwen2_5_VLConfig`."""
    return write_qwen2_vl_folder(config, folder, dtype, seed=seed, std=std, max_patches=max_patches,
                                 keep_vocab=keep_vocab)


def write_qwen3_vl_folder(config: Any, folder: str | os.PathLike, dtype: str = "bfloat16", *, seed: int = 0,
                          std: float | None = None, max_patches: int = 64) -> dict[str, Any]:
    """:func:`write_qwen2_vl_folder` of a :class:`transformers.Qwen3VLConfig` (its
    :class:`transformers.Qwen3VLProcessor`)."""
    return write_qwen2_vl_folder(config, folder, dtype, seed=seed, std=std, max_patches=max_patches)


def tiny_mistral3_config(layers: int = 2, patch_size: int = 4) -> Any:
    """A tiny :class:`transformers.Mistral3Config`: a Mistral text model (hidden size 64) and a Pixtral
    vision tower (hidden size 32) on patches of ``patch_size`` pixels, 2x2 patches merged."""
    import transformers

    text = transformers.MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=256, vocab_size=512, sliding_window=None)
    vision = transformers.PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                              num_attention_heads=4, head_dim=8, image_size=64, patch_size=patch_size)
    return transformers.Mistral3Config(text_config=text.to_dict(), vision_config=vision.to_dict(), spatial_merge_size=2,
                                       architectures=["Mistral3ForConditionalGeneration"])


#: Mistral 3's tokens of an image: its placeholders, the end of a row of them, the end of the image
MISTRAL3_TOKENS = ["[IMG]", "[IMG_BREAK]", "[IMG_END]"]


def write_mistral3_folder(config: Any, folder: str | os.PathLike, dtype: str = "bfloat16", *, seed: int = 0,
                          std: float | None = None, longest_edge: int = 32) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of a Mistral 3 model as :func:`write_llava_folder` does: the
    tokenizer with :data:`MISTRAL3_TOKENS`, a :class:`transformers.PixtralImageProcessor` resizing an
    image to at most ``longest_edge`` pixels, both sides multiples of two patches (the aspect ratio
    kept: images of other sizes, padded to the largest in one call), and the
    :class:`transformers.PixtralProcessor` expanding every ``[IMG]`` into rows of placeholders."""
    import transformers

    patch = config.vision_config.patch_size
    side = patch * config.spatial_merge_size

    def processor(tok):
        images = transformers.PixtralImageProcessor(patch_size={"height": side, "width": side},
                                                    size={"longest_edge": longest_edge})
        return transformers.PixtralProcessor(image_processor=images, tokenizer=tok, patch_size=patch,
                                             spatial_merge_size=config.spatial_merge_size)

    return _write_folder(config, folder, dtype, seed, std, {"additional_special_tokens": MISTRAL3_TOKENS},
                         MISTRAL3_TOKENS[0], processor)


def scaled_random_model(model_class: Any, config: Any, seed: int, scale: float) -> Any:
    """``model_class(config)`` in eval mode, its matrices of a variance ``scale**2 / fan-in`` (seeded): a tiny
    model whose greedy tokens vary (transformers' 0.02 makes them repeat one token)."""
    import torch

    torch.manual_seed(seed)
    model = model_class(config).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(scale * torch.randn(p.shape, generator=g) / p[0].numel() ** 0.5)
    return model


#: the architectures of :func:`write_vision_encoder_decoder_folder`: TrOCR's (a ViT and a TrOCR decoder), a ViT
#: and GPT-2 with cross-attention (the image captioners), Donut's (a Swin and an MBart decoder, whose
#: generation config forces the end-of-sequence token at the last position)
IMAGE_DECODERS = ("trocr", "gpt2", "donut")


def write_vision_encoder_decoder_folder(folder: str | os.PathLike, decoder: str = "trocr", *, seed: int = 0,
                                        scale: float = 1.5) -> None:
    """A ``save_pretrained`` folder of a tiny :class:`transformers.VisionEncoderDecoderModel` of one of
    :data:`IMAGE_DECODERS` with its image processor (``ViTImageProcessor`` at 32 x 32, Donut's at 64 x 48),
    the byte-level tokenizer of :func:`fx2onnx.testing.tokenizer.tiny_tokenizer`, the decoder's start
    token named in the configuration and the generation config (as the published checkpoints). The
    random weights have a variance of ``scale**2 / fan-in``: the greedy tokens vary."""
    import transformers

    tok = tiny_tokenizer(384)
    encoder = transformers.ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     image_size=32, patch_size=8)
    processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32})
    if decoder == "trocr":
        text = transformers.TrOCRConfig(vocab_size=len(tok), d_model=64, decoder_layers=2, decoder_attention_heads=4,
                                        decoder_ffn_dim=128, max_position_embeddings=64, tie_word_embeddings=False)
    elif decoder == "gpt2":
        text = transformers.GPT2Config(vocab_size=len(tok), n_embd=64, n_layer=2, n_head=4, n_positions=64)
    elif decoder == "donut":
        encoder = transformers.DonutSwinConfig(image_size=[64, 48], patch_size=4, embed_dim=16, depths=[1, 1],
                                               num_heads=[2, 4], window_size=4)
        processor = transformers.DonutImageProcessor(size={"height": 64, "width": 48})
        # encoder_layers: transformers sizes the decoder's cache from it (num_hidden_layers)
        text = transformers.MBartConfig(vocab_size=len(tok), d_model=32, decoder_layers=2, encoder_layers=2,
                                        decoder_attention_heads=4, decoder_ffn_dim=64, max_position_embeddings=64,
                                        is_decoder=True, add_cross_attention=True, tie_word_embeddings=False,
                                        scale_embedding=True)
    else:
        raise ValueError(f"decoder={decoder!r}: one of {IMAGE_DECODERS}.")
    config = transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, text)
    config.decoder_start_token_id = tok.convert_tokens_to_ids("a")
    config.pad_token_id = config.eos_token_id = config.decoder.eos_token_id = tok.eos_token_id
    model = scaled_random_model(transformers.VisionEncoderDecoderModel, config, seed, scale)
    model.generation_config.decoder_start_token_id = config.decoder_start_token_id
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = tok.eos_token_id
    folder = os.fspath(folder)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    tok.save_pretrained(folder)


#: the special tokens of :func:`blip_tokenizer`, in BERT's order, then BLIP's start of a caption
BLIP_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]")


def blip_tokenizer() -> Any:
    """A :class:`transformers.BertTokenizerFast` (BLIP's) whose word pieces are the words and characters of
    :data:`fx2onnx.testing.tokenizer.CORPUS` (lower case), :data:`BLIP_SPECIAL_TOKENS` first."""
    import re

    import transformers

    text = " ".join(CORPUS).lower()
    chars = sorted({c for c in text if not c.isspace()})
    words = sorted({w for w in re.findall(r"[a-z0-9]+", text) if len(w) > 1})
    vocab = [*BLIP_SPECIAL_TOKENS, *chars, *words, *(f"##{c}" for c in chars if c.isalnum())]
    return transformers.BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True,
                                          bos_token="[DEC]")


def write_blip_folder(folder: str | os.PathLike, *, seed: int = 0, scale: float = 0.5) -> None:
    """A ``save_pretrained`` folder of a tiny :class:`transformers.BlipForConditionalGeneration` (a ViT and a
    BERT decoder attending to it, BLIP's captioner) with its processor (``BlipImageProcessor`` at 32 x 32,
    :func:`blip_tokenizer`), the text configuration's start (``[DEC]``), end (``[SEP]``) and padding tokens
    the tokenizer's, as the published checkpoints. The random weights have a variance of ``scale**2 / fan-in``:
    the greedy tokens vary."""
    import transformers

    folder = os.fspath(folder)
    tok = blip_tokenizer()
    text = transformers.BlipTextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, encoder_hidden_size=32, max_position_embeddings=64,
                                       bos_token_id=tok.bos_token_id, sep_token_id=tok.sep_token_id,
                                       pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id)
    vision = transformers.BlipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, image_size=32, patch_size=8)
    config = transformers.BlipConfig(text_config=text.to_dict(), vision_config=vision.to_dict(),
                                     architectures=["BlipForConditionalGeneration"])
    model = scaled_random_model(transformers.BlipForConditionalGeneration, config, seed, scale)
    model.save_pretrained(folder)
    images = transformers.BlipImageProcessor(size={"height": 32, "width": 32})
    transformers.BlipProcessor(image_processor=images, tokenizer=tok).save_pretrained(folder)
    images.save_pretrained(folder)  # preprocessor_config.json, as the published checkpoints


#: Florence-2's tokens of :func:`write_florence2_folder`: an image placeholder, the start of the prompt
FLORENCE2_TOKENS = {"image_token": "<image>", "bos_token": "<s>"}


def write_florence2_folder(folder: str | os.PathLike, *, seed: int = 0, scale: float = 2.0) -> None:
    """A ``save_pretrained`` folder of a tiny :class:`transformers.Florence2ForConditionalGeneration` (the task zoo's
    sizes: a DaViT tower, a BART encoder-decoder) with its processor: a ``CLIPImageProcessor`` at 32 x 32 whose
    ``image_seq_length`` is the tower's features of one image, the byte-level tokenizer of
    :func:`fx2onnx.testing.tokenizer.tiny_tokenizer` with :data:`FLORENCE2_TOKENS`, the configuration's start,
    end and padding tokens the tokenizer's. The random weights have a variance of ``scale**2 / fan-in``."""
    import torch
    import transformers

    tok = tiny_tokenizer(384)
    tok.add_special_tokens({"additional_special_tokens": [FLORENCE2_TOKENS["image_token"]],
                            "bos_token": FLORENCE2_TOKENS["bos_token"]})
    tok._set_model_specific_special_tokens(special_tokens={"image_token": FLORENCE2_TOKENS["image_token"]})
    config = tiny_task_config(get_task_architecture("image-text-to-text", "florence2"))
    vision = config.vision_config  # the zoo's tower goes to 1024 channels (40 M parameters): 8 times narrower
    vision.embed_dim = [16, 32, 64, 128]
    vision.num_groups = [1, 2, 4, 8]
    text = config.text_config
    text.vocab_size = len(tok)
    text.bos_token_id, text.eos_token_id, text.pad_token_id = tok.bos_token_id, tok.eos_token_id, tok.eos_token_id
    text.decoder_start_token_id = tok.eos_token_id  # BART's: the end of sequence starts the decoder
    text.forced_bos_token_id = text.forced_eos_token_id = None
    config.image_token_id = tok.convert_tokens_to_ids(FLORENCE2_TOKENS["image_token"])
    config.architectures = ["Florence2ForConditionalGeneration"]
    model = scaled_random_model(transformers.Florence2ForConditionalGeneration, config, seed, scale)
    with torch.no_grad():
        rows = model.get_image_features(torch.zeros(1, 3, 32, 32)).pooler_output.shape[1]
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=text.decoder_start_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    folder = os.fspath(folder)
    model.save_pretrained(folder)
    images = transformers.CLIPImageProcessor(size={"height": 32, "width": 32}, do_center_crop=False,
                                             image_seq_length=rows)
    transformers.Florence2Processor(image_processor=images, tokenizer=tok).save_pretrained(folder)
    images.save_pretrained(folder)  # preprocessor_config.json, as the published checkpoints


def write_git_folder(folder: str | os.PathLike, *, seed: int = 0, scale: float = 1.0) -> None:
    """A ``save_pretrained`` folder of a tiny :class:`transformers.GitForCausalLM` (a CLIP vision tower whose
    features precede the prompt of a BERT-like decoder) with its processor (``CLIPImageProcessor`` at 32 x 32,
    :func:`blip_tokenizer`), its start (``[CLS]``), end (``[SEP]``) and padding tokens the tokenizer's, as the
    published checkpoints. The random weights have a variance of ``scale**2 / fan-in``."""
    import transformers

    tok = blip_tokenizer()
    vision = transformers.GitVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, image_size=32, patch_size=8)
    config = transformers.GitConfig(vision_config=vision.to_dict(), vocab_size=len(tok), hidden_size=64,
                                    intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                    max_position_embeddings=64, bos_token_id=tok.cls_token_id,
                                    eos_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id,
                                    architectures=["GitForCausalLM"])
    model = scaled_random_model(transformers.GitForCausalLM, config, seed, scale)
    model.generation_config = transformers.GenerationConfig(bos_token_id=tok.cls_token_id,
                                                            eos_token_id=tok.sep_token_id,
                                                            pad_token_id=tok.pad_token_id)
    folder = os.fspath(folder)
    model.save_pretrained(folder)
    images = transformers.CLIPImageProcessor(size={"height": 32, "width": 32}, do_center_crop=False)
    transformers.GitProcessor(image_processor=images, tokenizer=tok).save_pretrained(folder)
    images.save_pretrained(folder)  # preprocessor_config.json, as the published checkpoints


def write_llava_onevision_folder(config: Any, folder: str | os.PathLike, dtype: str = "float32", *, seed: int = 0,
                                 std: float | None = None) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of a LLaVA-OneVision model as :func:`write_llava_folder` does: the
    tokenizer with :data:`IMAGE_TOKEN`, a :class:`transformers.LlavaOnevisionImageProcessor` at the vision tower's
    size cutting every image into the tiles of ``config.image_grid_pinpoints`` (the whole image first) and the
    :class:`transformers.LlavaOnevisionProcessor` expanding one ``<image>`` into that image's features."""
    import transformers

    size = config.vision_config.image_size

    def processor(tok):
        images = transformers.LlavaOnevisionImageProcessor(size={"height": size, "width": size},
                                                           image_grid_pinpoints=config.image_grid_pinpoints)
        return transformers.LlavaOnevisionProcessor(
            image_processor=images, tokenizer=tok, image_token=IMAGE_TOKEN,
            video_processor=transformers.LlavaOnevisionVideoProcessor(size={"height": size, "width": size}),
            num_image_tokens=(size // config.vision_config.patch_size) ** 2,
            vision_feature_select_strategy=config.vision_feature_select_strategy,
            vision_aspect_ratio=config.vision_aspect_ratio)

    return _write_folder(config, folder, dtype, seed, std, {"additional_special_tokens": IMAGE_TOKEN}, IMAGE_TOKEN,
                         processor)


def write_lfm2_vl_folder(config: Any, folder: str | os.PathLike, dtype: str = "float32", *, seed: int = 0,
                         std: float | None = None, tile_size: int = 64, max_tiles: int = 4) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of an LFM2-VL model as :func:`write_llava_folder` does: the tokenizer with
    LFM2-VL's image tokens (``<image>``, the start, end and thumbnail markers, a marker per tile of at most
    ``max_tiles``), a :class:`transformers.Lfm2VlImageProcessor` cutting a large image into tiles of ``tile_size``
    pixels and a thumbnail (a small image whole), each a sequence of patches of its own grid, and the
    :class:`transformers.Lfm2VlProcessor`."""
    import transformers

    tiles = [f"<|img_row_{r}_col_{c}|>" for r in range(1, max_tiles + 1) for c in range(1, max_tiles + 1)]
    patch = config.vision_config.patch_size

    def processor(tok):
        side = tile_size // (patch * config.downsample_factor)
        images = transformers.Lfm2VlImageProcessor(
            encoder_patch_size=patch, tile_size=tile_size, downsample_factor=config.downsample_factor,
            min_tiles=2, max_tiles=max_tiles, min_image_tokens=1, max_image_tokens=side * side,
            size={"height": tile_size, "width": tile_size})
        return transformers.Lfm2VlProcessor(image_processor=images, tokenizer=tok)

    markers = ["<|image_start|>", "<|image_end|>", "<|img_thumbnail|>", *tiles]
    return _write_folder(config, folder, dtype, seed, std, {"additional_special_tokens": [IMAGE_TOKEN, *markers]},
                         IMAGE_TOKEN, processor)
