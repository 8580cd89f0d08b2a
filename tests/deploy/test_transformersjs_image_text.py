"""A float32 LLaVA folder -> ``export`` -> the split transformers.js loads for an image-text model
(``onnx/embed_tokens.onnx``, ``onnx/vision_encoder.onnx``, ``onnx/decoder_model_merged.onnx`` on ``inputs_embeds``,
:mod:`fx2onnx.deploy.transformersjs_split`), each piece checked against eager by the export; transformers.js (Node,
headless Chromium) and our loop on the same folder give transformers' greedy tokens. The image is made in code."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnx
import pytest
import torch
import transformers

from fx2onnx.__main__ import main
from test_speech_generic import transformersjs_seq2seq

NEW_TOKENS = 10
pytestmark = pytest.mark.slow  # one export of about a minute shared by the module


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A float32 LLaVA checkpoint folder, the folder ``export`` wrote from it, the processor's outputs on a prompt with
    one image and transformers' greedy sequence on them."""
    import PIL.Image

    from fx2onnx.testing import vlm_folder

    root = tmp_path_factory.mktemp("llava_js")
    checkpoint, out = str(root / "llava"), str(root / "llava_onnx")
    vlm_folder.write_llava_folder(vlm_folder.tiny_llava_config(), checkpoint, dtype="float32", std=0.3)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0  # every piece checked against eager
    x = np.linspace(0, 1, 24)
    image = PIL.Image.fromarray((np.stack([np.outer(x, x), np.outer(1 - x, x), np.outer(x, 1 - x)], -1) * 255)
                                .astype(np.uint8))
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    inputs = processor(images=[image], text="<image>\ndescribe the image", return_tensors="pt")
    model = transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False).tolist()
    assert len(set(expected[0][inputs["input_ids"].shape[1]:])) > 3  # the tokens vary: a real check
    return out, {k: v.tolist() for k, v in inputs.items()}, expected


def test_the_split_has_transformersjs_files_and_names(folders):
    out, _, _ = folders
    pieces = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]
    assert {p: pieces[p]["file"] for p in ("vision", "embed_tokens", "decoder_model_merged")} == {
        "vision": "onnx/vision_encoder.onnx", "embed_tokens": "onnx/embed_tokens.onnx",
        "decoder_model_merged": "onnx/decoder_model_merged.onnx"}
    merged = onnx.load(os.path.join(out, "onnx", "decoder_model_merged.onnx"), load_external_data=False)
    assert [i.name for i in merged.graph.input][:3] == ["inputs_embeds", "attention_mask", "position_ids"]
    assert {"past_key_values.1.value", "present.1.value", "logits"} <= {v.name for v in
                                                                          [*merged.graph.input, *merged.graph.output]}
    # the present is fed back by transformers.js: never updated in place
    assert pieces["decoder_model_merged"]["cache_update"] == "concatenated"
    embed = onnx.load(os.path.join(out, "onnx", "embed_tokens.onnx"), load_external_data=False)
    assert ([i.name for i in embed.graph.input], [o.name for o in embed.graph.output]) == (["input_ids"],
                                                                                          ["inputs_embeds"])
    block = json.load(open(os.path.join(out, "config.json")))["transformers.js_config"]
    assert set(block["use_external_data_format"]) == {"vision_encoder.onnx", "embed_tokens.onnx",
                                                      "decoder_model_merged.onnx"}
    for name in block["use_external_data_format"]:  # the weights' files as transformers.js names them
        assert os.path.isfile(os.path.join(out, "onnx", name + "_data"))


def test_our_loop_gives_transformers_tokens(folders):
    from fx2onnx.runtime.vision import VisionGenerator

    out, inputs, expected = folders
    tokens = VisionGenerator(out).generate_ids({k: np.asarray(v) for k, v in inputs.items()}, NEW_TOKENS)
    assert tokens.tolist() == expected


def test_transformersjs_gives_transformers_tokens(folders, tmp_path):
    """transformers.js' AutoModelForImageTextToText in Node (tests/clients/transformersjs_image_text.mjs) and in
    headless Chromium (onnxruntime-web, WASM) on the processor's outputs."""
    out, inputs, expected = folders
    assert transformersjs_seq2seq(out, inputs, NEW_TOKENS, tmp_path, client="transformersjs_image_text.mjs") == expected
    if shutil.which("chromium"):
        assert transformersjs_seq2seq(out, inputs, NEW_TOKENS, tmp_path, browser=True) == expected
