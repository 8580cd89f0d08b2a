"""An audio classifier whose feature extractor pads every sound to one length (Whisper's window): the export's
example inputs are padded as transformers' pipeline pads them, and the folder equals the pipeline."""

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")

import fx2onnx  # noqa: E402
from fx2onnx.deploy import export_folder  # noqa: E402
from fx2onnx.deploy.encoder import pads_to_max_length  # noqa: E402


def test_a_whisper_extractor_pads_to_its_window_a_wav2vec2_one_does_not():
    assert pads_to_max_length(transformers.WhisperFeatureExtractor(feature_size=16, chunk_length=1))
    assert not pads_to_max_length(transformers.Wav2Vec2FeatureExtractor())


@pytest.mark.slow
def test_whisper_audio_classifier_folder_equals_transformers(tmp_path):
    # 50 positions: a 1 s window of 100 frames, the feature extractor's
    config = transformers.WhisperConfig(
        d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=50, num_labels=3,
        classifier_proj_size=16, architectures=["WhisperForAudioClassification"])
    checkpoint = str(tmp_path / "checkpoint")
    transformers.WhisperForAudioClassification(config).eval().save_pretrained(checkpoint)
    transformers.WhisperFeatureExtractor(feature_size=16, chunk_length=1).save_pretrained(checkpoint)
    result = export_folder(checkpoint, tmp_path / "out")
    assert result.ok and result.task == "audio-classification", result.check_lines()
    rng = np.random.default_rng(0)
    sounds = [rng.standard_normal(n).astype(np.float32) for n in (4000, 11000)]  # shorter than the window, longer
    got = fx2onnx.pipeline(str(tmp_path / "out"))(sounds)
    expected = transformers.pipeline("audio-classification", model=checkpoint)(sounds)
    for g, e in zip(got, expected):
        assert [x["label"] for x in g] == [x["label"] for x in e]
        np.testing.assert_allclose([x["score"] for x in g], [x["score"] for x in e], atol=1e-4)
