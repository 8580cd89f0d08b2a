"""Checkpoint folders of tiny encoders made in code: a BERT with a WordPiece tokenizer, a ViT with its image
processor, a wav2vec2 with its feature extractor and a CTC tokenizer, a DETR, a DPT, a SegFormer, and the two towers
of CLIP, SigLIP and CLAP (the WordPiece tokenizer beside their image processor or feature extractor); what a
published folder of a classifier, a tagger, an embedder, a detector or a zero-shot model holds, without a download.

.. code-block:: python

    from fx2onnx.testing.encoder_folder import write_encoder_folder

    write_encoder_folder("BertForSequenceClassification", "bert_folder")
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..inputs.tasks import get_task_architecture, tiny_task_config

#: the words the WordPiece tokenizer knows (the sentences of the tests and examples are made of them)
WORDS = ("the a an of to in on is was and or but not with for at by from this that it he she they we you "
         "cat dog sat mat paris france capital city model export graph onnx runtime folder image sound "
         "good bad great movie film love hate day night sea robot paints quick brown fox jumps over lazy").split()
#: the special tokens of BERT's tokenizer
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: the characters of the CTC tokenizer (``|`` separates words)
CTC_CHARACTERS = "<pad> <s> </s> <unk> | a b c d e f g h i j k l m n o p q r s t u v w x y z '".split()


def bert_tokenizer(input_names: tuple[str, ...] | None = None) -> Any:
    """A WordPiece :class:`transformers.BertTokenizerFast` over :data:`WORDS`, their letters and ``##`` letters
    (``input_names``: the inputs it gives, when not BERT's three, saved in its configuration)."""
    import tokenizers
    import transformers

    letters = sorted({c for w in WORDS for c in w} | set("0123456789.,!?'"))
    vocab = list(SPECIAL) + list(WORDS) + letters + [f"##{c}" for c in letters]
    model = tokenizers.Tokenizer(tokenizers.models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    model.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    model.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    model.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab.index("[CLS]")), ("[SEP]", vocab.index("[SEP]"))])
    model.decoder = tokenizers.decoders.WordPiece()
    names = dict(model_input_names=list(input_names)) if input_names else {}
    return transformers.BertTokenizerFast(tokenizer_object=model, unk_token="[UNK]", sep_token="[SEP]",
                                          pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]", **names)


def ctc_processor(folder: str | os.PathLike) -> Any:
    """A :class:`transformers.Wav2Vec2Processor`: a character CTC tokenizer (its ``vocab.json`` written in
    ``folder``) and a 16 kHz feature extractor."""
    import transformers

    os.makedirs(folder, exist_ok=True)
    vocab = os.path.join(folder, "vocab.json")
    with open(vocab, "w", encoding="utf-8") as f:
        json.dump({c: i for i, c in enumerate(CTC_CHARACTERS)}, f)
    tokenizer = transformers.Wav2Vec2CTCTokenizer(vocab, unk_token="<unk>", pad_token="<pad>",
                                                  word_delimiter_token="|")
    extractor = transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0,
                                                      do_normalize=True, return_attention_mask=True)
    return transformers.Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer)


def _labels(count: int, names: tuple[str, ...]) -> dict[str, Any]:
    id2label = {i: names[i] if i < len(names) else f"LABEL_{i}" for i in range(count)}
    return dict(id2label=id2label, label2id={v: k for k, v in id2label.items()})


def encoder_config(architecture: str, labels: tuple[str, ...] | None = None) -> Any:
    """The tiny configuration (2 layers, 32 hidden units) of a BERT, ViT, wav2vec2, DETR, DPT or SegFormer class
    (``labels``: the names of a classifier's labels, ``("entailment", "neutral", "contradiction")`` for a zero-shot
    classifier)."""
    import transformers

    if architecture.startswith("Bert"):
        names = labels or (("negative", "neutral", "positive") if "Sequence" in architecture else
                           ("O", "B-PER", "I-PER", "B-LOC", "I-LOC"))
        return transformers.BertConfig(
            vocab_size=len(bert_tokenizer()), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=128, architectures=[architecture],
            initializer_range=0.2, **_labels(len(names), names))  # weights large enough to give distinct scores
    if architecture.startswith("ViT"):
        return transformers.ViTConfig(
            image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, initializer_range=0.2, architectures=[architecture],
            **_labels(4, ("cat", "dog", "bird", "fish")))
    if architecture.startswith("Wav2Vec2"):
        return transformers.Wav2Vec2Config(
            vocab_size=len(CTC_CHARACTERS), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, conv_dim=(32, 32), conv_stride=(5, 4), conv_kernel=(10, 8),
            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, classifier_proj_size=16,
            pad_token_id=0, do_stable_layer_norm=True, feat_extract_norm="layer", architectures=[architecture],
            **_labels(3, ("speech", "music", "noise")))
    if architecture.startswith("Detr"):
        backbone = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                             layer_type="basic", out_features=["stage2"])
        return transformers.DetrConfig(
            use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone, d_model=32,
            encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=10, init_std=0.2, architectures=[architecture],
            **_labels(3, ("cat", "dog", "bird")))
    if architecture.startswith("DPT"):  # the task zoo's tiny DPT (4 layers of 64, 32x32 images)
        config = tiny_task_config(get_task_architecture("depth-estimation", "dpt"), initializer_range=0.075)
        config.architectures = [architecture]
        return config
    if architecture.startswith("Mask2Former"):  # the task zoo's tiny Mask2Former (a Swin backbone, 10 queries)
        config = tiny_task_config(get_task_architecture("universal-segmentation", "mask2former"),
                                  **_labels(3, ("sky", "sea", "sand")))
        config.architectures = [architecture]
        return config
    if architecture.startswith("Segformer"):  # the task zoo's tiny SegFormer, narrower
        config = tiny_task_config(get_task_architecture("semantic-segmentation", "segformer"),
                                  hidden_sizes=[16, 32, 32, 32], num_attention_heads=[1, 2, 2, 4],
                                  decoder_hidden_size=32, initializer_range=0.2, **_labels(3, ("sky", "sea", "sand")))
        config.architectures = [architecture]
        return config
    if architecture.startswith("VideoMAE"):  # clips of 4 frames of 32x32, tubelets of 2 frames
        return transformers.VideoMAEConfig(
            image_size=32, patch_size=8, num_frames=4, tubelet_size=2, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, initializer_range=0.2, architectures=[architecture],
            **_labels(3, ("running", "swimming", "jumping")))
    if architecture == "OwlViTForObjectDetection":  # CLIP's towers, a box head on the 4x4 patches of 32x32 images
        towers = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
        text = dict(towers, vocab_size=len(bert_tokenizer()), max_position_embeddings=32, pad_token_id=0,
                    bos_token_id=SPECIAL.index("[CLS]"), eos_token_id=SPECIAL.index("[SEP]"))
        return transformers.OwlViTConfig(text_config=text, vision_config=dict(towers, image_size=32, patch_size=8),
                                         projection_dim=32, architectures=[architecture])
    if architecture in ("CLIPModel", "SiglipModel", "Siglip2Model"):  # two towers of 2 layers of 32, WordPieces
        towers = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
        text = dict(towers, vocab_size=len(bert_tokenizer()), max_position_embeddings=64, pad_token_id=0,
                    bos_token_id=SPECIAL.index("[CLS]"), eos_token_id=SPECIAL.index("[SEP]"))  # CLIP pools at the end
        # SigLIP 2 (NaFlex): patches of 8 pixels, its position table of 4x4 resized to each image's grid
        vision = dict(towers, num_patches=16, patch_size=8) if architecture == "Siglip2Model" else \
            dict(towers, image_size=32, patch_size=8)
        config_class = {"CLIPModel": transformers.CLIPConfig, "SiglipModel": transformers.SiglipConfig,
                        "Siglip2Model": transformers.Siglip2Config}[architecture]
        extra = dict(projection_dim=16) if architecture == "CLIPModel" else {}
        return config_class(text_config=text, vision_config=vision, architectures=[architecture],
                            initializer_factor=4.0, **extra)
    if architecture == "ClapModel":  # a RoBERTa-like text tower, a 2-stage HTSAT audio tower on 16 mel bins
        text = dict(vocab_size=len(bert_tokenizer()), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=70, pad_token_id=0, projection_dim=16)
        audio = dict(spec_size=64, num_mel_bins=16, window_size=4, patch_size=4, patch_stride=(4, 4), depths=[1, 1],
                     num_attention_heads=[2, 2], patch_embeds_hidden_size=16, hidden_size=32, projection_dim=16,
                     enable_fusion=False)
        return transformers.ClapConfig(text_config=text, audio_config=audio, projection_dim=16,
                                       architectures=[architecture])
    raise ValueError(f"No tiny configuration for {architecture}: give a Bert*, ViT*, Wav2Vec2*, Detr*, DPT*, "
                     "Segformer*, VideoMAE*, CLIPModel, SiglipModel, Siglip2Model or ClapModel class.")


def write_encoder_folder(architecture: str, folder: str | os.PathLike, seed: int = 0,
                         labels: tuple[str, ...] | None = None) -> str:
    """Writes a ``save_pretrained`` folder of the tiny model of ``architecture`` (random weights, seeded) with its
    tokenizer, image processor or feature extractor; returns the folder."""
    import torch
    import transformers

    folder = os.fspath(folder)
    config = encoder_config(architecture, labels)
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config).eval()
    transformers.utils.logging.disable_progress_bar()  # no bar on the pages showing it
    try:
        model.save_pretrained(folder)
    finally:
        transformers.utils.logging.enable_progress_bar()
    if architecture.startswith("Bert"):
        bert_tokenizer().save_pretrained(folder)
    elif architecture == "OwlViTForObjectDetection":
        bert_tokenizer(("input_ids", "attention_mask")).save_pretrained(folder)
        transformers.OwlViTImageProcessor(size={"height": 32, "width": 32}, crop_size={"height": 32, "width": 32}
                                          ).save_pretrained(folder)
    elif architecture == "CLIPModel":  # CLIP's tokenizer gives no token type
        bert_tokenizer(("input_ids", "attention_mask")).save_pretrained(folder)
        transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
                                        ).save_pretrained(folder)
    elif architecture == "SiglipModel":  # SigLIP's tokenizer gives the ids only, padded to its 64 by the pipelines
        tokenizer = bert_tokenizer(("input_ids",))
        tokenizer.model_max_length = 64  # as the published ones: transformers.js pads to it
        tokenizer.save_pretrained(folder)
        transformers.SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    elif architecture == "Siglip2Model":  # each image resized to a grid of at most 24 patches, padded to 24
        bert_tokenizer(("input_ids",)).save_pretrained(folder)
        transformers.Siglip2ImageProcessor(patch_size=8, max_num_patches=24).save_pretrained(folder)
    elif architecture.startswith("ViT"):
        transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    elif architecture == "ClapModel":  # sounds of 1 s at most at 16 kHz, 16 mel bins (CLAP's: 10 s, 48 kHz, 64)
        bert_tokenizer(("input_ids", "attention_mask")).save_pretrained(folder)
        transformers.ClapFeatureExtractor(feature_size=16, sampling_rate=16000, hop_length=160, fft_window_size=1024,
                                          frequency_max=8000, max_length_s=1, truncation="rand_trunc",
                                          padding="repeatpad").save_pretrained(folder)
    elif architecture.startswith("VideoMAE"):
        transformers.VideoMAEVideoProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
                                            ).save_pretrained(folder)
    elif architecture.startswith("DPT"):
        transformers.DPTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    elif architecture.startswith("Mask2Former"):
        transformers.Mask2FormerImageProcessor(size={"height": 64, "width": 64}).save_pretrained(folder)
    elif architecture.startswith("Segformer"):
        transformers.SegformerImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    elif architecture.startswith("Detr"):  # images resized to 64 pixels on their shorter side, 96 at most
        transformers.DetrImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}).save_pretrained(folder)
    else:
        ctc_processor(folder).save_pretrained(folder)
    return folder


def write_sentence_folder(folder: str | os.PathLike, modes: tuple[str, ...] = ("mean",), normalize: bool = True,
                          seed: int = 0) -> str:
    """Writes a sentence-transformers folder as the published ones are laid out: the tiny BERT of
    :func:`write_encoder_folder` at the root, ``modules.json``, ``1_Pooling/config.json`` (the ``pooling_mode_*``
    booleans of ``modes``) and, when ``normalize``, ``2_Normalize``; returns the folder."""
    from ..deploy.sentence import LEGACY_MODES

    folder = write_encoder_folder("BertModel", folder, seed=seed)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        os.makedirs(os.path.join(folder, "2_Normalize"), exist_ok=True)
    os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
    pooling = {"word_embedding_dimension": encoder_config("BertModel").hidden_size,
               **{key: mode in modes for key, mode in LEGACY_MODES.items()}, "include_prompt": True}
    for name, content in (("modules.json", modules), (os.path.join("1_Pooling", "config.json"), pooling),
                          ("sentence_bert_config.json", {"max_seq_length": 128, "do_lower_case": False})):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2)
    return folder
