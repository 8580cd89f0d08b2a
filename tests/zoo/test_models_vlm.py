"""A tiny LLaVA exported the way generation runs it: vision encoder, text decoder, one pass."""

from __future__ import annotations

import pytest
import torch

import fx2onnx

pytest.importorskip("transformers")

from fx2onnx.zoo.vlm import (  # noqa: E402
    TextDecoder,
    VisionEncoder,
    decoder_inputs,
    export_text_decoder,
    export_vision_encoder,
    greedy_eager,
    greedy_onnx,
    merge_image_features,
    one_pass_inputs,
    image_token_types,
    prompt_ids,
    tiny_gemma3,
    tiny_llava,
    vision_inputs,
)
from fx2onnx.validation import make_session  # noqa: E402

ONE_PASS_SHAPES = {
    "input_ids": {0: "batch", 1: "seq"},
    "pixel_values": {0: "images"},
    "attention_mask": {0: "batch", 1: "seq"},
}


@pytest.fixture(scope="module", params=["llava", pytest.param("gemma3", marks=pytest.mark.slow)])
def vlm(request):
    """Each tiny vision-language model: the split tests run on both (gemma3 in the slow tier)."""
    return tiny_llava() if request.param == "llava" else tiny_gemma3()


@pytest.fixture(scope="module")
def llava():
    return tiny_llava()


def test_vision_encoder_matches_get_image_features(vlm):
    pixel_values = vision_inputs(vlm, 3)
    with torch.no_grad():
        expected = vlm.model.model.get_image_features(pixel_values, return_dict=True).pooler_output
        got = VisionEncoder(vlm.model)(pixel_values)
    assert got.shape == (3, vlm.tokens_per_image, vlm.config.text_config.hidden_size)
    if isinstance(expected, (list, tuple)):  # LLaVA: one tensor per image
        expected = torch.stack(expected)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_vision_encoder_exports_with_a_dynamic_number_of_images(vlm):
    onx = _vision_onnx(vlm)  # export_vision_encoder(vlm, images=2), exported once per model
    dims = [d.dim_param or d.dim_value for d in onx.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["images", 3, vlm.image_size, vlm.image_size]
    for images in (1, 3, 5):
        report = fx2onnx.validate(onx, VisionEncoder(vlm.model), (vision_inputs(vlm, images, seed=images),))
        assert report.ok, (images, report)


@pytest.mark.parametrize("batch,seq,past", [(1, 5, 0), (3, 1, 7), (2, 4, 2), (4, 1, 0)])
def test_text_decoder_prefill_and_decode_on_other_sizes(vlm, batch, seq, past):
    onx = _decoder_onnx(vlm)
    presents = [f"present_{kind}_{i}" for i in range(vlm.num_layers) for kind in ("key", "value")]
    assert [o.name for o in onx.graph.output] == ["logits", *presents]
    # the eager model runs unpatched: only the cache registration is needed to flatten it
    with fx2onnx.torch_export_patches(patch_torch=False):
        report = fx2onnx.validate(onx, TextDecoder(vlm.model), (), decoder_inputs(vlm, batch, seq, past, seed=batch))
    assert report.ok, report


# the exports of each tiny model, made once and shared by the tests (keyed by id, the model kept
# beside its export so that its id cannot be reused by another one)
_DECODERS: dict[int, tuple[object, object]] = {}
_VISION: dict[int, tuple[object, object]] = {}


def _decoder_onnx(vlm):
    if id(vlm) not in _DECODERS:
        _DECODERS[id(vlm)] = vlm, export_text_decoder(vlm, batch=2, seq=3, past=4)
    return _DECODERS[id(vlm)][1]


def _vision_onnx(vlm):
    if id(vlm) not in _VISION:
        _VISION[id(vlm)] = vlm, export_vision_encoder(vlm, images=2)
    return _VISION[id(vlm)][1]


def test_merge_image_features_gives_the_model_forward(vlm):
    ids = prompt_ids(vlm, 2, 2, 3, seed=1)
    pixel_values = vision_inputs(vlm, 4, seed=1)
    extra = {"token_type_ids": image_token_types(vlm, ids)} if vlm.token_type_ids else {}
    with torch.no_grad():
        expected = vlm.model(input_ids=ids, pixel_values=pixel_values, **extra).logits
        embeds = merge_image_features(vlm.model, ids, VisionEncoder(vlm.model)(pixel_values), vlm.image_token_id)
        got = vlm.model(inputs_embeds=embeds, **extra).logits
    torch.testing.assert_close(got, expected)
    n = vlm.tokens_per_image
    with pytest.raises(ValueError, match=f"{4 * n} image placeholder tokens but {3 * n} image features"):
        merge_image_features(vlm.model, ids, VisionEncoder(vlm.model)(pixel_values[:3]), vlm.image_token_id)


@pytest.mark.parametrize("batch,images_per_prompt", [(2, 1), (1, 2), (3, 1)])
def test_greedy_decoding_on_onnxruntime_matches_eager_token_by_token(vlm, batch, images_per_prompt):
    vision = make_session(_vision_onnx(vlm))
    decoder = make_session(_decoder_onnx(vlm))
    ids = prompt_ids(vlm, batch, images_per_prompt, 4, seed=batch)
    pixel_values = vision_inputs(vlm, batch * images_per_prompt, seed=batch)
    expected_tokens, expected_logits = greedy_eager(vlm, ids, pixel_values, 5)
    tokens, logits = greedy_onnx(vlm, vision, decoder, ids, pixel_values, 5)
    assert torch.equal(tokens, expected_tokens)
    for step, (got, expected) in enumerate(zip(logits, expected_logits)):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-3, msg=f"step {step}")


def test_llava_patch_keeps_the_same_features(llava):
    vlm = llava
    pixel_values = vision_inputs(vlm, 3)
    with torch.no_grad():
        expected = torch.cat(vlm.model.model.get_image_features(pixel_values, return_dict=True).pooler_output)
        with fx2onnx.torch_export_patches(patch_transformers=True):
            patched = vlm.model.model.get_image_features(pixel_values, return_dict=True).pooler_output
    assert len(patched) == 1
    torch.testing.assert_close(patched[0], expected, rtol=0, atol=0)


@pytest.mark.slow
def test_one_pass_without_the_llava_patch_freezes_the_number_of_images(llava, monkeypatch):
    vlm = llava
    from transformers.models.llava.modeling_llava import LlavaModel

    from fx2onnx.zoo import export_dynamic_shapes

    original = LlavaModel.get_image_features
    with fx2onnx.torch_export_patches(patch_transformers=True):
        assert LlavaModel.get_image_features is not original  # the patch is applied
        monkeypatch.setattr(LlavaModel, "get_image_features", original)
        with pytest.raises(Exception, match=r"pixel_values.*shape\[0\]|pixel_values'\]\.size\(\)\[0\]"):
            torch.export.export(
                vlm.model,
                (),
                kwargs=one_pass_inputs(vlm, 2, 1, 5),
                dynamic_shapes=export_dynamic_shapes(ONE_PASS_SHAPES),
                strict=False,
            )
        monkeypatch.undo()


@pytest.mark.slow
def test_one_pass_exports_with_a_dynamic_number_of_images(llava):
    vlm = llava
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(vlm.model, (), kwargs=one_pass_inputs(vlm, 2, 1, 5), dynamic_shapes=ONE_PASS_SHAPES)
    dims = [d.dim_param or d.dim_value for d in onx.graph.input[1].type.tensor_type.shape.dim]
    assert dims == ["images", 3, vlm.image_size, vlm.image_size]
    for batch, images_per_prompt, text in [(3, 2, 4), (1, 3, 2), (2, 1, 5)]:
        inputs = one_pass_inputs(vlm, batch, images_per_prompt, text, seed=batch)
        report = fx2onnx.validate(onx, vlm.model, (), inputs, atol=1e-4)
        assert report.ok, ((batch, images_per_prompt, text), report)


@pytest.mark.slow
def test_gemma3_decoder_with_sliding_layers_exported_below_the_window():
    """Window 4, exported with a cache of 2 (below the window): right for caches longer than the
    window and in a greedy loop crossing it. The sliding layers' length has its own name: with
    ``past_seq`` for every layer, onnxruntime took the lengths as equal and failed past the window
    ('Shape mismatch attempting to re-use buffer')."""
    vlm = tiny_gemma3(sliding_window=4)
    onx = export_text_decoder(vlm, batch=2, seq=3, past=2)
    names = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim] for i in onx.graph.input}
    assert names["past_key_values_key_0"][2] == "sliding_seq" and names["past_key_values_key_1"][2] == "past_seq"
    with fx2onnx.torch_export_patches(patch_torch=False):
        for batch, seq, past in [(3, 1, 8), (1, 5, 2), (2, 2, 3)]:
            inputs = decoder_inputs(vlm, batch, seq, past, seed=past)
            report = fx2onnx.validate(onx, TextDecoder(vlm.model), (), inputs)
            assert report.ok, (batch, seq, past, report)
    ids = prompt_ids(vlm, 2, 1, 3, seed=2)
    pixel_values = vision_inputs(vlm, 2, seed=2)
    expected, _ = greedy_eager(vlm, ids, pixel_values, 6)
    got, _ = greedy_onnx(vlm, make_session(export_vision_encoder(vlm)), make_session(onx), ids, pixel_values, 6)
    assert torch.equal(got, expected)
