"""Fixtures shared by the folder tests."""

from __future__ import annotations

import pytest

from fx2onnx.__main__ import main
from fx2onnx.testing.tokenizer import tiny_qwen3_config, write_checkpoint_folder


@pytest.fixture(scope="session")
def qwen3_export(tmp_path_factory) -> tuple[str, str]:
    """A bf16 Qwen3 checkpoint with a tokenizer, and the folder ``export`` (no flag) wrote from it, exported once per
    test process; the tests read both, and copy them before changing anything."""
    root = tmp_path_factory.mktemp("qwen3_export")
    checkpoint, out = str(root / "qwen3"), str(root / "qwen3_onnx")
    write_checkpoint_folder(tiny_qwen3_config(), checkpoint, dtype="bfloat16", std=0.3)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return checkpoint, out


@pytest.fixture(scope="session")
def t5_export(tmp_path_factory) -> tuple[str, str]:
    """A float32 T5 checkpoint with a tokenizer, and the folder ``export`` (no flag) wrote from it
    (onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx), once per test process."""
    from fx2onnx.testing.seq2seq_folder import write_text_seq2seq_folder

    root = tmp_path_factory.mktemp("t5_export")
    checkpoint, out = str(root / "t5"), str(root / "t5_onnx")
    write_text_seq2seq_folder(checkpoint, "t5")
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return checkpoint, out


@pytest.fixture(scope="session")
def whisper_export(tmp_path_factory) -> tuple[str, str, list]:
    """A float32 Whisper checkpoint (a tokenizer, a feature extractor), the folder ``export`` wrote from it and the
    input features of a chirp (batch 1), once per test process."""
    import numpy as np
    import transformers

    from fx2onnx.testing.speech_folder import write_whisper_folder

    root = tmp_path_factory.mktemp("whisper_export")
    checkpoint, out = str(root / "whisper"), str(root / "whisper_onnx")
    config = transformers.WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                        num_mel_bins=80, max_source_positions=50, max_target_positions=64)
    write_whisper_folder(config, checkpoint, dtype="float32", std=0.6)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    rate = 16000
    t = np.arange(int(0.75 * rate)) / rate
    chirp = (0.5 * np.sin(2 * np.pi * (220.0 + 400.0 * t) * t)).astype(np.float32)
    extractor = transformers.AutoFeatureExtractor.from_pretrained(checkpoint, local_files_only=True)
    features = extractor([chirp], sampling_rate=rate, return_tensors="np")["input_features"]
    return checkpoint, out, features.tolist()
