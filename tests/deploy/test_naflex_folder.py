"""LFM2-VL (SigLIP 2's NaFlex tower): a tiny folder made in code (random weights, its tokenizer and processor) ->
``python -m fx2onnx export`` with no flag -> our loop gives transformers' greedy tokens, on the processor's inputs (a
small image whole; a large one cut into two tiles and a thumbnail of another grid) and on grids made in the test. The
grids of patches are values (``spatial_shapes``) the capture cannot read: the vision piece takes one image's grid as
the shape of ``pixel_values (1, rows, cols, values)`` (fx2onnx.deploy.naflex), the loop crops every image's padded
patches to its grid."""

from __future__ import annotations

import json
import os

import numpy as np
import PIL.Image
import pytest
import torch

from fx2onnx.__main__ import main
from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_config
from fx2onnx.runtime.families import open_generator
from fx2onnx.testing.vlm_folder import write_lfm2_vl_folder

NEW_TOKENS = 8


def _two_grids(config, values: int) -> dict:
    """Two images made in the test: a grid of 4 x 4 patches and one of 2 x 6 (12 real ones padded to 16), their 4
    and 3 placeholders."""
    g = torch.Generator().manual_seed(0)
    pixels = torch.randn(2, 16, values, generator=g)
    pixels[1, 12:] = 0
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 12:] = 0
    image = config.image_token_id
    ids = torch.tensor([[5, 9] + [image] * 4 + [11] + [image] * 3 + [17, 23]])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": pixels,
            "spatial_shapes": torch.tensor([[4, 4], [2, 6]]), "pixel_attention_mask": mask}


@pytest.mark.slow  # an export (about 15 s on a loaded machine) and three generations
def test_lfm2_vl_folder_gives_transformers_tokens(tmp_path):
    import transformers

    config = tiny_task_config(get_task_architecture("image-text-to-text", "lfm2_vl"))
    config.architectures = ["Lfm2VlForConditionalGeneration"]
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "onnx")
    write_lfm2_vl_folder(config, checkpoint, std=0.3)  # random weights, tokenizer, processor (tiles of 64 pixels)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0  # every piece checked against eager
    vision = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["vision"]
    assert vision["inputs"] == ["pixel_values"]  # the grid is its shape
    model = transformers.Lfm2VlForConditionalGeneration.from_pretrained(checkpoint).eval()
    generator = open_generator(out)
    sets, grids = [], []
    for shape in [(40, 56), (150, 100)]:  # as python -m fx2onnx generate --image runs the processor
        image = PIL.Image.fromarray((np.random.default_rng(0).random((*shape, 3)) * 255).astype("uint8"))
        sets.append({k: torch.from_numpy(v) for k, v in generator.inputs("describe the image", [image]).items()})
        grids.append(sets[-1]["spatial_shapes"].tolist())
    assert grids == [[[2, 4]], [[4, 4], [4, 4], [4, 2]]]  # a small image whole; two tiles and a thumbnail
    sets.append(_two_grids(model.config, sets[0]["pixel_values"].shape[-1]))
    for feeds in sets:
        with torch.no_grad():
            expected = model.generate(**feeds, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()
        assert len(set(expected[0, feeds["input_ids"].shape[1]:].tolist())) >= 3  # the tokens vary: a real check
        np.testing.assert_array_equal(np.asarray(generator.generate_ids(feeds, NEW_TOKENS)), expected)


@pytest.mark.slow  # an export and a generation (about 10 s)
def test_a_language_model_with_convolutions_gives_transformers_tokens(tmp_path):
    """The published LFM2-VL checkpoints' language model mixes short convolutions with attention: the decoder piece
    takes the convolution states beside the keys and values (the cache the text model returns, as the text-only LFM2
    decoder's), our loop starts them at zeros and feeds each step's back, and gives transformers' tokens on the
    processor's image."""
    import transformers

    config = tiny_task_config(get_task_architecture("image-text-to-text", "lfm2_vl"))
    config.architectures = ["Lfm2VlForConditionalGeneration"]
    config.text_config.num_hidden_layers = 3
    config.text_config.layer_types = ["conv", "full_attention", "conv"]
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "onnx")
    write_lfm2_vl_folder(config, checkpoint, std=0.3)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0  # every piece checked against eager
    model = transformers.Lfm2VlForConditionalGeneration.from_pretrained(checkpoint).eval()
    assert model.config.text_config.layer_types == ["conv", "full_attention", "conv"]
    generator = open_generator(out)
    states = [i.name for i in generator.decoder.session.get_inputs() if "conv" in i.name]
    assert len(states) == 2, states  # one convolution state per conv layer
    image = PIL.Image.fromarray((np.random.default_rng(0).random((40, 56, 3)) * 255).astype("uint8"))
    feeds = {k: torch.from_numpy(v) for k, v in generator.inputs("describe the image", [image]).items()}
    with torch.no_grad():
        expected = model.generate(**feeds, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()
    assert len(set(expected[0, feeds["input_ids"].shape[1]:].tolist())) >= 3  # the tokens vary: a real check
    np.testing.assert_array_equal(np.asarray(generator.generate_ids(feeds, NEW_TOKENS)), expected)
