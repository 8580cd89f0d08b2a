"""A GLM-OCR folder: the task zoo's tiny model and GLM-OCR's processor made in code (GLM-4.6V's image processor
resizing an image to blocks of 2 x 2 patches, the tiny tokenizer with GLM's image tokens) -> ``python -m fx2onnx
export`` (every piece checked against eager) -> Qwen2.5-VL's pieces and transformers.js' split (GLM-OCR runs in
transformers.js as Qwen2.5-VL does, its positions grouped by image placeholder): our loop and transformers.js (Node)
give transformers' greedy tokens on an image and a prompt."""

from __future__ import annotations

import json
import os

import numpy as np
import PIL.Image
import pytest
import torch
import transformers

from fx2onnx.__main__ import main
from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model
from fx2onnx.runtime.families import open_generator
from fx2onnx.testing.tokenizer import tiny_tokenizer
from test_speech_generic import transformersjs_seq2seq

NEW_TOKENS = 8
#: GLM's tokens around and inside an image (the processor expands ``<|image|>`` into the features of its image)
GLM_IMAGE_TOKENS = {"image_start_token_id": "<|begin_of_image|>", "image_token_id": "<|image|>",
                    "image_end_token_id": "<|end_of_image|>"}


def _processor(config) -> transformers.Glm46VProcessor:
    """GLM-OCR's processor made in code: an image resized to blocks of ``patch x merge`` pixels (64 patches at most),
    the tiny tokenizer with :data:`GLM_IMAGE_TOKENS`, the configuration's ids set to theirs."""
    vision = config.vision_config
    tok = tiny_tokenizer(384)
    tok.add_special_tokens({"additional_special_tokens": list(GLM_IMAGE_TOKENS.values())})
    for key, token in GLM_IMAGE_TOKENS.items():
        setattr(config, key, tok.convert_tokens_to_ids(token))
    side = vision.patch_size * vision.spatial_merge_size
    sizes = dict(patch_size=vision.patch_size, merge_size=vision.spatial_merge_size,
                 temporal_patch_size=vision.temporal_patch_size,
                 size={"shortest_edge": side * side, "longest_edge": 64 * vision.patch_size ** 2})
    return transformers.Glm46VProcessor(image_processor=transformers.Glm46VImageProcessor(**sizes),
                                        video_processor=transformers.Glm46VVideoProcessor(**sizes), tokenizer=tok)


@pytest.mark.slow  # an export (about 50 s on a loaded machine) and a Node run
def test_glm_ocr_folder_in_our_loop_and_transformersjs(tmp_path):
    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "glm_ocr"))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # matrices of std 0.3: tokens that vary (the zoo's initialization repeats one token)
        for parameter in model.parameters():
            if parameter.dim() >= 2:
                parameter.copy_(torch.randn(parameter.shape, generator=g) * 0.3)
    config.architectures = [type(model).__name__]
    processor = _processor(config)
    y, x = np.mgrid[0:50, 0:80] / 80.0
    image = PIL.Image.fromarray((np.stack([x, y, x * y], -1) * 255).astype(np.uint8))
    inputs = dict(processor(images=[image], text=["<|begin_of_image|><|image|><|end_of_image|>read the page"],
                            return_tensors="pt"))
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 6]]  # 56 x 84 pixels: 6 features of 2 x 2 patches
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()
    assert len(set(expected[0, inputs["input_ids"].shape[1]:].tolist())) > 3  # the tokens vary: a real check
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "onnx")
    model.save_pretrained(checkpoint)
    processor.save_pretrained(checkpoint)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0  # every piece checked against eager
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["pieces"]["vision"]["file"] == "onnx/vision_encoder.onnx" and "transformersjs" not in metadata
    assert {"vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx"} <= set(os.listdir(out + "/onnx"))
    np.testing.assert_array_equal(np.asarray(open_generator(out).generate_ids(inputs, NEW_TOKENS)), expected)
    feeds = {k: inputs[k].tolist() for k in ("input_ids", "attention_mask", "pixel_values", "image_grid_thw")}
    js = transformersjs_seq2seq(out, feeds, NEW_TOKENS, tmp_path, client="transformersjs_image_text.mjs")
    assert js == expected.tolist()
