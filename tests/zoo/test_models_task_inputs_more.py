"""Inputs of the task models built from the forward's signature and the configuration: speech
encoders with another feature size, speech language models (audio placeholders), images as
patches / videos / a task prompt / pixel tokens, and the tiny configurations they need."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from fx2onnx.zoo.task_inputs import build_task_inputs, check_task_architecture  # noqa: E402
from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_config, tiny_task_model  # noqa: E402


def _build(task, name, batch=2):
    arch = get_task_architecture(task, name)
    model, config = tiny_task_model(arch)
    inputs, shapes = build_task_inputs(task, model, config, batch=batch)
    with torch.no_grad():
        model(**inputs)  # the model takes them
    return model, config, inputs, shapes


def test_encoder_features_of_the_size_the_model_takes():
    from fx2onnx.inputs.audio_inputs import feature_sizes

    # w2v-BERT projects feature_projection_input_dim (160) features, not mel bins
    _, config, inputs, shapes = _build("ctc", "wav2vec2-bert")
    assert feature_sizes(config)[0] == 160
    assert tuple(inputs["input_features"].shape) == (2, 64, 160) and shapes == {"input_features": {0: "batch"}}
    # Granite Speech 5 stacks four mel frames: 4 x 16 features
    _, config, inputs, _ = _build("ctc", "granite_speech5_ctc")
    assert inputs["input_features"].shape[0] == 2 and 4 * config.encoder_config.num_mel_bins in inputs["input_features"].shape


@pytest.mark.slow
def test_speech_language_model_prompt_has_one_placeholder_per_audio_embedding():
    model, config, inputs, shapes = _build("speech-seq2seq", "granite_speech")
    with torch.no_grad():
        embeddings = model.get_audio_features(inputs["input_features"][:1]).pooler_output
    per_sample = (inputs["input_ids"][0] == config.audio_token_id).sum().item()
    assert per_sample == embeddings.numel() // embeddings.shape[-1] > 0
    assert config.audio_token_id < config.text_config.vocab_size
    assert set(shapes) == {"input_ids", "attention_mask", "input_features"}
    # Qwen3-ASR splits the features in chunks of 2 x n_window frames and requires their mask
    _, config, inputs, _ = _build("speech-seq2seq", "qwen3_asr")
    assert inputs["input_features"].shape[-1] % (2 * config.audio_config.n_window) == 0
    assert inputs["input_features_mask"].shape == (2, inputs["input_features"].shape[-1])
    # VibeVoice ASR: raw audio [batch, 1, samples], its encoder's mean (sample=False), not a draw
    model, config, inputs, shapes = _build("speech-seq2seq", "vibevoice_asr")
    assert inputs["input_values"].dim() == 3 and inputs["sample"] is False and shapes["sample"] is None
    with torch.no_grad():
        first, second = model(**inputs).logits, model(**inputs).logits
    torch.testing.assert_close(first, second, rtol=0, atol=0)


@pytest.mark.slow
def test_images_in_the_form_the_forward_takes():
    # SigLIP 2 (NaFlex): patches, their mask and the grid of each image
    _, _, inputs, _ = _build("image-classification", "siglip2")
    assert inputs["pixel_values"].dim() == 3 and inputs["spatial_shapes"].tolist() == [[2, 2], [2, 2]]
    # a video model in an image task
    _, _, inputs, _ = _build("universal-segmentation", "videomt")
    assert inputs["pixel_values_videos"].dim() == 5
    # OneFormer: a task prompt beside the images
    _, _, inputs, _ = _build("universal-segmentation", "oneformer")
    assert inputs["task_inputs"].shape[0] == 2
    # ImageGPT: pixels as color-cluster tokens
    _, _, inputs, _ = _build("image-classification", "imagegpt")
    assert set(inputs) == {"input_ids"}
    # a classifier built on a vision-language model: the prompt with the image's placeholders
    _, config, inputs, _ = _build("image-classification", "shieldgemma2")
    assert (inputs["input_ids"] == config.image_token_id).sum() > 0 and inputs["pixel_values"].shape[0] == 2


@pytest.mark.slow
def test_tiny_configurations_of_the_heads_and_stages():
    # a DPT-like head sized for the 64-wide backbone (23.7 M parameters before, the head alone)
    model, _ = tiny_task_model(get_task_architecture("depth-estimation", "chmv2"))
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    config = tiny_task_config(get_task_architecture("depth-estimation", "zoedepth"))
    assert config.fusion_hidden_size == config.bottleneck_features == 64
    assert list(config.neck_hidden_sizes) == [16, 32, 64, 64]
    # EfficientNet's top convolution and batch norm agree (63 M parameters at width 2)
    model, _ = tiny_task_model(get_task_architecture("image-classification", "efficientnet"))
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    # MusicGen: one row of codes per codebook, its own dynamic dimension
    _, config, inputs, shapes = _build("text-to-audio", "musicgen")
    assert inputs["decoder_input_ids"].shape[0] == 2 * config.decoder.num_codebooks
    assert shapes["decoder_input_ids"] == {0: "batch_codebooks"}


@pytest.mark.parametrize(
    "task,name",
    [
        ("ctc", "wav2vec2-bert"),
        pytest.param("speech-seq2seq", "granite_speech", marks=pytest.mark.slow),
        pytest.param("image-classification", "donut-swin", marks=pytest.mark.slow),
        pytest.param("speech-seq2seq", "dia", marks=pytest.mark.slow),
    ],
)
def test_new_inputs_export_with_a_dynamic_batch_and_match_eager(task, name):
    row = check_task_architecture(get_task_architecture(task, name))
    assert row["success"], row
    assert row["max_abs"] < 1e-4
