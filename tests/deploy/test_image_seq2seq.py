"""Encoder-decoders reading an image (TrOCR's architecture: a ViT encoder, a TrOCR or GPT-2 decoder
with cross-attention; Donut's: a Swin encoder, an MBart decoder): a folder written by ``save_pretrained`` with its image processor and
tokenizer -> ``export`` (the generic encoder-decoder split of :mod:`fx2onnx.deploy.speech_generic`
on ``pixel_values``) -> ``generate --image line.png``, every token checked against transformers'
greedy ``generate``; BLIP's captioner (a vision model and a text decoder attending to it) the same way,
and Florence-2 (its image merged into a task prompt before its text encoder), seen as encoder-decoders
(:mod:`fx2onnx.deploy.captioner`); the images made in code."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch
import transformers

from fx2onnx.__main__ import main
from test_optimum import _optimum_seq2seq, optimum_python  # noqa: F401 (optimum's environment: a fixture)
from test_speech_generic import transformersjs_seq2seq

NEW_TOKENS = 12
# one family in make test, the others in the slow tier (make test-all, which CI runs); Donut's generation
# config forces the end-of-sequence token at the last position (MBart's forced_eos_token_id)
DECODERS = ["trocr", pytest.param("gpt2", marks=pytest.mark.slow), pytest.param("donut", marks=pytest.mark.slow)]


def _image(path: str, seed: int, shape: tuple[int, int]) -> str:
    import PIL.Image

    PIL.Image.fromarray(np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture(scope="module", params=DECODERS)
def folders(request, tmp_path_factory):
    """A checkpoint folder, the folder ``export`` wrote from it, two PNG files of other sizes than the model's."""
    from fx2onnx.testing.vlm_folder import write_vision_encoder_decoder_folder

    root = tmp_path_factory.mktemp(request.param)
    checkpoint, out = str(root / "checkpoint"), str(root / "onnx")
    write_vision_encoder_decoder_folder(checkpoint, request.param)
    images = [_image(str(root / "line.png"), 1, (40, 48)), _image(str(root / "other.png"), 2, (64, 30))]
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return checkpoint, out, images


def _expected(checkpoint: str, images: list[str]) -> list[list[int]]:
    """transformers' greedy tokens on the folder's image processor's pixels, the start token removed,
    each row cut after its end-of-sequence token."""
    import PIL.Image

    model = transformers.VisionEncoderDecoderModel.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoImageProcessor.from_pretrained(checkpoint, local_files_only=True)
    pixels = processor([PIL.Image.open(i).convert("RGB") for i in images], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        tokens = model.generate(pixel_values=pixels, max_new_tokens=NEW_TOKENS, do_sample=False)[:, 1:].tolist()
    eos = model.generation_config.eos_token_id
    return [row[: row.index(eos) + 1] if eos in row else row for row in tokens]


def test_the_pieces_take_pixels(folders):
    _, out, _ = folders
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["task"] == "image-text-to-text" and metadata["split"] == "generic"
    encoder, decoder = metadata["pieces"]["encoder"], metadata["pieces"]["decoder"]
    # the files and names transformers.js and optimum load (fx2onnx.deploy.seq2seq_generic)
    assert encoder["file"] == "onnx/encoder_model.onnx" and decoder["file"] == "onnx/decoder_model_merged.onnx"
    assert encoder["inputs"] == ["pixel_values"] and encoder["outputs"] == ["last_hidden_state"]
    assert decoder["inputs"][:3] == ["input_ids", "encoder_hidden_states", "use_cache_branch"]
    assert decoder["outputs"][0] == "logits" and decoder["cache"]["past_key_values.0.encoder.key"] == \
        "present.0.encoder.key"
    assert os.path.isfile(os.path.join(out, "preprocessor_config.json"))


def test_generate_image_equals_transformers_greedy(folders, capsys):
    checkpoint, out, images = folders
    capsys.readouterr()
    assert main(["generate", out, "--image", images[0], "--max-new-tokens", str(NEW_TOKENS), "--print-ids"]) == 0
    captured = capsys.readouterr()
    ours = [int(t) for t in captured.out.strip().split(",")]
    [expected] = _expected(checkpoint, images[:1])
    assert len(set(expected)) > 2  # the tokens vary: a real check
    assert ours == expected
    assert "encoder:" in captured.err and "tokens/s" in captured.err
    # the text printed is the tokenizer's
    assert main(["generate", out, "--image", images[0], "--max-new-tokens", str(NEW_TOKENS)]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint)
    assert capsys.readouterr().out == tok.decode(ours, skip_special_tokens=True) + "\n"


def test_a_batch_of_images_equals_transformers(folders, capsys):
    from fx2onnx.runtime.image_seq2seq import Seq2SeqImageGenerator

    checkpoint, out, images = folders
    result = Seq2SeqImageGenerator(out).describe(images, NEW_TOKENS, as_text=False)
    assert result.new_ids == _expected(checkpoint, images)
    assert result.new_ids[0] != result.new_ids[1]  # two images, two answers
    capsys.readouterr()
    assert main(["generate", out, "--image", ",".join(images), "--max-new-tokens", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line[:4] for line in lines] == ["[1] ", "[2] "]


def test_a_decoder_prompt_equals_transformers_decoder_input_ids(folders, capsys):
    """Donut's usage: a task prompt, tokenized without special tokens, as the decoder's prompt."""
    import PIL.Image

    from fx2onnx.runtime.image_seq2seq import Seq2SeqImageGenerator

    checkpoint, out, images = folders
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint)
    prompt_ids = tok("ab cd", add_special_tokens=False)["input_ids"]
    model = transformers.VisionEncoderDecoderModel.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoImageProcessor.from_pretrained(checkpoint, local_files_only=True)
    pixels = processor([PIL.Image.open(i).convert("RGB") for i in images], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        expected = model.generate(pixel_values=pixels, decoder_input_ids=torch.tensor([prompt_ids] * 2),
                                  max_new_tokens=NEW_TOKENS, do_sample=False)[:, len(prompt_ids):].tolist()
    eos = model.generation_config.eos_token_id
    expected = [row[: row.index(eos) + 1] if eos in row else row for row in expected]
    result = Seq2SeqImageGenerator(out).describe(images, NEW_TOKENS, as_text=False, prompt="ab cd")
    assert result.prompt_ids == [prompt_ids] * 2 and result.new_ids == expected
    capsys.readouterr()
    assert main(["generate", out, "ab cd", "--image", images[0], "--max-new-tokens", str(NEW_TOKENS),
                 "--print-ids"]) == 0
    assert [int(t) for t in capsys.readouterr().out.strip().split(",")] == expected[0]


# one family (the tiny Donut's MBart decoder has 4 heads where its encoder side says 16: optimum sizes the empty cross
# cache from the latter, which the published Donut does not show)
@pytest.mark.slow
@pytest.mark.parametrize("folders", ["trocr"], indirect=True)
def test_transformersjs_and_optimum_give_transformers_tokens(folders, optimum_python, tmp_path):
    """The folder as it is in transformers.js (Node: a vision-encoder-decoder, AutoModelForVision2Seq) and in
    optimum's ORTModelForVision2Seq (its own environment), and in headless Chromium where Debian's chromium is
    installed: transformers' greedy sequences."""
    import PIL.Image

    checkpoint, out, images = folders
    model = transformers.VisionEncoderDecoderModel.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoImageProcessor.from_pretrained(checkpoint, local_files_only=True)
    pixels = processor([PIL.Image.open(i).convert("RGB") for i in images[:1]], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        expected = model.generate(pixel_values=pixels, max_new_tokens=NEW_TOKENS, do_sample=False).tolist()
    inputs = {"pixel_values": pixels.tolist()}
    assert len(set(expected[0])) > 2
    assert transformersjs_seq2seq(out, inputs, NEW_TOKENS, tmp_path) == expected
    assert _optimum_seq2seq(optimum_python, out, inputs, NEW_TOKENS, tmp_path) == expected
    if shutil.which("chromium"):  # headless Chromium: transformers.js' web build on onnxruntime-web (WASM)
        assert transformersjs_seq2seq(out, inputs, NEW_TOKENS, tmp_path, browser=True) == expected


def test_what_the_folder_does_not_take_is_refused(folders, capsys):
    _, out, images = folders
    assert main(["generate", out, "one", "two", "--image", images[0]]) == 2
    assert "at most one prompt" in capsys.readouterr().err
    assert main(["generate", out, "--image", images[0], "--sample"]) == 2
    assert "generates greedily" in capsys.readouterr().err
    assert main(["generate", out]) == 2
    assert "give --image FILE" in capsys.readouterr().err


@pytest.fixture(scope="module")
def florence2(tmp_path_factory):
    """Florence-2 (its image merged into a task prompt before its text encoder): its folder with its processor,
    exported, two PNG files."""
    from fx2onnx.testing.vlm_folder import write_florence2_folder

    root = tmp_path_factory.mktemp("florence2")
    checkpoint, out = str(root / "checkpoint"), str(root / "onnx")
    write_florence2_folder(checkpoint)
    images = [_image(str(root / "cat.png"), 1, (40, 48)), _image(str(root / "dog.png"), 2, (64, 30))]
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return checkpoint, out, images


@pytest.mark.slow  # 20 s of export; the fast tier keeps TrOCR's and BLIP's folders of the same family
def test_florence2_tasks_equal_transformers(florence2, capsys):
    """A task prompt is the encoder's (with the image's placeholders): the command line on one image, a batch
    from Python, tokens equal to transformers' generate on the processor's outputs; no prompt is refused."""
    import PIL.Image

    from fx2onnx.runtime.image_seq2seq import Seq2SeqImageGenerator

    checkpoint, out, images = florence2
    # the four files transformers.js loads for Florence-2 (fx2onnx.deploy.prompt_merging_split), run by our loop
    pieces = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]
    assert {k: (v["file"], v["inputs"][:2], v["outputs"][0]) for k, v in pieces.items()} == {
        "vision_encoder": ("onnx/vision_encoder.onnx", ["pixel_values"], "image_features"),
        "embed_tokens": ("onnx/embed_tokens.onnx", ["input_ids"], "inputs_embeds"),
        "encoder": ("onnx/encoder_model.onnx", ["inputs_embeds", "attention_mask"], "last_hidden_state"),
        "decoder": ("onnx/decoder_model_merged.onnx", ["inputs_embeds", "encoder_attention_mask"], "logits")}
    model = transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    pictures = [PIL.Image.open(i).convert("RGB") for i in images]
    seen = set()
    for task in ("<CAPTION>", "<OCR>"):
        with torch.no_grad():
            expected = model.generate(**processor(text=[task] * 2, images=pictures, return_tensors="pt"),
                                      max_new_tokens=NEW_TOKENS, do_sample=False)[:, 1:].tolist()
        eos = model.generation_config.eos_token_id
        expected = [row[: row.index(eos) + 1] if eos in row else row for row in expected]
        assert expected[0] != expected[1]  # two images, two answers
        result = Seq2SeqImageGenerator(out).describe(images, NEW_TOKENS, as_text=False, prompt=task)
        assert result.new_ids == expected, task
        seen.update(t for row in expected for t in row)
    assert len(seen) > 2  # tokens which vary
    capsys.readouterr()
    assert main(["generate", out, "<CAPTION>", "--image", images[0], "--max-new-tokens", str(NEW_TOKENS),
                 "--print-ids"]) == 0
    ours = [int(t) for t in capsys.readouterr().out.strip().split(",")]
    with torch.no_grad():
        caption = model.generate(**processor(text="<CAPTION>", images=pictures[0], return_tensors="pt"),
                                 max_new_tokens=NEW_TOKENS, do_sample=False)[0, 1:].tolist()
    assert ours == caption
    assert main(["generate", out, "--image", images[0]]) == 2
    assert "reads a prompt with the image" in capsys.readouterr().err


@pytest.mark.slow  # the export of the fixture, then transformers.js in Node and Chromium (~25 s)
def test_florence2_in_transformersjs_gives_transformers_tokens(florence2, tmp_path):
    """transformers.js' Florence2ForConditionalGeneration (Node) on the folder as written: its processor's ids have
    no image placeholders (it puts the image features before the prompt's embeddings), so it is fed transformers'
    processor's ids without them, the same pixels; a batch of two images gives transformers' greedy sequences, in
    Node and in headless Chromium."""
    import PIL.Image

    checkpoint, out, images = florence2
    model = transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    inputs = processor(text=["<OD>"] * 2, images=[PIL.Image.open(i).convert("RGB") for i in images],
                       return_tensors="pt")
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False).tolist()
    assert len(set(expected[0])) > 3 and expected[0] != expected[1]  # tokens which vary, two answers
    text = (inputs["input_ids"] != model.config.image_token_id).all(dim=0)
    placeholders = int((~text).sum())
    assert placeholders > 0 and not text[:placeholders].any()  # the placeholders come first
    fed = {"input_ids": inputs["input_ids"][:, text].tolist(),
           "attention_mask": inputs["attention_mask"][:, text].tolist(),
           "pixel_values": inputs["pixel_values"].tolist()}
    assert transformersjs_seq2seq(out, fed, NEW_TOKENS, tmp_path, client="transformersjs_image_text.mjs") == expected
    if shutil.which("chromium"):  # headless Chromium: transformers.js' web build on onnxruntime-web (WASM)
        assert transformersjs_seq2seq(out, fed, NEW_TOKENS, tmp_path, browser=True) == expected


@pytest.mark.slow
def test_the_zoo_florence2_generates_transformers_tokens():
    from fx2onnx.deploy.speech_generic import generic_split_reason
    from fx2onnx.zoo.task_generate import compare_folder_generation
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "florence2"))
    # the model itself: its encoder reads no pixels; seen as an encoder-decoder (deploy.captioner), it splits
    assert "its encoder reads none of input_features, input_values, pixel_values" in generic_split_reason(model, config)
    result = compare_folder_generation(model, config)
    assert result["equal"] and result["new_tokens"] >= 1, result


def test_forced_tokens_are_transformers_processors():
    """forced_bos_token_id after the first token, forced_eos_token_id at the last position (Donut's),
    the same tokens as transformers' ForcedBOS / ForcedEOS logits processors."""
    from transformers.generation.logits_process import ForcedBOSTokenLogitsProcessor, ForcedEOSTokenLogitsProcessor

    from fx2onnx.runtime.speech_seq2seq import _Greedy

    logits = np.random.default_rng(0).standard_normal((2, 10)).astype(np.float32)
    greedy = _Greedy(1, forced_bos=3, forced_eos=[5, 7], max_length=6)
    choose = greedy.chooser()
    assert greedy.active
    for length in range(1, 6):
        sequences = np.zeros((2, length), dtype=np.int64)
        expected = torch.from_numpy(logits.copy())
        for processor in (ForcedBOSTokenLogitsProcessor(3), ForcedEOSTokenLogitsProcessor(6, [5, 7])):
            expected = processor(torch.from_numpy(sequences), expected)
        assert choose(logits, sequences, None).tolist() == expected.argmax(-1).tolist(), length
    assert choose(logits, np.zeros((2, 1), dtype=np.int64), None).tolist() == [3, 3]
    assert choose(logits, np.zeros((2, 5), dtype=np.int64), None).tolist() == [5, 5]


@pytest.fixture(scope="module")
def blip(tmp_path_factory):
    """BLIP's captioner (a vision model, a text decoder attending to it): its folder with its processor,
    exported, two PNG files."""
    from fx2onnx.testing.vlm_folder import write_blip_folder

    root = tmp_path_factory.mktemp("blip")
    checkpoint, out = str(root / "checkpoint"), str(root / "onnx")
    write_blip_folder(checkpoint)
    images = [_image(str(root / "cat.png"), 1, (40, 48)), _image(str(root / "dog.png"), 2, (64, 30))]
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return checkpoint, out, images


def _blip_expected(checkpoint: str, images: list[str], prompt: str | None = None) -> tuple[list, list[list[int]]]:
    """(the decoder's prompt, transformers' greedy new tokens cut after the end) on the folder's processor's
    outputs, as BLIP's documentation calls it: ``processor(images, text)`` then ``generate(**inputs)``."""
    import PIL.Image

    model = transformers.BlipForConditionalGeneration.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    pictures = [PIL.Image.open(i).convert("RGB") for i in images]
    inputs = processor(images=pictures, text=[prompt] * len(images) if prompt else None, return_tensors="pt")
    with torch.no_grad():
        tokens = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    start = inputs["input_ids"].shape[1] - 1 if prompt else 1  # [DEC] + the prompt (its [CLS] and [SEP] dropped)
    sep = model.config.text_config.sep_token_id
    rows = [row[start:] for row in tokens.tolist()]
    return tokens[0, :start].tolist(), [row[: row.index(sep) + 1] if sep in row else row for row in rows]


def test_blip_captions_equal_transformers(blip, capsys):
    """No prompt (the start token), then a prompt after it, from the command line and a batch from Python."""
    from fx2onnx.runtime.image_seq2seq import Seq2SeqImageGenerator

    checkpoint, out, images = blip
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["split"] == "generic" and metadata["decoder_prompt"] == "after_start"
    config = transformers.AutoConfig.from_pretrained(checkpoint).text_config
    assert metadata["generation"]["decoder_start_token_id"] == config.bos_token_id
    assert metadata["generation"]["eos_token_id"] == config.sep_token_id
    for prompt in (None, "a picture of"):
        start, expected = _blip_expected(checkpoint, images, prompt)
        assert len(set(expected[0])) > 2 and expected[0] != expected[1]  # tokens which vary, two captions
        capsys.readouterr()
        assert main(["generate", out, *([prompt] if prompt else []), "--image", images[0], "--max-new-tokens",
                     str(NEW_TOKENS), "--print-ids"]) == 0
        assert [int(t) for t in capsys.readouterr().out.strip().split(",")] == expected[0]
        result = Seq2SeqImageGenerator(out).describe(images, NEW_TOKENS, as_text=False, prompt=prompt)
        assert result.prompt_ids == [start] * 2 and result.new_ids == expected


@pytest.mark.slow
def test_the_zoo_blip_generates_transformers_tokens():
    from fx2onnx.zoo.task_generate import compare_folder_generation
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "blip"))
    result = compare_folder_generation(model, config)
    assert result["equal"] and result["new_tokens"] >= 1, result
