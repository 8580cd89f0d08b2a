"""SmolVLM, LightOnOCR and Qwen3-VL-MoE folders in transformers.js: the task zoo's tiny model saved by transformers
-> ``python -m fx2onnx export`` -> the split transformers.js loads (onnx/vision_encoder.onnx, onnx/embed_tokens.onnx,
onnx/decoder_model_merged.onnx; fx2onnx.deploy.transformersjs_split), which our loop reads too: both give
transformers' greedy tokens, in Node and (the three folders in one page of one browser) in headless Chromium through
onnxruntime-web. SmolVLM's vision encoder takes the processor's tiles ``(prompts, tiles, 3, H, W)`` and its boolean
``pixel_attention_mask`` as transformers.js' Idefics 3 processor makes them (one tile, two, then the ten of SmolVLM's
processor made in code splitting an image larger than a tile); LightOnOCR's is Mistral 3's (a batch of images of one
size, as transformers.js' Pixtral processor stacks them; our loop crops padded ones); Qwen3-VL-MoE's is Qwen3-VL's,
its decoder the mixture of experts. Each folder is exported once per module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import PIL.Image
import pytest
import torch
import transformers
from transformers.models.smolvlm import processing_smolvlm

from fx2onnx.__main__ import main
from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model
from fx2onnx.inputs.vlm_inputs import image_text_inputs
from fx2onnx.runtime.families import open_generator
from fx2onnx.testing.tokenizer import tiny_tokenizer
from fx2onnx.testing.vlm_folder import IDEFICS3_TOKENS
from test_speech_generic import ROOT, transformersjs_seq2seq

NAMES = ["smolvlm", "lighton_ocr", "qwen3_vl_moe"]
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


def _smolvlm_processor(longest_edge: int, tile: int, per_tile: int):
    """SmolVLM's processor made in code, as its checkpoints set it: the image resized to ``longest_edge`` pixels at
    most, split into tiles of ``tile`` pixels (``do_image_splitting``) plus the whole image as a last tile; the tiny
    tokenizer with Idefics 3's tokens."""
    tok = tiny_tokenizer(384)
    tok.add_special_tokens({"additional_special_tokens": IDEFICS3_TOKENS})
    images = transformers.SmolVLMImageProcessor(size={"longest_edge": longest_edge},
                                                max_image_size={"longest_edge": tile}, do_image_splitting=True)
    return transformers.SmolVLMProcessor(image_processor=images, tokenizer=tok,
                                         video_processor=transformers.SmolVLMVideoProcessor(), image_seq_len=per_tile)


def _lighton_ocr_processor(side: int, longest_edge: int):
    """LightOnOCR's processor made in code: Pixtral's image processor resizing an image to ``longest_edge`` pixels at
    most, both sides multiples of ``side`` (a merged block of patches), the images of a call padded to the largest
    (``image_sizes`` their own sizes); the tiny tokenizer with LightOnOCR's image tokens."""
    tok = tiny_tokenizer(384)
    names = {"image_token": "<|image_pad|>", "image_break_token": "<|vision_pad|>", "image_end_token": "<|vision_end|>"}
    tok.add_special_tokens({"additional_special_tokens": list(names.values())})
    tok._set_model_specific_special_tokens(special_tokens=names)
    images = transformers.PixtralImageProcessor(patch_size={"height": side, "width": side},
                                                size={"longest_edge": longest_edge})
    return transformers.LightOnOcrProcessor(image_processor=images, tokenizer=tok, patch_size=side // 2,
                                            spatial_merge_size=2)


def _export(name: str, folder) -> dict:
    """The tiny model of ``name`` exported by ``python -m fx2onnx export``: the model, its folder and the sets of
    ``(inputs, transformers' greedy sequences)`` every client runs (SmolVLM's processor too, its image token the
    processor's)."""
    model, config = _tiny_model(name)
    config.architectures = config.architectures or [type(model).__name__]
    processor = None
    if name == "smolvlm":  # 4 patches per tile merged into one feature; images split into tiles of 64 pixels
        vision = config.vision_config
        per_tile = (vision.image_size // vision.patch_size) ** 2 // config.scale_factor ** 2
        processor = _smolvlm_processor(3 * vision.image_size, vision.image_size, per_tile)
        config.image_token_id = model.image_token_id = model.model.image_token_id = processor.image_token_id
    if name == "lighton_ocr":  # 14-pixel patches merged 2 x 2: images of 112 pixels at most, in blocks of 28
        side = config.vision_config.patch_size * config.spatial_merge_size
        processor = _lighton_ocr_processor(side, 4 * side)
        config.image_token_id = processor.image_token_id
    inputs, _ = image_text_inputs(model, config, batch=1)
    inputs = {k: v for k, v in inputs.items() if k != "position_ids"}  # computed by generate and by the loops
    if hasattr(config, "vision_start_token_id"):  # written in config.json by save_pretrained below
        inputs = _with_vision_markers(inputs, config)
    model.generation_config.pad_token_id = model.generation_config.pad_token_id or 0
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()
    assert len(set(expected[0, inputs["input_ids"].shape[1]:].tolist())) > 3  # the tokens vary: a real check
    checkpoint, out = str(folder / "checkpoint"), str(folder / "onnx")
    model.save_pretrained(checkpoint)
    if processor is not None:
        processor.save_pretrained(checkpoint)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0  # every piece checked against eager
    sets = [(inputs, expected)]
    if name == "smolvlm":  # an image split into two tiles, as Idefics 3's processor splits one
        tiled = _two_tiles(inputs, config)
        with torch.no_grad():
            sets.append((tiled, model.generate(**tiled, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()))
    return {"model": model, "config": config, "out": out, "sets": sets, "processor": processor}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``exported(name)``: :func:`_export` of ``name``, once per module (Node and Chromium run the same folders)."""
    made = {}

    def get(name: str) -> dict:
        if name not in made:
            made[name] = _export(name, tmp_path_factory.mktemp(name))
        return made[name]

    with pytest.MonkeyPatch.context() as patch:  # SmolVLM's processor asks for num2words, used by its videos only
        patch.setattr(processing_smolvlm, "num2words", processing_smolvlm.num2words or str)
        yield get


def _as_lists(feeds: dict) -> dict:
    """The inputs as the client scripts read them (JSON lists; a boolean mask as 0 and 1)."""
    return {k: v.int().tolist() if v.dtype == torch.bool else v.tolist() for k, v in feeds.items()}


@pytest.mark.slow  # an export (about 30 s on a loaded machine) and a Node run each
@pytest.mark.parametrize("name", NAMES)
def test_split_in_transformersjs_and_our_loop_gives_transformers_tokens(name, exported, tmp_path):
    made = exported(name)
    out = made["out"]
    assert {"vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx"} <= set(os.listdir(out + "/onnx"))
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    vision = metadata["pieces"].get("vision_encoder") or metadata["pieces"]["vision"]  # Qwen3-VL's its own piece
    assert vision["file"] == "onnx/vision_encoder.onnx"
    assert "transformersjs" not in metadata and "transformers.js_config" in json.load(open(out + "/config.json"))
    for feeds, tokens in made["sets"]:
        got = np.asarray(open_generator(out).generate_ids(feeds, NEW_TOKENS))
        np.testing.assert_array_equal(got, tokens)
        js = transformersjs_seq2seq(out, _as_lists(feeds), NEW_TOKENS, tmp_path, client="transformersjs_image_text.mjs")
        assert js == tokens.tolist()


@pytest.mark.slow  # one browser for the three folders (the exports shared with the test above)
@pytest.mark.skipif(shutil.which("chromium") is None or shutil.which("node") is None,
                    reason="chromium or node is not installed (Debian's packages; .ci/run installs them)")
def test_split_in_headless_chromium_gives_transformers_tokens(exported, tmp_path):
    """The three folders in transformers.js' web build on onnxruntime-web (WASM), in one headless Chromium page served
    on 127.0.0.1 (tests/clients/transformersjs_browser_seq2seq.mjs): transformers' greedy tokens for each."""
    args, expected = [], []
    for name in NAMES:
        made = exported(name)
        feeds, tokens = made["sets"][0]
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(_as_lists(feeds)))
        args += [made["out"], str(path)]
        expected.append(tokens.tolist())
    done = subprocess.run(["node", os.path.join(ROOT, "tests", "clients", "transformersjs_browser_seq2seq.mjs"), *args,
                           str(NEW_TOKENS)], capture_output=True, text=True, cwd=ROOT, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [json.loads(line)["sequences"] for line in done.stdout.strip().splitlines()[-len(NAMES):]] == expected


@pytest.mark.slow  # the SmolVLM export shared with the tests above, transformers.js in Node
def test_smolvlm_processor_splitting_an_image_into_tiles(exported, tmp_path):
    """SmolVLM's processor (``do_image_splitting``) on an image larger than a tile: 3 x 3 tiles and the whole image, the
    prompt's placeholders for each; our loop and transformers.js (Node) give transformers' greedy tokens."""
    made = exported("smolvlm")
    model, processor, out = made["model"], made["processor"], made["out"]
    y, x = np.mgrid[0:150, 0:190] / 190.0
    image = PIL.Image.fromarray((np.stack([x, y, x * y], -1) * 255).astype(np.uint8))
    inputs = dict(processor(images=[[image]], text=["<image>describe the picture"], return_tensors="pt"))
    assert inputs["pixel_values"].shape[:2] == (1, 10)  # 3 x 3 tiles and the whole image
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()
    assert len(set(expected[0, inputs["input_ids"].shape[1]:].tolist())) > 3
    np.testing.assert_array_equal(np.asarray(open_generator(out).generate_ids(inputs, NEW_TOKENS)), expected)
    js = transformersjs_seq2seq(out, _as_lists(inputs), NEW_TOKENS, tmp_path, client="transformersjs_image_text.mjs")
    assert js == expected.tolist()


def _pictures(width: int, height: int, seed: int) -> PIL.Image.Image:
    """A picture of ``width x height`` pixels: smooth colour gradients turned by ``seed``, no two alike."""
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    turn = np.random.default_rng(seed).uniform(0.5, 2.0, 3)
    return PIL.Image.fromarray((np.stack([x * turn[0], y * turn[1], x * y * turn[2]], -1) % 1 * 255).astype(np.uint8))


@pytest.mark.slow  # the LightOnOCR export shared with the tests above, transformers.js in Node
def test_lighton_ocr_a_batch_of_two_images_of_other_sizes(exported, tmp_path):
    """Two prompts, one image each, of other sizes (220x100 and 330x150) that LightOnOCR's processor resizes to one
    (112x56, as transformers.js' Pixtral image processor stacks the images of a call): the vision encoder runs them as
    a batch; our loop and transformers.js (Node) give transformers' greedy tokens for each prompt. Images the processor
    pads to the larger one (``image_sizes`` differ) run in our loop, which crops each to its size: transformers'
    tokens; transformers.js' processor never makes them (its Pixtral processor gives no ``image_sizes``), and
    transformers.js 4.3 forgets a padded prompt's mask after the first new token of an image-text model (its past is
    attended as ones: other tokens from the second or third on), which our loop does not."""
    made = exported("lighton_ocr")
    model, processor, out = made["model"], made["processor"], made["out"]
    prompts = ["<|image_pad|>read the page"] * 2
    processor.tokenizer.padding_side = "left"
    for sizes, same in (([(220, 100), (330, 150)], True), ([(110, 50), (60, 100)], False)):
        images = [[_pictures(width, height, i)] for i, (width, height) in enumerate(sizes)]
        inputs = dict(processor(images=images, text=prompts, padding=True, return_tensors="pt"))
        # one size: as many placeholders, no padding; two: the smaller image's prompt padded
        assert same == (inputs["image_sizes"].unique(dim=0).shape[0] == 1) == bool(inputs["attention_mask"].all())
        with torch.no_grad():
            expected = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False).numpy()
        new = expected[:, inputs["input_ids"].shape[1]:].tolist()
        assert all(len(set(row)) > 3 for row in new) and new[0] != new[1]  # the tokens vary, each image its own
        np.testing.assert_array_equal(np.asarray(open_generator(out).generate_ids(inputs, NEW_TOKENS)), expected)
        if same:  # transformers.js feeds the pixels (its vision encoder takes no image_sizes)
            js = transformersjs_seq2seq(out, _as_lists(inputs), NEW_TOKENS, tmp_path,
                                        client="transformersjs_image_text.mjs")
            assert js == expected.tolist()


def test_a_folder_without_the_files_transformersjs_loads_says_so():
    """A folder of pieces none of which is under onnx/ (an image-text family without transformers.js' split) says in
    one line that transformers.js does not run it (fx2onnx.json's ``transformersjs``, printed by the command)."""
    from fx2onnx.deploy.transformersjs import pieces_refusal

    why = pieces_refusal("internvl", ["vision.onnx", "decoder.onnx"])
    assert why.startswith("this internvl folder holds none of the files transformers.js loads") and "\n" not in why
    assert pieces_refusal("smolvlm", ["onnx/vision_encoder.onnx", "decoder.onnx"]) is None
