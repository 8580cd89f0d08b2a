"""LFM2-VL (SigLIP 2's NaFlex tower): the task zoo's tiny model saved by transformers -> ``python -m fx2onnx export``
with no flag -> our loop gives transformers' greedy tokens. The grids of patches are values (``spatial_shapes``) the
capture cannot read: the vision piece takes one image's grid as the shape of ``pixel_values (1, rows, cols, values)``
(fx2onnx.deploy.naflex), the loop crops every image's padded patches to its grid."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from fx2onnx.__main__ import main
from fx2onnx.inputs.vlm_inputs import image_text_inputs
from fx2onnx.runtime.families import open_generator
from test_transformersjs_image_text_split import _tiny_model

NEW_TOKENS = 8


def _two_grids(inputs: dict, config) -> dict:
    """A second image of a grid of 2 x 6 patches (12 real ones padded to the first's 16) and its 3 placeholders."""
    pixels = inputs["pixel_values"]
    second = pixels.flip(1) * 0.5
    second[:, 12:] = 0
    ids = inputs["input_ids"][0].tolist()
    at = len(ids) - ids[::-1].index(config.image_token_id)
    ids = torch.tensor([ids[:at] + [7] + [config.image_token_id] * 3 + ids[at:]])
    mask = torch.ones(1, pixels.shape[1], dtype=inputs["pixel_attention_mask"].dtype)
    mask[:, 12:] = 0
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": torch.cat([pixels, second]),
            "spatial_shapes": torch.tensor([[4, 4], [2, 6]]),
            "pixel_attention_mask": torch.cat([inputs["pixel_attention_mask"], mask])}


@pytest.mark.slow  # an export (about 15 s on a loaded machine) and two generations
def test_lfm2_vl_folder_gives_transformers_tokens(tmp_path):
    model, config = _tiny_model("lfm2_vl")
    config.architectures = config.architectures or [type(model).__name__]
    inputs, _ = image_text_inputs(model, config, batch=1)
    inputs = {k: v for k, v in inputs.items() if k != "position_ids"}
    assert inputs["spatial_shapes"].tolist() == [[4, 4]]
    model.generation_config.pad_token_id = model.generation_config.pad_token_id or 0
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "onnx")
    model.save_pretrained(checkpoint)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0  # every piece checked against eager
    vision = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["vision"]
    assert vision["inputs"] == ["pixel_values"]  # the grid is its shape
    generator = open_generator(out)
    for feeds in (inputs, _two_grids(inputs, config)):
        with torch.no_grad():
            expected = model.generate(**feeds, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()
        assert len(set(expected[0, feeds["input_ids"].shape[1]:].tolist())) > 3  # the tokens vary: a real check
        np.testing.assert_array_equal(np.asarray(generator.generate_ids(feeds, NEW_TOKENS)), expected)
