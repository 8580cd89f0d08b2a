"""LLaVA-OneVision ("anyres": each image resized, then cut into the tiles of the resolution that fits it best): a
tiny folder made in code (random weights, resolutions of 1 x 1 to 2 x 2 tiles, 4 x 4 features a tile, its tokenizer
and processor) -> ``python -m fx2onnx export`` with no flag -> our loop gives transformers' greedy tokens, on the
processor's inputs for an image and on tiles made in the test. The tiles' count and grid and
the crop of the padding are read from the image sizes' values, which the capture cannot do: the vision piece takes one
image, its tiles laid out on their grid (the shape), the crop a mask computed in the graph (fx2onnx.deploy.anyres);
the loop picks each image's grid (transformers' select_best_resolution)."""

from __future__ import annotations

import json
import os

import numpy as np
import PIL.Image
import pytest
import torch

from fx2onnx.__main__ import main
from fx2onnx.deploy.anyres import kept_mask
from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_config
from fx2onnx.runtime.families import open_generator
from fx2onnx.testing.vlm_folder import write_llava_onevision_folder

NEW_TOKENS = 8
#: the resolutions of the tiny model: grids of 1 x 1, 1 x 2, 2 x 1 and 2 x 2 tiles of 32 pixels
PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64]]


def _tiny_config(aspect_ratio: str = "anyres_max_9"):
    config = tiny_task_config(get_task_architecture("image-text-to-text", "llava_onevision"))
    config.vision_aspect_ratio = aspect_ratio
    config.vision_config.patch_size = 8  # 4 x 4 features a tile: a crop of the padding has rows to drop
    config.image_grid_pinpoints = PINPOINTS
    config.architectures = ["LlavaOnevisionForConditionalGeneration"]
    return config


def _inputs(model, config, sizes: list[tuple[int, int]]) -> dict:
    """Images of ``sizes`` (the whole image and its tiles, random pixels, padded to 5) and a prompt holding as many
    placeholders as transformers' features."""
    g = torch.Generator().manual_seed(len(sizes))
    pixels = torch.randn(len(sizes), 5, 3, 32, 32, generator=g)
    image_sizes = torch.tensor(sizes)
    with torch.no_grad():
        features = model.model.get_image_features(pixel_values=pixels, image_sizes=image_sizes).pooler_output
    count = sum(f.shape[0] for f in features)
    ids = torch.tensor([[5, 9] + [config.image_token_index] * count + [11, 17, 23]])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": pixels,
            "image_sizes": image_sizes}


@pytest.mark.slow  # an export (about 15 s on a loaded machine) and four generations
# anyres_max_9: no grid shrinks (at most 2 x 2 tiles); anyres_max_1: transformers shrinks every grid over 1 tile to a
# size read from the image's (the published checkpoints' 6 x 6 tiles over anyres_max_9 alike)
@pytest.mark.parametrize("aspect_ratio", ["anyres_max_9", "anyres_max_1"])
def test_llava_onevision_folder_gives_transformers_tokens(aspect_ratio, tmp_path):
    import transformers

    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "onnx")
    write_llava_onevision_folder(_tiny_config(aspect_ratio), checkpoint, std=0.3)  # random weights, tokenizer, processor
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0  # every piece checked against eager
    vision = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["vision"]
    assert vision["inputs"] == ["pixel_values", "grid_pixel_values", "image_sizes"]
    model = transformers.LlavaOnevisionForConditionalGeneration.from_pretrained(checkpoint).eval()
    generator = open_generator(out)
    # the processor on a wide image of 20 x 64 pixels (1 x 2 tiles), as python -m fx2onnx generate --image runs it
    image = PIL.Image.fromarray((np.random.default_rng(0).random((20, 64, 3)) * 255).astype("uint8"))
    processed = generator.inputs("describe the image", [image])
    sets = [{k: torch.from_numpy(v) for k, v in processed.items()}]
    # a square image (2 x 2 tiles), a wide one (1 x 2, rows cropped), a tall one beside a wide one
    sets += [_inputs(model, model.config, sizes) for sizes in ([(64, 64)], [(20, 64)], [(64, 24), (30, 60)])]
    for feeds in sets:
        with torch.no_grad():
            expected = model.generate(**feeds, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()
        assert len(set(expected[0, feeds["input_ids"].shape[1]:].tolist())) > 3  # the tokens vary: a real check
        np.testing.assert_array_equal(np.asarray(generator.generate_ids(feeds, NEW_TOKENS)), expected)


@pytest.mark.slow  # 7 s on a loaded machine: transformers' LLaVA-OneVision module imported
def test_the_crop_mask_is_transformers_unpad():
    """kept_mask keeps the rows or columns transformers' unpad_image keeps, on sizes of either orientation."""
    from transformers.models.llava_onevision.modeling_llava_onevision import unpad_image

    for size, grid in [((20, 64), (4, 8)), ((64, 24), (8, 4)), ((61, 96), (4, 6)), ((96, 32), (6, 4)),
                       ((9, 99), (8, 8))]:
        positions = torch.arange(grid[0] * grid[1], dtype=torch.float32).reshape(1, *grid)
        kept = unpad_image(positions, torch.tensor(size))[0].flatten()
        mask = kept_mask(torch.tensor(size), *grid)
        assert torch.equal(positions[0][mask], kept), size
