"""Checkpoint folders made in code for the pipeline tasks of several pieces or of their own post-processing: a tiny
SAM with its image processor (mask-generation), a tiny VITS with its character tokenizer (text-to-audio), a tiny TAPAS with its
WordPiece table tokenizer (table-question-answering), a tiny OWLv2 (zero-shot-object-detection), a tiny LayoutLM with the WordPiece
tokenizer and a tiny LayoutLMv3 with a byte-level BPE one (document-question-answering), a tiny DETR panoptic segmenter and a tiny MaskFormer
(image-segmentation), a tiny MusicGen (text-to-audio over codebooks); what a published folder holds, without a download.

.. code-block:: python

    from fx2onnx.testing.pipeline_folders import write_sam_folder

    write_sam_folder("sam_folder")
"""

from __future__ import annotations

import json
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
    return _save(model, transformers.SamImageProcessor(
        size={"longest_edge": 64}, pad_size={"height": 64, "width": 64}, mask_size={"longest_edge": 16},
        mask_pad_size={"height": 16, "width": 16}), folder)


#: the characters of the VITS tokenizer (``<pad>`` first: the blank put between characters)
VITS_CHARACTERS = ["<pad>", "<unk>", " ", *"abcdefghijklmnopqrstuvwxyz'.,!?"]


def vits_config(noise: bool = False) -> Any:
    """A VITS of 2 layers of 32 units, a vocoder upsampling 16 times, 16 kHz; no noise unless ``noise`` (its
    waveform is then the same at each run)."""
    import transformers

    scales = {} if noise else dict(noise_scale=0.0, noise_scale_duration=0.0)
    return transformers.VitsConfig(
        vocab_size=len(VITS_CHARACTERS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64,
        flow_size=16, spectrogram_bins=33, upsample_initial_channel=32, upsample_rates=[4, 4],
        upsample_kernel_sizes=[8, 8], resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3]],
        prior_encoder_num_flows=2, prior_encoder_num_wavenet_layers=2, posterior_encoder_num_wavenet_layers=2,
        duration_predictor_num_flows=2, duration_predictor_filter_channels=32, depth_separable_num_layers=2,
        sampling_rate=16000, architectures=["VitsModel"], **scales)


def write_vits_folder(folder: str | os.PathLike, seed: int = 0, noise: bool = False) -> str:
    """Writes a ``save_pretrained`` folder of the tiny VITS of :func:`vits_config` with an MMS-TTS-like character
    tokenizer (a blank between characters, no phonemizer); returns the folder."""
    import torch
    import transformers

    folder = os.fspath(folder)
    torch.manual_seed(seed)
    model = transformers.VitsModel(vits_config(noise)).eval()
    return _save(model, vits_tokenizer(folder, add_blank=True), folder)


def vits_tokenizer(folder: str, add_blank: bool) -> Any:
    """A character :class:`transformers.VitsTokenizer` of :data:`VITS_CHARACTERS` (its ``vocab.json`` written in
    ``folder``; no phonemizer), a blank between characters when ``add_blank`` (MMS-TTS)."""
    import transformers

    os.makedirs(folder, exist_ok=True)
    vocab = os.path.join(folder, "vocab.json")
    with open(vocab, "w", encoding="utf-8") as f:
        json.dump({c: i for i, c in enumerate(VITS_CHARACTERS)}, f)
    return transformers.VitsTokenizer(vocab, add_blank=add_blank, normalize=True, phonemize=False)


#: the words the TAPAS tokenizer knows beyond those of :data:`fx2onnx.testing.encoder_folder.WORDS`
TABLE_WORDS = ("how many people london rome which yes no sum what has city count average").split()


def tapas_config(vocab_size: int) -> Any:
    """A TAPAS of 2 layers of 32 units, its cell selection head and 4 aggregations (WTQ's: none, sum, average,
    count)."""
    import transformers

    return transformers.TapasConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=128, num_aggregation_labels=4, use_answer_as_supervision=True,
        aggregation_labels={0: "NONE", 1: "SUM", 2: "AVERAGE", 3: "COUNT"}, no_aggregation_label_index=0,
        initializer_range=0.2, architectures=["TapasForQuestionAnswering"])


def write_tapas_folder(folder: str | os.PathLike, seed: int = 0) -> str:
    """Writes a ``save_pretrained`` folder of the tiny TAPAS of :func:`tapas_config` with a
    :class:`transformers.TapasTokenizer` over a WordPiece vocabulary of words, letters and digits; returns the
    folder."""
    import torch
    import transformers

    from .encoder_folder import SPECIAL, WORDS

    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    letters = sorted({c for w in WORDS + TABLE_WORDS for c in w} | set("0123456789.,!?'"))
    vocab = list(dict.fromkeys([*SPECIAL, "[EMPTY]", *WORDS, *TABLE_WORDS, *letters, *(f"##{c}" for c in letters)]))
    path = os.path.join(folder, "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    torch.manual_seed(seed)
    model = transformers.TapasForQuestionAnswering(tapas_config(len(vocab))).eval()
    return _save(model, transformers.TapasTokenizer(path), folder)


def write_owlv2_folder(folder: str | os.PathLike, seed: int = 0) -> str:
    """Writes a ``save_pretrained`` folder of a tiny OWLv2 (CLIP's towers of 2 layers of 32 units, its box, class and
    objectness heads on the 4x4 patches of 32x32 images; weights small enough for scores below 1) with the WordPiece
    tokenizer and OWLv2's image processor (padding each image to a square); returns the folder."""
    import torch
    import transformers

    from .encoder_folder import SPECIAL, bert_tokenizer

    folder = os.fspath(folder)
    towers = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    text = dict(towers, vocab_size=len(bert_tokenizer()), max_position_embeddings=32, pad_token_id=0,
                bos_token_id=SPECIAL.index("[CLS]"), eos_token_id=SPECIAL.index("[SEP]"))
    config = transformers.Owlv2Config(text_config=text, vision_config=dict(towers, image_size=32, patch_size=8),
                                      projection_dim=32, initializer_factor=0.1,
                                      architectures=["Owlv2ForObjectDetection"])
    torch.manual_seed(seed)
    model = transformers.Owlv2ForObjectDetection(config).eval()
    _save(model, bert_tokenizer(("input_ids", "attention_mask")), folder)
    transformers.Owlv2ImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def write_layoutlm_folder(folder: str | os.PathLike, seed: int = 0) -> str:
    """Writes a ``save_pretrained`` folder of a tiny LayoutLM question answerer (2 layers of 32 units, boxes from 0 to
    1000) with the WordPiece tokenizer (128 tokens at most); returns the folder."""
    import torch
    import transformers

    from .encoder_folder import bert_tokenizer

    folder = os.fspath(folder)
    tokenizer = bert_tokenizer()
    tokenizer.model_max_length = 128
    config = transformers.LayoutLMConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=128, max_2d_position_embeddings=1024, initializer_range=0.2,
        architectures=["LayoutLMForQuestionAnswering"])
    torch.manual_seed(seed)
    model = transformers.LayoutLMForQuestionAnswering(config).eval()
    return _save(model, tokenizer, folder)


def layoutlmv3_tokenizer() -> Any:
    """A byte-level BPE :class:`transformers.LayoutLMv3Tokenizer` over the vocabulary and merges of
    :func:`fx2onnx.testing.tokenizer.tiny_tokenizer`, RoBERTa's special tokens first (the padding id 1 its positions
    skip)."""
    import transformers

    from .tokenizer import tiny_tokenizer

    state = json.loads(tiny_tokenizer().backend_tokenizer.to_str())["model"]
    specials = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
    rest = [t for t, _ in sorted(state["vocab"].items(), key=lambda x: x[1]) if t not in specials]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    tokenizer = transformers.LayoutLMv3Tokenizer(vocab={t: i for i, t in enumerate((*specials, *rest))}, merges=merges)
    tokenizer.model_max_length = 128
    return tokenizer


def write_layoutlmv3_folder(folder: str | os.PathLike, seed: int = 0) -> str:
    """Writes a ``save_pretrained`` folder of a tiny LayoutLMv3 question answerer (2 layers of 32 units, no visual
    embedding: the words and their boxes only) with :func:`layoutlmv3_tokenizer`; returns the folder."""
    import torch
    import transformers

    folder = os.fspath(folder)
    tokenizer = layoutlmv3_tokenizer()
    config = transformers.LayoutLMv3Config(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=130, max_2d_position_embeddings=1024, coordinate_size=6, shape_size=4,
        visual_embed=False, pad_token_id=tokenizer.pad_token_id, initializer_range=0.2,
        architectures=["LayoutLMv3ForQuestionAnswering"])
    torch.manual_seed(seed)
    model = transformers.LayoutLMv3ForQuestionAnswering(config).eval()
    return _save(model, tokenizer, folder)


#: the labels of the tiny segmenters
SEGMENT_LABELS = ("sky", "sea", "sand", "road", "tree", "wall")


def _labels() -> dict[str, Any]:
    return dict(id2label=dict(enumerate(SEGMENT_LABELS)), label2id={n: i for i, n in enumerate(SEGMENT_LABELS)})


def _save(model: Any, processor: Any, folder: str) -> str:
    import transformers

    transformers.utils.logging.disable_progress_bar()
    try:
        model.save_pretrained(folder)
    finally:
        transformers.utils.logging.enable_progress_bar()
    processor.save_pretrained(folder)
    return folder


def write_detr_panoptic_folder(folder: str | os.PathLike, seed: int = 0) -> str:
    """Writes a ``save_pretrained`` folder of a tiny ``DetrForSegmentation`` (a 4-stage ResNet of 8 to 32 channels,
    one encoder and one decoder layer of 32 units and 8 heads, 10 queries; weights large enough for the queries to
    find segments) with DETR's image processor (64 pixels on the shorter side, 96 at most); returns the folder."""
    import torch
    import transformers

    backbone = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1],
                                         layer_type="basic", out_features=["stage1", "stage2", "stage3", "stage4"])
    config = transformers.DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone, d_model=32,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=64,
        decoder_ffn_dim=64, num_queries=10, init_std=0.5, architectures=["DetrForSegmentation"], **_labels())
    torch.manual_seed(seed)
    return _save(transformers.DetrForSegmentation(config).eval(),
                 transformers.DetrImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}), os.fspath(folder))


def write_maskformer_folder(folder: str | os.PathLike, seed: int = 0) -> str:
    """Writes a ``save_pretrained`` folder of the task zoo's tiny ``MaskFormerForInstanceSegmentation`` (a Swin
    backbone) with MaskFormer's image processor (64x64); returns the folder."""
    import torch
    import transformers

    from ..inputs.tasks import get_task_architecture, tiny_task_config

    config = tiny_task_config(get_task_architecture("universal-segmentation", "maskformer"), **_labels())
    config.architectures = ["MaskFormerForInstanceSegmentation"]
    torch.manual_seed(seed)
    return _save(transformers.MaskFormerForInstanceSegmentation(config).eval(),
                 transformers.MaskFormerImageProcessor(size={"height": 64, "width": 64}), os.fspath(folder))


def block_picture_views(count: int, seed: int = 1) -> list[Any]:
    """``count`` overlapping crops (100x130, each shifted by 3 and 2 pixels) of a random picture of 10x10 blocks:
    image pairs a keypoint matcher finds matches in."""
    import numpy as np
    import PIL.Image

    rng = np.random.default_rng(seed)
    picture = np.asarray(PIL.Image.fromarray(rng.integers(0, 256, (12, 15, 3), dtype=np.uint8)).resize(
        (150, 120), PIL.Image.NEAREST))
    return [PIL.Image.fromarray(np.ascontiguousarray(picture[3 * i:100 + 3 * i, 2 * i:130 + 2 * i]))
            for i in range(count)]


def write_efficientloftr_folder(folder: str | os.PathLike, seed: int = 0) -> str:
    """Writes a ``save_pretrained`` folder of a tiny ``EfficientLoFTRForKeypointMatching`` (a RepVGG backbone of 4
    stages up to 64 channels, one attention layer, every mutual best match kept: threshold 0) with its image processor
    (pairs resized to 128x160); returns the folder. Its batch norms' statistics are those of a pair of
    :func:`block_picture_views` (random weights shrink the features to their biases: every cell alike, one keypoint
    matched everywhere)."""
    import torch
    import transformers

    config = transformers.EfficientLoFTRConfig(
        stage_num_blocks=[1, 1, 1, 1], out_features=[16, 16, 32, 64], stage_stride=[2, 1, 2, 2], hidden_size=64,
        num_attention_heads=8, num_attention_layers=1, coarse_matching_threshold=0.0,
        architectures=["EfficientLoFTRForKeypointMatching"])
    torch.manual_seed(seed)
    model = transformers.EfficientLoFTRForKeypointMatching(config).eval()
    processor = transformers.EfficientLoFTRImageProcessor(size={"height": 128, "width": 160})
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:  # one pass in training mode: the running statistics become the pair's
        norm.momentum = None
        norm.reset_running_stats()
        norm.train()
    with torch.no_grad():
        model(**processor(images=block_picture_views(2, seed + 7), return_tensors="pt"))
    return _save(model.eval(), processor, os.fspath(folder))


def musicgen_config(vocab_size: int, pad: int, eos: int) -> Any:
    """A tiny MusicGen: a T5 text encoder (2 layers, width 32), a decoder of 2 layers (width 48, so the text
    encoder's states go through ``enc_to_dec_proj``) over 4 codebooks of 64 codes, an EnCodec of 8 filters
    upsampling 4 x 2 at 8 kHz (a bandwidth of 40 kbps: 4 quantizers at 1000 frames a second)."""
    import transformers

    text = transformers.T5Config(vocab_size=vocab_size, d_model=32, d_kv=8, num_heads=4, num_layers=2, d_ff=64,
                                 pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad)
    audio = transformers.EncodecConfig(sampling_rate=8000, hidden_size=16, num_filters=8, upsampling_ratios=[4, 2],
                                       codebook_size=64, codebook_dim=16, num_lstm_layers=1,
                                       target_bandwidths=[40.0], kernel_size=3, last_kernel_size=3,
                                       residual_kernel_size=3)
    decoder = transformers.MusicgenDecoderConfig(vocab_size=64, max_position_embeddings=128, num_hidden_layers=2,
                                                 ffn_dim=96, num_attention_heads=4, hidden_size=48, num_codebooks=4,
                                                 pad_token_id=64, bos_token_id=64, initializer_factor=0.5)
    return transformers.MusicgenConfig(text_encoder=text.to_dict(), audio_encoder=audio.to_dict(),
                                       decoder=decoder.to_dict(), architectures=["MusicgenForConditionalGeneration"])


def write_musicgen_folder(folder: str | os.PathLike, seed: int = 0, guidance_scale: float | None = 3.0,
                          do_sample: bool = True) -> str:
    """Writes a ``save_pretrained`` folder of the tiny MusicGen of :func:`musicgen_config` with the tokenizer of
    :func:`~fx2onnx.testing.tokenizer.tiny_tokenizer`, its codec's codebooks drawn, and a generation config as the
    published ones' (sampling unless ``do_sample`` is False, classifier-free guidance ``guidance_scale``) but of
    24 steps; returns the folder."""
    import torch
    import transformers

    from .tokenizer import tiny_tokenizer

    folder = os.fspath(folder)
    tok = tiny_tokenizer()
    torch.manual_seed(seed)
    model = transformers.MusicgenForConditionalGeneration(
        musicgen_config(len(tok), tok.pad_token_id, tok.eos_token_id)).eval()
    with torch.no_grad():  # the codec's codebooks are zeros until trained: drawn, each code its own sound
        for layer in model.audio_encoder.quantizer.layers:
            layer.codebook.embed.normal_()
            layer.codebook.embed_avg.copy_(layer.codebook.embed)
    model.generation_config = transformers.GenerationConfig(
        do_sample=do_sample, guidance_scale=guidance_scale, max_length=24, decoder_start_token_id=64, pad_token_id=64,
        bos_token_id=64)
    return _save(model, tok, folder)
