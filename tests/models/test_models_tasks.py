"""Discovery of the non-text tasks of transformers and their inputs, a few architectures per task."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from fx2onnx.models.task_inputs import build_task_inputs, check_task_architecture  # noqa: E402
from fx2onnx.models.tasks import (  # noqa: E402
    TASKS,
    count_by_task,
    discover_tasks,
    get_task_architecture,
    tiny_task_config,
    tiny_task_model,
)


def test_every_task_discovers_architectures_from_the_auto_mappings():
    archs = discover_tasks()
    counts = count_by_task(archs)
    assert set(counts) == set(TASKS)
    assert all(total > 0 for total, _ in counts.values()), counts
    names = {(a.task, a.name) for a in archs}
    for expected in [
        ("image-text-to-text", "llava"),
        ("speech-seq2seq", "whisper"),
        ("ctc", "wav2vec2"),
        ("image-classification", "vit"),
        ("object-detection", "detr"),
        ("zero-shot-image-classification", "clip"),
        ("video-classification", "videomae"),
        ("document-question-answering", "layoutlm"),
        ("time-series", "patchtst"),
    ]:
        assert expected in names
    # once per task
    assert len(names) == len(archs)
    with pytest.raises(ValueError, match="Unknown task"):
        discover_tasks(["translation-to-klingon"])


def test_tiny_configuration_reaches_the_sub_configurations():
    config = tiny_task_config(get_task_architecture("image-text-to-text", "llava"))
    assert config.text_config.hidden_size == 64
    assert config.text_config.num_hidden_layers == 2
    assert config.vision_config.hidden_size == 64
    assert config.vision_config.image_size == 32
    # a staged network keeps its number of stages (ConvNeXt maps num_hidden_layers to num_stages)
    convnext = tiny_task_config(get_task_architecture("image-classification", "convnext"))
    assert convnext.num_stages == 4 and list(convnext.depths) == [1, 1, 1, 1]


def test_image_text_inputs_have_one_placeholder_per_image_feature():
    arch = get_task_architecture("image-text-to-text", "llava")
    model, config = tiny_task_model(arch)
    inputs, shapes = build_task_inputs(arch.task, model, config, batch=2)
    per_image = (inputs["input_ids"][0] == config.image_token_id).sum()
    with torch.no_grad():
        features = model.get_image_features(inputs["pixel_values"], return_dict=True).pooler_output
        model(**inputs)  # the model accepts them: placeholders and features match
    assert per_image == features[0].shape[0]
    assert shapes["pixel_values"] == {0: "batch"}


def test_tasks_without_input_builders_say_so():
    arch = get_task_architecture("time-series", "patchtst")
    with pytest.raises(NotImplementedError, match="time-series"):
        build_task_inputs(arch.task, None, None)
    row = check_task_architecture(arch)
    assert row["status"] == "inputs" and "not built" in row["error"]


@pytest.mark.parametrize(
    "task,name",
    [
        ("image-classification", "vit"),
        ("object-detection", "detr"),
        ("semantic-segmentation", "segformer"),
        ("depth-estimation", "glpn"),
        ("audio-classification", "audio-spectrogram-transformer"),
        ("audio-classification", "whisper"),
        ("speech-seq2seq", "whisper"),
        ("zero-shot-image-classification", "clip"),
        ("video-classification", "videomae"),
        ("document-question-answering", "layoutlm"),
        ("image-text-to-text", "llava"),
    ],
)
def test_task_architecture_exports_with_a_dynamic_batch_and_matches_eager(task, name):
    row = check_task_architecture(get_task_architecture(task, name), batch=2, other_batch=3)
    assert row["status"] == "ok", row
    assert row["max_abs"] < 1e-4
