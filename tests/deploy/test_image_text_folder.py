"""A LLaVA, Gemma 3, Idefics 3, Qwen-VL or Mistral 3 checkpoint folder -> ``export`` -> ``generate "prompt"
--image cat.png``, the tokens checked against transformers' generate; the images made in code (PNG files written
by Pillow).

Gemma 3's layers alternate a sliding window of 8 positions and a full attention; its prompts (the
processor's image tokens between their markers) are longer than the window, and the tokens of one
image attend to each other in both directions (``token_type_ids``, computed in the decoder).
Idefics 3's processor splits an image into 4 tiles and the whole image (5 rows of ``pixel_values``).
Qwen2-VL's and Qwen2.5-VL's processor gives the patches of every image (a grid of 6x6 patches and one of 4x4,
other sizes than the vision piece's export), their decoder takes 3 rows of positions computed from the grid in the
loop; Qwen2.5-VL's first vision block attends within windows of 2x2 merged features; Qwen3-VL's vision piece also
gives the features its decoder adds to its first layer (deepstack). Mistral 3's processor pads the second image to
the first one's size: the loop crops each one to its size and runs the vision piece once per image. The folders of
LLaVA, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Mistral 3, Idefics 3 and Gemma 3 (exported in float32) also hold the split transformers.js
loads: it gives transformers' tokens in Node and in headless Chromium."""

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
from fx2onnx.deploy.transformersjs_split import (
    FLAGGED_MODEL_TYPES,
    SPLIT_MODEL_TYPES,
    STACKED_MODEL_TYPES,
    TILED_MODEL_TYPES,
)
from test_speech_generic import transformersjs_seq2seq


def _image(path, size, flip=False):
    import PIL.Image

    x = np.linspace(0, 1, size)
    channels = [np.outer(x, x), np.outer(1 - x, x), np.outer(x, 1 - x)]
    pixels = (np.stack(channels[::-1] if flip else channels, -1) * 255).astype(np.uint8)
    PIL.Image.fromarray(pixels).save(path)
    return str(path)


#: family -> (its placeholder of an image in a prompt, the standard deviation of its random weights: tokens that vary)
FAMILIES = {"llava": ("<image>", 0.3), "gemma3": ("<start_of_image>", 0.02), "idefics3": ("<image>", 0.3),
            "qwen2_vl": ("<|vision_start|><|image_pad|><|vision_end|>", 0.3),
            "qwen2_5_vl": ("<|vision_start|><|image_pad|><|vision_end|>", 0.3),
            "qwen3_vl": ("<|vision_start|><|image_pad|><|vision_end|>", 0.3), "mistral3": ("[IMG]", 0.3)}


@pytest.fixture(scope="module", params=list(FAMILIES))
def folders(tmp_path_factory, request):
    """A bf16 LLaVA, Gemma 3, Idefics 3, Qwen-VL or Mistral 3 folder with its processor, the folder ``export`` wrote
    from it, two PNG images."""
    from fx2onnx.testing import vlm_folder

    family = request.param
    root = tmp_path_factory.mktemp(family)
    checkpoint, out = str(root / family), str(root / f"{family}_onnx")
    config = getattr(vlm_folder, f"tiny_{family}_config")()
    getattr(vlm_folder, f"write_{family}_folder")(config, checkpoint, dtype="bfloat16", std=FAMILIES[family][1])
    images = [_image(root / "cat.png", 24), _image(root / "dog.png", 20, flip=True)]
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return checkpoint, out, images


def _expected(checkpoint, prompt, images, max_new_tokens):
    from fx2onnx.runtime.vision import read_image

    model = transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    inputs = processor(images=[read_image(i) for i in images], text=prompt, return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    window = getattr(model.config.get_text_config(), "sliding_window", None)
    # Gemma 3: the prompt and its image tokens are longer than the sliding window
    assert window is None or inputs["input_ids"].shape[1] > window
    return out[0, inputs["input_ids"].shape[1]:].tolist(), processor


@pytest.mark.slow
def test_export_writes_the_pieces(folders):
    _, out, _ = folders
    files = set(os.listdir(out))
    assert {"decoder.onnx", "decoder.onnx.data", "processor_config.json", "tokenizer.json", "config.json",
            "fx2onnx.json"} <= files
    pieces = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]
    # the vision piece where transformers.js reads it (fx2onnx.deploy.transformersjs_split)
    model_type = json.load(open(os.path.join(out, "config.json")))["model_type"]
    split = model_type in SPLIT_MODEL_TYPES
    # Idefics 3 (tiles), Gemma 3 (a column marking the image's rows), Qwen3-VL (the deepstack features as columns):
    # transformers.js' is another piece
    shared = split and model_type not in TILED_MODEL_TYPES + FLAGGED_MODEL_TYPES + STACKED_MODEL_TYPES
    assert pieces["vision"]["file"] == ("onnx/vision_encoder.onnx" if shared else "vision.onnx")
    assert os.path.isfile(os.path.join(out, "onnx", "vision_encoder.onnx")) == split
    assert ("decoder_model_merged" in pieces) == split  # exported in float32: transformers.js runs it
    assert os.path.isfile(os.path.join(out, pieces["vision"]["file"]))
    assert pieces["vision"]["outputs"][0] == "image_features"
    assert set(pieces["vision"]["outputs"]) <= set(pieces["decoder"]["inputs"])  # Qwen3-VL: deepstack features
    decoder = onnx.load(os.path.join(out, "decoder.onnx"), load_external_data=False)
    assert [i.name for i in decoder.graph.input] == pieces["decoder"]["inputs"]
    assert "image_features" in pieces["decoder"]["inputs"] and "logits" in pieces["decoder"]["outputs"]
    assert pieces["decoder"]["cache"]["past_key_values_key_0"] == "present_key_0"
    # the cache updated in place, the image features fed unchanged at every step; not Gemma 3's: its image tokens
    # attend to each other in both directions (a mask read from the token ids) and its sliding layers crop their cache
    in_place = {p.key: p.value for p in decoder.metadata_props}.get("fx2onnx.cache_in_place") == "1"
    assert in_place == (model_type != "gemma3")
    assert pieces["decoder"]["cache_update"] == ("in_place" if in_place else "concatenated")
    # the vision tower is in the vision piece only
    assert not any(name in i.name for i in decoder.graph.initializer for name in ("vision_tower", "vision_model",
                                                                                  "visual."))


@pytest.mark.slow
@pytest.mark.parametrize("prompt,count", [("describe the image", 1), ("<image> and <image>: which one?", 2)])
def test_generate_image_prompt_equals_transformers_greedy(folders, capsys, prompt, count):
    checkpoint, out, images = folders
    images = images[:count]
    token = FAMILIES[json.load(open(os.path.join(out, "config.json")))["model_type"]][0]
    prompt = prompt.replace("<image>", token)
    capsys.readouterr()
    args = ["generate", out, prompt, "--max-new-tokens", "16"]
    for image in images:
        args += ["--image", image]
    assert main(args) == 0
    captured = capsys.readouterr()
    text = prompt if token in prompt else token + "\n" + prompt
    expected, processor = _expected(checkpoint, text, images, 16)
    assert len(set(expected)) > 3  # the tokens vary: a real check
    assert captured.out == processor.tokenizer.decode(expected, skip_special_tokens=True) + "\n"
    assert "prefill:" in captured.err


def test_bad_images_end_in_one_line(tmp_path, capsys):
    folder = tmp_path / "llava_onnx"
    folder.mkdir()
    (folder / "fx2onnx.json").write_text(json.dumps({"task": "image-text-to-text", "pieces": {}}))
    capsys.readouterr()
    assert main(["generate", str(folder), "describe", "--image", str(tmp_path / "missing.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing.png" in err
    assert main(["generate", str(folder), "describe"]) == 2
    assert "--image" in capsys.readouterr().err
    from fx2onnx.runtime.vision import read_image

    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    with pytest.raises(ValueError, match="not an image"):
        read_image(bad)
    # an image-text folder whose vision piece's shapes depend on its inputs' values (LLaVA-NeXT's tiles counted
    # from image_sizes): torch.export refuses the capture, one line, no model written
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    model, _ = tiny_task_model(get_task_architecture("image-text-to-text", "llava_next"))
    model.save_pretrained(tmp_path / "llava_next")
    capsys.readouterr()
    assert main(["export", str(tmp_path / "llava_next"), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("error:")):]  # after the progress
    assert lines[0].startswith("error: Step 'capture' failed") and "could not capture GenericVisionPiece" in lines[0]
    # the line of transformers' code which reads the image sizes' values, not torch's traceback
    assert any(line.startswith("The model reads") and "select_best_resolution" in line for line in lines), lines
    assert len(lines) <= 8 and "FX2ONNX_TRACEBACK=1" in lines[-1]
    assert not os.path.exists(tmp_path / "o" / "vision.onnx")


@pytest.mark.slow
def test_bfloat16_pieces_are_held_to_eager(folders, tmp_path):
    from fx2onnx.deploy import export_folder
    from fx2onnx.runtime.vision import VisionGenerator

    checkpoint, _, images = folders
    result = export_folder(checkpoint, tmp_path / "bf16", dtype="bfloat16")
    assert result.ok and len(result.checks) == 4, result.check_lines()
    assert len(VisionGenerator(tmp_path / "bf16").generate_text("describe", images[:1], 6).new_ids) == 6


@pytest.mark.slow
@pytest.mark.parametrize("folders", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"], indirect=True)
def test_qwen_vl_vision_piece_on_images_of_other_sizes(folders):
    """The vision piece (exported on 40 patches) against eager on the processor's patches of one and two images of
    other sizes, the boundaries of the images (Qwen2.5-VL: of its windows) and the patches' positions computed from
    the grid in the graph."""
    import onnxruntime

    from fx2onnx.runtime.vision import read_image

    checkpoint, out, _ = folders
    model = transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    vision = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["vision"]["file"]
    session = onnxruntime.InferenceSession(os.path.join(out, vision), providers=["CPUExecutionProvider"])
    root = os.path.dirname(out)
    for sizes in ([(16, 48)], [(48, 16), (24, 32)]):
        images = [read_image(_image_of(os.path.join(root, f"{h}x{w}.png"), h, w)) for h, w in sizes]
        inputs = processor(images=images, text="<|image_pad|>" * len(images), return_tensors="pt")
        grid = inputs["image_grid_thw"]
        assert grid.shape[0] == len(sizes) and int(grid.prod(-1).sum()) != 40
        names = [i.name for i in session.get_inputs()]  # Qwen2-VL's grid named grid_thw, as transformers.js feeds it
        got = session.run(None, dict(zip(names, [inputs["pixel_values"].numpy(), grid.numpy()])))[0]
        with torch.no_grad():
            expected = torch.cat(model.model.get_image_features(inputs["pixel_values"], grid).pooler_output)
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-4, rtol=1e-3)


def _image_of(path, height, width):
    """A PNG of ``height x width`` pixels."""
    import PIL.Image

    y, x = np.linspace(0, 1, height), np.linspace(0, 1, width)
    pixels = (np.stack([np.outer(y, x), np.outer(1 - y, x), np.outer(y, 1 - x)], -1) * 255).astype(np.uint8)
    PIL.Image.fromarray(pixels).save(path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("folders", ["mistral3"], indirect=True)
def test_mistral3_images_padded_by_the_processor(folders):
    """Mistral 3's processor pads the smaller image to the larger one: the loop crops each one to its size and runs
    the vision piece once per image; the tokens are transformers'."""
    from fx2onnx.runtime.vision import VisionGenerator

    checkpoint, out, _ = folders
    root = os.path.dirname(out)
    images = [_image_of(os.path.join(root, "wide.png"), 16, 40), _image_of(os.path.join(root, "tall.png"), 32, 24)]
    prompt = "[IMG] and [IMG]: which one?"
    generator = VisionGenerator(out)
    sizes = generator.inputs(prompt, images)["image_sizes"]
    assert sizes.tolist()[0] != sizes.tolist()[1]  # one of them padded
    expected, _ = _expected(checkpoint, prompt, images, 12)
    assert len(set(expected)) > 3
    assert generator.generate_text(prompt, images, 12).new_ids == expected


@pytest.mark.slow
def test_chat_template_and_sampling_reproduce_transformers(folders, capsys):
    """``--chat`` puts the prompt after its image in the processor's chat template; a seed draws the tokens
    transformers' ``generate`` samples after ``torch.manual_seed``."""
    from fx2onnx.runtime.sampling import Sampling
    from fx2onnx.runtime.vision import VisionGenerator, read_image

    checkpoint, out, images = folders
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    question = "what is in this picture, and which colours?"
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n") and question in text
    expected, _ = _expected(checkpoint, text, images[:1], 12)
    assert len(set(expected)) > 3
    capsys.readouterr()
    assert main(["generate", out, question, "--chat", "--image", images[0], "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == processor.tokenizer.decode(expected, skip_special_tokens=True) + "\n"

    model = transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()
    inputs = processor(images=[read_image(images[0])], text=text, return_tensors="pt")
    options = dict(temperature=1.5, top_k=0)
    torch.manual_seed(7)
    sampled = model.generate(**inputs, max_new_tokens=12, do_sample=True, **options)[0, inputs["input_ids"].shape[1]:]
    result = VisionGenerator(out).generate_text(question, images[:1], 12, chat=True,
                                                sampling=Sampling(do_sample=True, seed=7, **options))
    assert result.new_ids == sampled.tolist() and result.new_ids != expected


def _video(path, frames=4, size=20):
    """An animated GIF of ``frames`` frames of ``size`` pixels: a gradient whose colours turn."""
    import PIL.Image

    x = np.linspace(0, 1, size)
    pictures = []
    for k in range(frames):
        channels = [np.outer(x, x), np.outer(1 - x, x), np.outer(x, 1 - x)]
        channels = channels[k % 3:] + channels[:k % 3]
        pictures.append(PIL.Image.fromarray((np.stack(channels, -1) * 255).astype(np.uint8)))
    pictures[0].save(path, save_all=True, append_images=pictures[1:], duration=500, loop=0)
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("folders", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"], indirect=True)
def test_qwen_vl_video_prompt_equals_transformers_greedy(folders, capsys, tmp_path):
    """A video (an animated GIF read frame by frame) alone, then after an image: the vision piece runs on the video's
    patches (its frames attend within themselves), the features go over the video placeholders in the prompt's
    order, the time positions step by frame (Qwen2.5-VL: by ``tokens_per_second * second_per_grid_ts``)."""
    from fx2onnx.runtime.vision import VisionGenerator, read_image, read_video

    checkpoint, out, images = folders
    clip = _video(tmp_path / "clip.gif")
    assert read_video(clip).shape == (4, 20, 20, 3)
    model = transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    generator = VisionGenerator(out)
    video_tokens = "<|vision_start|><|video_pad|><|vision_end|>"
    for with_image in (False, True):
        prompt = ("<|vision_start|><|image_pad|><|vision_end|>" if with_image else "") + video_tokens + \
            "\nwhat happens in the video?"
        inputs = processor(images=[read_image(images[0])] if with_image else None, videos=[read_video(clip)],
                           text=prompt, return_tensors="pt")
        assert inputs["video_grid_thw"][0, 0] == 2  # two temporal patches of two frames
        expected = model.generate(**inputs, max_new_tokens=12, do_sample=False)[0, inputs["input_ids"].shape[1]:]
        assert len(set(expected.tolist())) > 3
        result = generator.generate_text(prompt, images[:1] if with_image else [], 12, videos=[clip])
        assert result.new_ids == expected.tolist(), with_image
    capsys.readouterr()
    assert main(["generate", out, "what happens in the video?", "--video", clip, "--image", images[0],
                 "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == processor.tokenizer.decode(expected, skip_special_tokens=True) + "\n"


@pytest.mark.slow
# PaliGemma's in test_transformersjs_prefix_lm.py
@pytest.mark.parametrize("folders", [t for t in SPLIT_MODEL_TYPES if t in FAMILIES], indirect=True)
def test_transformersjs_gives_transformers_tokens(folders, tmp_path):
    """The split transformers.js loads (onnx/embed_tokens.onnx, onnx/vision_encoder.onnx, onnx/decoder_model_merged.onnx)
    in its AutoModelForImageTextToText, in Node (tests/clients/transformersjs_image_text.mjs) and headless Chromium
    (onnxruntime-web, WASM), on the processor's outputs: transformers' greedy sequence."""
    from fx2onnx.runtime.vision import read_image

    checkpoint, out, images = folders
    model_type = json.load(open(os.path.join(out, "config.json")))["model_type"]
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    inputs = processor(images=[read_image(images[0])], text=FAMILIES[model_type][0] + "\ndescribe the image",
                       return_tensors="pt")
    model = transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=10, do_sample=False).tolist()
    assert len(set(expected[0][inputs["input_ids"].shape[1]:])) > 3  # the tokens vary: a real check
    inputs = {k: v.tolist() for k, v in inputs.items()}
    assert transformersjs_seq2seq(out, inputs, 10, tmp_path, client="transformersjs_image_text.mjs") == expected
    # the same in the browser for two families (LLaVA's merge, Qwen2-VL's positions; each run is about 12 s; the
    # others were run by hand: Qwen2.5-VL, Qwen3-VL, Mistral 3, Idefics 3, Gemma 3 give the same tokens)
    if shutil.which("chromium") and model_type in ("llava", "qwen2_vl"):
        assert transformersjs_seq2seq(out, inputs, 10, tmp_path, browser=True) == expected


@pytest.mark.slow
def test_a_batch_of_prompts_equals_transformers_greedy(folders, capsys):
    """Two prompts of different lengths, one image each, padded on the left by the processor: the loop's tokens of
    every prompt are transformers' greedy ``generate`` on the same batch."""
    from fx2onnx.runtime.vision import VisionGenerator, read_image

    checkpoint, out, images = folders
    token = FAMILIES[json.load(open(os.path.join(out, "config.json")))["model_type"]][0]
    prompts = [f"{token}\ndescribe the image", f"{token}\nwhat is in this picture, and which colours?"]
    generator = VisionGenerator(out)
    result = generator.generate_texts(prompts, [[images[0]], [images[1]]], 10)
    model = transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    processor.tokenizer.padding_side = "left"
    inputs = processor(images=[[read_image(images[0])], [read_image(images[1])]], text=prompts, padding=True,
                       return_tensors="pt")
    assert (inputs["attention_mask"] == 0).any()  # one prompt is padded
    expected = model.generate(**inputs, max_new_tokens=10, do_sample=False)[:, inputs["input_ids"].shape[1]:]
    assert len(set(expected[1].tolist())) > 3
    assert [r.new_ids for r in result] == expected.tolist()
    # the command line: one --image per prompt, one numbered block per prompt
    capsys.readouterr()
    assert main(["generate", out, *prompts, "--image", images[0], "--image", images[1], "--max-new-tokens", "10"]) == 0
    texts = [processor.tokenizer.decode(row, skip_special_tokens=True) for row in expected.tolist()]
    assert capsys.readouterr().out == "".join(f"[{i}] {t}\n" for i, t in enumerate(texts, 1))


def test_the_images_padding_a_batch_are_dropped_a_padded_image_refused():
    """Idefics 3's processor gives a batch ``(prompts, tiles, 3, H, W)``, a prompt of fewer tiles padded with all-zero
    images masked out: the vision piece gets the real ones, one after the other; an image padded inside is refused."""
    from fx2onnx.runtime.vision import VisionGenerator

    pixels = np.arange(2 * 3 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 3, 4, 4)
    mask = np.ones((2, 3, 4, 4), dtype=np.int64)
    mask[1, 2] = 0  # the second prompt has two tiles
    got = VisionGenerator._processed({"pixel_values": pixels, "pixel_attention_mask": mask, "input_ids": None})
    assert got["pixel_values"].shape == (5, 3, 4, 4) and "pixel_attention_mask" not in got
    np.testing.assert_array_equal(got["pixel_values"][3:], pixels[1, :2])
    mask[0, 1, :, 2:] = 0
    with pytest.raises(ValueError, match="padded an image"):
        VisionGenerator._processed({"pixel_values": pixels, "pixel_attention_mask": mask})
