"""GIT (its image features in front of the prompt, no placeholder token): a folder written by
``save_pretrained`` with its processor -> ``export`` (:mod:`fx2onnx.deploy.image_prefix`) ->
``generate --image cat.png``, the tokens checked against transformers' greedy
``generate(pixel_values=..., input_ids=...)``; the images made in code."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
import transformers

from fx2onnx.__main__ import main

NEW_TOKENS = 8


def _image(path: str, seed: int, shape: tuple[int, int]) -> str:
    import PIL.Image

    PIL.Image.fromarray(np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture(scope="module")
def git(tmp_path_factory):
    from fx2onnx.testing.vlm_folder import write_git_folder

    root = tmp_path_factory.mktemp("git")
    checkpoint, out = str(root / "checkpoint"), str(root / "onnx")
    write_git_folder(checkpoint)
    images = [_image(str(root / "cat.png"), 1, (40, 48)), _image(str(root / "dog.png"), 2, (64, 30))]
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return checkpoint, out, images


def _expected(checkpoint: str, images: list[str], prompt: str | None) -> list[list[int]]:
    """transformers' greedy new tokens after ``[CLS]`` and the prompt (GIT's documented usage), cut after the end."""
    import PIL.Image

    model = transformers.GitForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(checkpoint, local_files_only=True)
    pixels = processor(images=[PIL.Image.open(i).convert("RGB") for i in images], return_tensors="pt").pixel_values
    ids = [processor.tokenizer.cls_token_id] + (processor.tokenizer(prompt, add_special_tokens=False).input_ids
                                                if prompt else [])
    with torch.no_grad():
        tokens = model.generate(pixel_values=pixels, input_ids=torch.tensor([ids] * len(images)),
                                max_new_tokens=NEW_TOKENS, do_sample=False)[:, len(ids):].tolist()
    sep = model.config.eos_token_id
    return [row[: row.index(sep) + 1] if sep in row else row for row in tokens]


@pytest.mark.parametrize("prompt", [None, "a picture of"])
def test_git_captions_equal_transformers(git, capsys, prompt):
    from fx2onnx.runtime.image_prefix import ImagePrefixGenerator

    checkpoint, out, images = git
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["split"] == "prefix"
    decoder = metadata["pieces"]["decoder"]
    assert decoder["prefix_token_id"] == transformers.AutoConfig.from_pretrained(checkpoint).vocab_size
    assert "image_features" in decoder["inputs"] and "position_ids" in decoder["inputs"]
    expected = _expected(checkpoint, images, prompt)
    assert expected[0] != expected[1] and len(set(expected[0])) > 2  # two captions, tokens which vary
    result = ImagePrefixGenerator(out).describe(images, NEW_TOKENS, as_text=False, prompt=prompt)
    assert result.new_ids == expected
    capsys.readouterr()
    assert main(["generate", out, *([prompt] if prompt else []), "--image", images[0], "--max-new-tokens",
                 str(NEW_TOKENS), "--print-ids"]) == 0
    assert [int(t) for t in capsys.readouterr().out.strip().split(",")] == expected[0]
    assert main(["generate", out, *([prompt] if prompt else []), "--image", images[0], "--max-new-tokens",
                 str(NEW_TOKENS)]) == 0  # the text, the tokenizer's
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint)
    assert capsys.readouterr().out == tok.decode(expected[0], skip_special_tokens=True) + "\n"


@pytest.mark.slow
def test_the_zoo_git_generates_transformers_tokens():
    from fx2onnx.zoo.task_generate import compare_folder_generation
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "git"))
    result = compare_folder_generation(model, config)
    assert result["equal"] and result["new_tokens"] >= 1, result
