"""A SAM folder made in code, exported with no flag as optimum's two pieces (the image encoder, the prompt encoder and
mask decoder) and run by ``fx2onnx.pipeline`` / ``python -m fx2onnx run --image``: the masks and scores of
transformers' mask-generation pipeline on the same image (scores within 1e-4, masks equal)."""

import json
import os

import numpy as np
import PIL.Image
import pytest
import torch
import transformers

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.testing.pipeline_folders import write_sam_folder

from test_encoder_tasks import _image_files, _reference

#: a grid of 8x8 points in batches of 24 (the last one shorter), every mask kept before the suppression
OPTIONS = dict(points_per_crop=8, points_per_batch=24, pred_iou_thresh=0.0, stability_score_thresh=0.0)


@pytest.fixture(scope="module")
def sam(tmp_path_factory):
    root = tmp_path_factory.mktemp("sam")
    checkpoint = write_sam_folder(root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    return str(checkpoint), str(root / "out"), result


def _same_masks(got, expected):
    assert len(got["masks"]) == len(expected["masks"]) > 1
    np.testing.assert_allclose(got["scores"], expected["scores"].numpy(), atol=1e-4)
    for ours, theirs in zip(got["masks"], expected["masks"]):
        assert ours.shape == tuple(theirs.shape) and (ours == theirs.numpy()).all()


@pytest.mark.slow  # two pieces and the pipeline's grid of points
def test_sam_folder_equals_transformers(sam, tmp_path, capsys):
    checkpoint, out, result = sam
    assert result.task == "mask-generation" and len(result.checks) == 4  # two pieces, two input sets each
    pieces = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]
    assert pieces["vision_encoder"]["file"] == "onnx/vision_encoder.onnx"
    assert pieces["vision_encoder"]["outputs"] == ["image_embeddings", "image_positional_embeddings"]
    assert pieces["prompt_encoder_mask_decoder"]["inputs"] == [
        "image_embeddings", "image_positional_embeddings", "input_points", "input_labels"]
    assert pieces["prompt_encoder_mask_decoder"]["outputs"] == ["iou_scores", "pred_masks"]
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("mask-generation", checkpoint)
    for got, expected in zip(ours(images, **OPTIONS), reference(images, **OPTIONS)):
        _same_masks(got, expected)
    _same_masks(ours(images[0], **OPTIONS, crops_n_layers=1), reference(images[0], **OPTIONS, crops_n_layers=1))
    # prompts of one's own (the second of two points, one off the object): the eager model's three masks each
    points, labels = [[[10, 5], [0, 0]], [[20, 20], [4, 4]]], [[1, -10], [1, 0]]
    got = ours.segment(images[0], [[(10, 5)], [(20, 20), (4, 4)]], labels=[[1], [1, 0]])
    processor = transformers.SamProcessor(image_processor=reference.image_processor)
    inputs = processor(images=[PIL.Image.open(images[0])], input_points=[points], input_labels=[labels],
                       return_tensors="pt")
    with torch.no_grad():
        eager = reference.model(**inputs)
    masks = processor.post_process_masks(eager.pred_masks, inputs["original_sizes"], inputs["reshaped_input_sizes"])
    assert got["masks"].shape == (2, 3, 30, 44) and (got["masks"] == masks[0].numpy()).all()
    np.testing.assert_allclose(got["scores"], eager.iou_scores[0].numpy(), atol=1e-4)
    # the command line: the same masks' scores, PNGs written
    argv = ["run", out, "--image", images[0], "--points-per-crop", "8", "--points-per-batch", "24",
            "--pred-iou-thresh", "0", "--stability-score-thresh", "0"]
    assert main([*argv, "--json", "--save-dir", str(tmp_path / "masks")]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = reference(images[0], **OPTIONS)
    np.testing.assert_allclose([m["score"] for m in printed], expected["scores"].numpy(), atol=1e-4)
    assert all(os.path.isfile(m["saved"]) for m in printed)
    assert main(argv) == 0 and "% of the image" in capsys.readouterr().out
    # a text to an image folder, a mask option on another task's folder
    for args, words in ([[out, "a cat"], "takes --image PATH, not texts"],
                        [[out, "--image", images[0], "--points-per-batch", "0"], "must be positive"]):
        assert main(["run", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
