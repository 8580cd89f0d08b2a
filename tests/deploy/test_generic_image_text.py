"""Image-text-to-text models without pieces of their own: the generic split (a vision piece over what
``get_image_features`` takes, the decoder writing the features over the placeholders), a folder written by
transformers' ``save_pretrained`` (the layout it saves: ``language_model.model...``) -> export -> greedy tokens
equal to transformers' ``generate``; what cannot be split says why."""

from __future__ import annotations

import pytest
import torch

from fx2onnx.deploy.image_text_generic import UnsplittableModel, generic_vision_pieces, split_reason
from fx2onnx.zoo.task_generate import compare_folder_generation
from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model
from fx2onnx.weights.checkpoint import checkpoint_files, checkpoint_weights


def _model(name):
    return tiny_task_model(get_task_architecture("image-text-to-text", name))


def test_a_folder_in_the_layout_transformers_saves_is_read_under_the_models_names(tmp_path):
    model, _ = _model("llava")
    model.save_pretrained(tmp_path)
    keys = set(checkpoint_files(tmp_path))
    names = [n for n, _ in model.named_parameters()]
    assert not keys & {"model.language_model.embed_tokens.weight"}  # saved as language_model.model...
    weights = checkpoint_weights(tmp_path, model)
    assert set(weights) == set(names)
    state = model.state_dict()
    for name in ("model.language_model.embed_tokens.weight", "lm_head.weight",
                 "model.multi_modal_projector.linear_1.weight"):
        assert torch.equal(torch.from_numpy(weights[name].numpy()), state[name]), name


# aya_vision in the slow tier (make test-all): 11 s, paligemma keeps the split in make test
@pytest.mark.parametrize("name", [pytest.param("aya_vision", marks=pytest.mark.slow), "paligemma"])
def test_generic_split_generates_transformers_tokens(name):
    model, config = _model(name)
    assert split_reason(model, config) is None
    vision, decoder = generic_vision_pieces(model, config)
    assert vision.input_names[0] == "pixel_values" and "image_features" in decoder.inputs
    result = compare_folder_generation(model, config, max_new_tokens=6)
    assert result["equal"], result
    assert result["new_tokens"] == 6


def test_what_cannot_be_split_says_why():
    model, config = _model("git")  # the image is a prefix of the prompt, no placeholder (deploy.image_prefix's)
    with pytest.raises(UnsplittableModel, match="names no image placeholder token"):
        generic_vision_pieces(model, config)
    model, config = _model("minicpmv4_6")  # a language model with linear attention layers (a recurrent state)
    result = compare_folder_generation(model, config)
    assert not result["equal"] and result["error"].startswith("split: its language model has linear_attention"), \
        result


@pytest.mark.slow  # importing Gemma 4's modules: 8 s on a loaded machine
def test_per_layer_embeddings_are_refused_with_their_reason():
    """Gemma 4 (and Gemma 3n) look up per-layer embeddings from the token ids: the decoder piece, fed the prompt's
    embeddings with the image features over the placeholders, cannot compute them; the split says so first."""
    import transformers

    text = transformers.Gemma4TextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=1024,
                                         hidden_size_per_layer_input=16, vocab_size_per_layer_input=1024)
    vision = transformers.Gemma4VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=2, num_key_value_heads=2, head_dim=16, patch_size=4,
                                             pooling_kernel_size=2, position_embedding_size=64)
    config = transformers.Gemma4Config(text_config=text, vision_config=vision, image_token_id=1023)
    with torch.device("meta"):  # the reason is read from the modules, no weight needed
        model = transformers.Gemma4ForConditionalGeneration(config)
    reason = split_reason(model, config)
    assert reason.startswith("its language model adds per-layer embeddings looked up from the token ids"), reason
    with pytest.raises(UnsplittableModel, match="per-layer embeddings"):
        generic_vision_pieces(model, config)


@pytest.mark.slow  # make test keeps to its 5 minutes; CI runs make test-all
def test_instructblip_q_former_reads_the_prompt():
    """BLIP-2's layout (towers beside a causal language model, no base model); InstructBLIP's Q-Former
    reads the prompt tokenized for it: inputs of the vision piece, of their own length."""
    model, config = _model("instructblip")
    vision, decoder = generic_vision_pieces(model, config)
    assert vision.input_names == ["pixel_values", "qformer_input_ids", "qformer_attention_mask"]
    assert vision.dynamic_shapes["qformer_input_ids"] == {0: "images", 1: "qformer_seq"}
    assert type(decoder.module).__name__ == "LanguageModelDecoderPiece"
    result = compare_folder_generation(model, config)
    assert result["equal"], result


# blip-2's layout (a language model beside its towers), aria (its image features read .item(): found on
# uninitialized CPU storage, its vision piece takes a boolean pixel mask)
@pytest.mark.slow
@pytest.mark.parametrize("name", ["internvl", "got_ocr2", "idefics3", "qwen3_vl_moe", "blip-2", "aria"])
def test_more_families_generate_transformers_tokens(name):
    model, config = _model(name)
    result = compare_folder_generation(model, config)
    assert result["equal"], result
    assert result["new_tokens"] == 8


@pytest.mark.slow
def test_smolvlm_vision_piece_keeps_the_batch_dynamic():
    """SmolVLM's get_image_features (Idefics 3's copy) splits the features per prompt with tolist(), which
    specialized the vision piece's batch at capture: the piece uses the replacement of fx2onnx.patches.idefics3
    (the same features as one tensor), equal to the original's concatenation; the folder gives transformers'
    tokens."""
    from fx2onnx.deploy.image_text_generic import one_tensor_features_function
    from fx2onnx.inputs.vlm_inputs import flat_image_features, image_features_function

    model, config = _model("smolvlm")
    vision, _ = generic_vision_pieces(model, config)
    replaced, original = one_tensor_features_function(model), image_features_function(model)
    assert replaced is not original
    for inputs in (vision.inputs, vision.inputs2):
        pixels, rest = inputs["pixel_values"], {k: v for k, v in inputs.items() if k != "pixel_values"}
        with torch.no_grad():
            torch.testing.assert_close(flat_image_features(replaced, pixels, **rest),
                                       flat_image_features(original, pixels, **rest), atol=0, rtol=0)
    result = compare_folder_generation(model, config)
    assert result["equal"], result
    assert result["new_tokens"] == 8


@pytest.mark.slow
def test_lighton_ocr_runs_images_of_one_size():
    """LightOnOCR (a Pixtral vision encoder, features counted from image_sizes' values: the generic vision piece
    failed at capture) gets Mistral 3's pieces (fx2onnx.deploy.pixtral): the vision piece on a batch of images of one
    size (the loop crops a padded one to its size); the folder gives transformers' tokens."""
    from fx2onnx.deploy.image_text import vision_pieces
    from fx2onnx.deploy.pixtral import ImagesVisionPiece

    model, config = _model("lighton_ocr")
    vision = vision_pieces(model, config)[0]
    assert isinstance(vision.module, ImagesVisionPiece) and vision.input_names == ["pixel_values"]
    result = compare_folder_generation(model, config)
    assert result["equal"], result
    assert result["new_tokens"] == 8
