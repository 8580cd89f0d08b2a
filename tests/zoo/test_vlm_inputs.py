"""Inputs of the vision-language models of the tasks zoo, per kind of image input."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from fx2onnx.zoo.task_inputs import build_task_case  # noqa: E402
from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_config, tiny_task_model  # noqa: E402
from fx2onnx.inputs.vlm_inputs import features_per_image, image_kind, image_text_inputs  # noqa: E402


def _model(name):
    return tiny_task_model(get_task_architecture("image-text-to-text", name))


def test_qwen2_vl_gets_a_grid_per_image_and_token_types():
    config = tiny_task_config(get_task_architecture("image-text-to-text", "qwen2_vl"))
    # the rotary sections of the modeling's default (16, 24, 24) scaled to the tiny head (16 / 2)
    text = config.text_config
    assert sum(text.rope_parameters["mrope_section"]) == text.hidden_size // text.num_attention_heads // 2
    model, config = _model("qwen2_vl")
    assert image_kind(model) == "grid_thw"
    for batch in (2, 3):
        inputs, shapes = image_text_inputs(model, config, batch)
        merge = config.vision_config.spatial_merge_size
        grid = inputs["image_grid_thw"]
        assert grid.tolist() == [[1, 2 * merge, 2 * merge]] * batch
        # one row of patches per (t, h, w), the channels of a temporal patch flattened
        vision = config.vision_config
        assert inputs["pixel_values"].shape == (
            batch * 4 * merge * merge, vision.in_channels * vision.temporal_patch_size * vision.patch_size**2)
        per_image = (inputs["input_ids"] == config.image_token_id).sum(dim=1)
        assert per_image.tolist() == [4] * batch  # 2 x 2 merged tokens
        assert torch.equal(inputs["mm_token_type_ids"], (inputs["input_ids"] == config.image_token_id).long())
        assert shapes["pixel_values"] == {0: "patches"} and shapes["image_grid_thw"] == {0: "batch"}
        with torch.no_grad():
            out = model(**inputs)
        assert out.logits.shape[:2] == inputs["input_ids"].shape


def test_llava_next_gets_tiles_and_image_sizes():
    model, config = _model("llava_next")
    # one tile resolution, the tiny image's: the base image and one tile
    assert config.image_grid_pinpoints == [[32, 32]]
    assert image_kind(model) == "image_sizes"
    inputs, shapes = image_text_inputs(model, config, 2)
    assert inputs["pixel_values"].shape == (2, 2, 3, 32, 32)
    assert inputs["image_sizes"].tolist() == [[32, 32], [32, 32]]
    n = features_per_image(model, {k: inputs[k] for k in ("pixel_values", "image_sizes")}, 2)
    assert ((inputs["input_ids"] == config.image_token_id).sum(dim=1) == n).all()
    with torch.no_grad():
        model(**inputs)
    # LLaVA takes image_sizes as an option only (Pixtral towers): plain images
    llava, _ = _model("llava")
    assert image_kind(llava) == "images"


@pytest.mark.parametrize("name,kind,extra", [
    ("lfm2_vl", "naflex", {"spatial_shapes", "pixel_attention_mask"}),
    ("idefics3", "pixel_attention_mask", {"pixel_attention_mask"}),
    pytest.param("aria", "pixel_mask", {"pixel_mask"}, marks=pytest.mark.slow),
    pytest.param("mistral3", "image_sizes", {"image_sizes"}, marks=pytest.mark.slow),
    # the Q-Former's queries as placeholders (an image token set in the tiny configuration) and its prompt
    pytest.param("instructblip", "images", {"qformer_input_ids", "qformer_attention_mask"}, marks=pytest.mark.slow),
])
def test_other_kinds_build_inputs_the_model_accepts(name, kind, extra):
    case = build_task_case(f"image-text-to-text/{name}")  # runs eager on both batches
    assert image_kind(case.model) == kind
    assert extra <= set(case.export_kwargs) and set(case.dynamic_shapes) == set(case.export_kwargs)
    assert case.check_kwargs["input_ids"].shape[0] == 3 and case.parameters < 2_000_000


def test_paddleocr_vl_patches_take_the_layout_its_tower_accepts():
    # PaddleOCR-VL's tower convolves [patches, channels, patch, patch]: the rows of Qwen2-VL fail,
    # the next layout is kept
    model, config = _model("paddleocr_vl")
    inputs, _ = image_text_inputs(model, config, 2)
    patch = config.vision_config.patch_size
    assert inputs["pixel_values"].shape[1:] == (3, patch, patch)
    with torch.no_grad():
        model(**inputs)


@pytest.mark.parametrize("name", [pytest.param("aria", marks=pytest.mark.slow)])
def test_vision_language_pair_exports_with_a_dynamic_batch_and_matches_eager(name):
    # Aria: images with their pixel mask; exported with a batch of 2 and checked on a batch of 3
    from fx2onnx.zoo.task_inputs import check_task_architecture

    row = check_task_architecture(get_task_architecture("image-text-to-text", name))
    assert row["success"], row
    assert row["step"] is None and row["max_abs"] < 1e-4


def test_minicpm_v_reads_its_packed_images():
    """MiniCPM-V's default configuration names no image token (its checkpoints do): without one the model drops
    the images silently; the tiny configuration sets one, the images packed in one row with their sizes."""
    model, config = _model("minicpmv4_6")
    assert isinstance(config.image_token_id, int)
    assert image_kind(model) == "target_sizes"
    inputs, _ = image_text_inputs(model, config, 2)
    assert inputs["pixel_values"].shape[0] == 1 and inputs["target_sizes"].tolist() == [[8, 8], [8, 8]]
    with torch.no_grad():
        logits = model(**inputs).logits
        other = model(**dict(inputs, pixel_values=inputs["pixel_values"] + 1)).logits
    assert (logits - other).abs().max() > 1e-3  # the images are read
