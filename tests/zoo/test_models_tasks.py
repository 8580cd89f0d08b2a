"""Discovery of the non-text tasks of transformers and their inputs, a few architectures per task."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from fx2onnx.zoo.task_inputs import build_task_inputs, check_task_architecture  # noqa: E402
from fx2onnx.inputs.tasks import (  # noqa: E402
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
    # a generic number does not replace a list (Mamba's conv_kernel over wav2vec2's kernel sizes):
    # the configuration keeps its other small sizes instead of falling back to the default
    hubert = tiny_task_config(get_task_architecture("audio-classification", "hubert"))
    assert hubert.hidden_size == 64 and len(hubert.conv_kernel) == 7
    # a backbone feeding its last hidden states to a neck indexes the layers it has
    backbone = tiny_task_config(get_task_architecture("depth-estimation", "depth_anything")).backbone_config
    assert backbone.num_hidden_layers == 4 and list(backbone.out_indices) == [1, 2, 3, 4]


def test_tiny_task_configuration_takes_the_causal_zoos_fixes_of_a_model_type():
    from fx2onnx.inputs.tasks import TaskArchitecture

    # Jamba's two tiny layers hold an attention layer (its default period of 8 left none: its cache failed)
    jamba = tiny_task_config(TaskArchitecture("feature-extraction", "jamba", "JambaModel"))
    assert jamba.num_hidden_layers == 2 and "attention" in jamba.layers_block_type
    # Cohere Compass' rotary parameters per layer type (its default has none: the model did not build)
    compass = tiny_task_config(TaskArchitecture("feature-extraction", "cohere_compass_text", "CohereCompassTextModel"))
    assert "full_attention" in compass.rope_parameters
    # Mistral 4's latent attention rotates half of the head: its head is twice the rotary size
    mistral4 = tiny_task_config(TaskArchitecture("feature-extraction", "mistral4", "Mistral4Model"))
    assert mistral4.head_dim * mistral4.rope_parameters["partial_rotary_factor"] == mistral4.qk_rope_head_dim
    # X-MOD's language, as a checkpoint saved after set_default_language() has it
    assert tiny_task_config(TaskArchitecture("feature-extraction", "xmod", "XmodModel")).default_language == "en_XX"


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


def test_models_whose_inputs_are_not_built_say_so():
    # BarkModel's forward takes no input_ids: the generic text-to-audio inputs do not apply
    with pytest.raises(NotImplementedError, match="takes no input_ids"):
        build_task_inputs("text-to-audio", torch.nn.Identity(), None)
    with pytest.raises(NotImplementedError, match="translation"):
        build_task_inputs("translation", None, None)


@pytest.mark.parametrize(
    "task,name",
    [
        # the fast tier: one image and one audio model; the other tasks are in the slow tier
        ("image-classification", "vit"),
        pytest.param("object-detection", "detr", marks=pytest.mark.slow),
        pytest.param("semantic-segmentation", "segformer", marks=pytest.mark.slow),
        pytest.param("depth-estimation", "glpn", marks=pytest.mark.slow),
        ("audio-classification", "audio-spectrogram-transformer"),
        pytest.param("audio-classification", "whisper", marks=pytest.mark.slow),
        pytest.param("speech-seq2seq", "whisper", marks=pytest.mark.slow),
        pytest.param("zero-shot-image-classification", "clip", marks=pytest.mark.slow),
        pytest.param("video-classification", "videomae", marks=pytest.mark.slow),
        pytest.param("document-question-answering", "layoutlm", marks=pytest.mark.slow),
        pytest.param("image-text-to-text", "llava", marks=pytest.mark.slow),
    ],
)
def test_task_architecture_exports_with_a_dynamic_batch_and_matches_eager(task, name):
    row = check_task_architecture(get_task_architecture(task, name))
    assert row["success"], row
    assert row["task"] == task and row["architecture"] == f"{task}/{name}" and row["shapes"] == "batch"
    assert row["max_abs"] < 1e-4


@pytest.mark.slow
def test_tasks_library_runs_time_series_rows_with_each_exporter():
    from fx2onnx.zoo.library_zoo import make_tasks, run_row

    tasks = make_tasks("tasks", only="^time-series/patchts")
    assert sorted({t[1] for t in tasks}) == ["time-series/patchtsmixer", "time-series/patchtst"]
    assert {t[3] for t in tasks} == {"to_onnx", "dynamo"} and {t[4] for t in tasks} == {"batch"}
    # one row per exporter (the four take a minute on a busy machine)
    for task in [t for t in tasks if (t[1], t[3]) in {("time-series/patchtsmixer", "to_onnx"),
                                                      ("time-series/patchtst", "dynamo")}]:
        row = run_row(*task)
        assert row["success"], row
        assert row["task"] == "time-series" and row["max_abs"] < 1e-4 and row["step"] is None


def test_a_model_random_in_eval_mode_is_not_compared():
    from fx2onnx.zoo.task_inputs import RandomEagerError, _check_deterministic

    with pytest.raises(RandomEagerError, match="another result on the same inputs"):
        _check_deterministic(torch.nn.Dropout(0.5).train(), {"input": torch.ones(4, 8)})
    _check_deterministic(torch.nn.Dropout(0.5).eval(), {"input": torch.ones(4, 8)})


def test_tasks_page_has_a_section_and_counts_per_task():
    from fx2onnx.zoo.library_report import task_summary, tasks_page
    from fx2onnx.zoo.library_zoo import _empty_row

    def row(key, exporter, step=None, max_abs=None, error=None):
        r = _empty_row("tasks", key, key.split("/")[1].upper(), exporter, "batch")
        r.update(success=step is None, step=step, max_abs=max_abs, error=error, parameters=10_000)
        return r

    rows = [
        row("image-classification/vit", "to_onnx", max_abs=1e-6),
        row("image-classification/vit", "dynamo", max_abs=2e-6),
        row("image-classification/beit", "to_onnx", "conversion", error="UnsupportedOpError: aten::foo"),
        row("image-classification/beit", "dynamo", "validation", 3.0, "discrepancy on the second input set"),
        row("text-to-audio/vits", "to_onnx", "model", error="RandomEagerError: eager gives another result"),
    ]
    discovered = {r["architecture"]: r["model"] for r in rows} | {"time-series/patchtst": "PatchTST"}
    meta = {"command": "python -m fx2onnx.zoo.library_zoo tasks", "date": "2026-11-26", "discovered": discovered}
    summary = {t["task"]: t for t in task_summary(rows, discovered)}
    vision = summary["image-classification"]
    assert (vision["discovered"], vision["built"], vision["captured"]) == (2, 2, 2)
    assert (vision["to_onnx_exported"], vision["to_onnx_matched"]) == (1, 1)
    assert (vision["dynamo_exported"], vision["dynamo_matched"]) == (2, 1)
    assert summary["text-to-audio"]["built"] == 0 and summary["time-series"]["run"] == 0
    text = tasks_page(rows, meta)
    for task in ("image-classification", "text-to-audio", "time-series"):
        assert f".. _lib-tasks-{task}:" in text and f"\n{task}\n{'-' * len(task)}\n" in text
    assert "lib-tasks-image-classification-beit-to_onnx-batch" in text and "✔ 1e-06" in text
    assert "Not run yet (1): ``patchtst``" in text


def test_tasks_page_has_a_generate_column_for_image_text_rows():
    from fx2onnx.zoo.library_report import tasks_page
    from fx2onnx.zoo.library_zoo import _empty_row, _generates

    def row(key, generate=None):
        r = _empty_row("tasks", key, key.split("/")[1].upper(), "to_onnx", "batch")
        r.update(success=True, max_abs=1e-6, parameters=10_000)
        if generate is not None:
            r["generate"] = generate
        return r

    rows = [row("image-text-to-text/llava", {"equal": True, "new_tokens": 8}),
            row("image-text-to-text/blip-2", {"equal": False, "error": "split: its image is a Q-Former's queries"}),
            row("image-classification/vit")]
    assert _generates(rows[0]) and not _generates(rows[2])
    meta = {"command": "python -m fx2onnx.zoo.library_zoo tasks", "date": "2026-11-28",
            "discovered": {r["architecture"]: r["model"] for r in rows}}
    text = tasks_page(rows, meta)
    assert "= 8" in text and "1 of 2 equal" in text
    assert ":ref:`≠ split <lib-tasks-image-text-to-text-blip-2-to_onnx-batch-generate>`" in text
    assert "Q-Former" in text
    vision = text[text.index(".. _lib-tasks-image-classification:"):text.index(".. _lib-tasks-image-text-to-text:")]
    assert "generate" not in vision  # the column only where the task generates
