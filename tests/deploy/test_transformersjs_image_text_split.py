"""SmolVLM, LightOnOCR and Qwen3-VL-MoE folders in transformers.js: the task zoo's tiny model saved by transformers
-> ``python -m fx2onnx export`` -> the split transformers.js loads (onnx/vision_encoder.onnx, onnx/embed_tokens.onnx,
onnx/decoder_model_merged.onnx; fx2onnx.deploy.transformersjs_split), which our loop reads too: both give
transformers' greedy tokens. SmolVLM's vision encoder takes the processor's tiles ``(prompts, tiles, 3, H, W)`` and
its boolean ``pixel_attention_mask`` as transformers.js' Idefics 3 processor makes them (one tile, then two);
LightOnOCR's is Mistral 3's (one image); Qwen3-VL-MoE's is Qwen3-VL's, its decoder the mixture of experts."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from fx2onnx.__main__ import main
from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model
from fx2onnx.inputs.vlm_inputs import image_text_inputs
from fx2onnx.runtime.families import open_generator
from test_speech_generic import transformersjs_seq2seq

NEW_TOKENS = 8
#: the standard deviation of the random matrices: tokens that vary (the zoo's initialization repeats one token)
STD = 0.3


def _tiny_model(name: str):
    model, config = tiny_task_model(get_task_architecture("image-text-to-text", name))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2:  # matrices, embeddings, convolutions; the norms kept
                parameter.copy_(torch.randn(parameter.shape, generator=g) * STD)
    return model, config


def _with_vision_markers(inputs: dict, config) -> dict:
    """Qwen-VL's image placeholders between ``<|vision_start|>`` and ``<|vision_end|>``, as its processor writes
    them: transformers.js finds an image's positions after the start marker (transformers from the placeholders)."""
    # the tiny configuration's markers are its checkpoints' (151652, 151653), outside its vocabulary of 1024
    config.vision_start_token_id, config.vision_end_token_id = 1020, 1021
    ids = inputs["input_ids"][0].tolist()
    first = ids.index(config.image_token_id)
    last = len(ids) - ids[::-1].index(config.image_token_id)
    ids = ids[:first] + [config.vision_start_token_id] + ids[first:last] + [config.vision_end_token_id] + ids[last:]
    types = inputs["mm_token_type_ids"][0].tolist()
    types = types[:first] + [0] + types[first:last] + [0] + types[last:]
    ids = torch.tensor([ids])
    return {**inputs, "input_ids": ids, "attention_mask": torch.ones_like(ids),
            "mm_token_type_ids": torch.tensor([types])}


def _two_tiles(inputs: dict, config) -> dict:
    """SmolVLM's inputs with a second tile (the first one's pixels reversed, halved) and its placeholders."""
    pixels = inputs["pixel_values"]
    ids = inputs["input_ids"][0].tolist()
    at = ids.index(config.image_token_id)
    ids = torch.tensor([ids[:at + 1] + [config.image_token_id] * ids.count(config.image_token_id) + ids[at + 1:]])
    return {**inputs, "pixel_values": torch.cat([pixels, pixels.flip(-1) * 0.5], 1),
            "pixel_attention_mask": torch.cat([inputs["pixel_attention_mask"]] * 2, 1),
            "input_ids": ids, "attention_mask": torch.ones_like(ids)}


@pytest.mark.slow  # an export (about 30 s on a loaded machine) and a Node run each
@pytest.mark.parametrize("name", ["smolvlm", "lighton_ocr", "qwen3_vl_moe"])
def test_split_in_transformersjs_and_our_loop_gives_transformers_tokens(name, tmp_path):
    model, config = _tiny_model(name)
    config.architectures = config.architectures or [type(model).__name__]
    inputs, _ = image_text_inputs(model, config, batch=1)
    inputs = {k: v for k, v in inputs.items() if k != "position_ids"}  # computed by generate and by the loops
    if hasattr(config, "vision_start_token_id"):  # written in config.json by save_pretrained below
        inputs = _with_vision_markers(inputs, config)
    model.generation_config.pad_token_id = model.generation_config.pad_token_id or 0
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()
    assert len(set(expected[0, inputs["input_ids"].shape[1]:].tolist())) > 3  # the tokens vary: a real check
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "onnx")
    model.save_pretrained(checkpoint)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0  # every piece checked against eager
    assert {"vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx"} <= set(os.listdir(out + "/onnx"))
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    vision = metadata["pieces"].get("vision_encoder") or metadata["pieces"]["vision"]  # Qwen3-VL's its own piece
    assert vision["file"] == "onnx/vision_encoder.onnx"
    assert "transformersjs" not in metadata and "transformers.js_config" in json.load(open(out + "/config.json"))
    sets = [(inputs, expected)]
    if name == "smolvlm":  # an image split into two tiles, as Idefics 3's processor splits one
        tiled = _two_tiles(inputs, config)
        with torch.no_grad():
            sets.append((tiled, model.generate(**tiled, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()))
    for feeds, tokens in sets:
        got = np.asarray(open_generator(out).generate_ids(feeds, NEW_TOKENS))
        np.testing.assert_array_equal(got, tokens)
        js = transformersjs_seq2seq(out, {k: v.int().tolist() if v.dtype == torch.bool else v.tolist()
                                          for k, v in feeds.items()}, NEW_TOKENS, tmp_path,
                                    client="transformersjs_image_text.mjs")
        assert js == tokens.tolist()


def test_a_folder_without_the_files_transformersjs_loads_says_so():
    """A folder of pieces none of which is under onnx/ (an image-text family without transformers.js' split) says in
    one line that transformers.js does not run it (fx2onnx.json's ``transformersjs``, printed by the command)."""
    from fx2onnx.deploy.transformersjs import pieces_refusal

    why = pieces_refusal("internvl", ["vision.onnx", "decoder.onnx"])
    assert why.startswith("this internvl folder holds none of the files transformers.js loads") and "\n" not in why
    assert pieces_refusal("smolvlm", ["onnx/vision_encoder.onnx", "decoder.onnx"]) is None
