"""A tiny SpeechT5 text-to-speech folder made in code: the model, a character tokenizer, its HiFi-GAN vocoder in
``vocoder/`` and a default voice ``speaker_embeddings.npy`` (the layout :mod:`fx2onnx.deploy.speecht5` exports).

The prenet's dropout is 0 (transformers applies it at every run, in eval too: its output would change at each run);
the stop probability's bias makes the loop stop on its threshold after a few dozen steps on a long text and at its
length limit on a short one; the vocoder's weights are scaled so that the waveform spans most of [-1, 1].
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from .pipeline_folders import VITS_CHARACTERS, vits_tokenizer

#: the size of the speaker embedding (512 in microsoft/speecht5_tts)
SPEAKER_DIM = 8
#: the bias of the stop probability (two frames a step: their sum reaches 0.5 after some steps)
STOP_BIAS = -1.2


def speecht5_config() -> Any:
    """A SpeechT5 of 2 encoder and 2 decoder layers of 32 units, 16 mel bins, two frames a step, no prenet dropout."""
    import transformers

    return transformers.SpeechT5Config(
        vocab_size=len(VITS_CHARACTERS), hidden_size=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
        speech_decoder_prenet_units=32, speech_decoder_prenet_layers=2, speech_decoder_postnet_layers=2,
        speech_decoder_postnet_units=32, speaker_embedding_dim=SPEAKER_DIM, speech_decoder_prenet_dropout=0.0,
        max_speech_positions=512, max_text_positions=128, reduction_factor=2, pad_token_id=0,
        architectures=["SpeechT5ForTextToSpeech"])


def speecht5_vocoder(seed: int = 1) -> Any:
    """A tiny SpeechT5HifiGan (16 mel bins, 16 times upsampling, 16 kHz), weights of unit gain."""
    import torch
    import transformers

    torch.manual_seed(seed)
    vocoder = transformers.SpeechT5HifiGan(transformers.SpeechT5HifiGanConfig(
        model_in_dim=16, upsample_initial_channel=16, upsample_rates=[4, 4], upsample_kernel_sizes=[8, 8],
        resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3]], sampling_rate=16000)).eval()
    with torch.no_grad():
        for parameter in vocoder.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 1.0 / math.sqrt(parameter[0].numel()))
    return vocoder


def write_speecht5_folder(folder: str | os.PathLike, seed: int = 0, vocoder: bool = True,
                          speaker: bool = True) -> str:
    """Writes the folder (without its ``vocoder/`` or its ``speaker_embeddings.npy`` when told); returns it."""
    import torch
    import transformers

    folder = os.fspath(folder)
    torch.manual_seed(seed)
    model = transformers.SpeechT5ForTextToSpeech(speecht5_config()).eval()
    with torch.no_grad():
        model.speech_decoder_postnet.prob_out.bias.fill_(STOP_BIAS)
    transformers.utils.logging.disable_progress_bar()
    try:
        model.save_pretrained(folder)
        if vocoder:
            speecht5_vocoder(seed + 1).save_pretrained(os.path.join(folder, "vocoder"))
    finally:
        transformers.utils.logging.enable_progress_bar()
    vits_tokenizer(folder, add_blank=False).save_pretrained(folder)
    if speaker:
        np.save(os.path.join(folder, "speaker_embeddings.npy"),
                np.random.default_rng(seed).standard_normal(SPEAKER_DIM).astype(np.float32))
    return folder
