"""An EfficientLoFTR folder made in code, exported with no flag as one model (``pixel_values (1, 2, 3, height,
width)`` -> ``matches``, ``matching_scores``, ``keypoints``; the height and width dynamic) and run by
``fx2onnx.pipeline`` / ``python -m fx2onnx run --image A --image B``: the matches of transformers' keypoint-matching
pipeline (keypoints equal, scores within 1e-4); SuperGlue refused in one line."""

import json
import os

import numpy as np
import pytest
import torch
import transformers

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.deploy.keypoint_matching import export_keypoint_matching_pieces
from fx2onnx.testing.pipeline_folders import block_picture_views, write_efficientloftr_folder

from test_encoder_tasks import _reference


def _pair_files(folder, count=4):
    """Overlapping crops of one picture of blocks, as PNG files."""
    paths = []
    for i, view in enumerate(block_picture_views(count)):
        path = os.path.join(folder, f"view{i}.png")
        view.save(path)
        paths.append(path)
    return paths


def _same(ours, expected):
    assert len(ours) == len(expected) and expected
    for got, match in zip(ours, expected):
        assert got["keypoint_image_0"] == match["keypoint_image_0"], (got, match)
        assert got["keypoint_image_1"] == match["keypoint_image_1"], (got, match)
        assert abs(got["score"] - match["score"]) <= min(1e-4, 1e-3 * match["score"])
    # keypoints and scores of their own: the comparison means something
    assert len({(m["keypoint_image_0"]["x"], m["keypoint_image_0"]["y"]) for m in expected}) == len(expected)


@pytest.fixture(scope="module")
def efficientloftr(tmp_path_factory):
    root = tmp_path_factory.mktemp("efficientloftr")
    checkpoint = write_efficientloftr_folder(root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    return str(checkpoint), str(root / "out"), result


@pytest.mark.slow  # the export of a tiny EfficientLoFTR (about 20 s)
def test_efficientloftr_folder_equals_transformers(efficientloftr, tmp_path, capsys):
    checkpoint, out, result = efficientloftr
    assert result.task == "keypoint-matching" and result.family == "image pair" and len(result.checks) == 2
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert piece["inputs"] == ["pixel_values"] and piece["outputs"] == ["matches", "matching_scores", "keypoints"]
    images = _pair_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("keypoint-matching", checkpoint)
    for pair in (images[:2], images[2:]):
        for threshold in (0.0, 1e-4):
            _same(ours(pair, threshold=threshold), reference(pair, threshold=threshold))
    batch = [images[:2], images[1:3]]
    for got, expected in zip(ours(batch), reference(batch)):
        _same(got, expected)
    # the command line: the images two by two
    assert main(["run", out, "--image", images[0], "--image", images[1], "--image", images[2], "--image", images[3],
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(printed) == 2
    _same(printed[1], reference(images[2:]))
    assert main(["run", out, "--image", images[0], "--image", images[1]]) == 0
    assert "->" in capsys.readouterr().out
    for args, words in ([["--image", images[0]]], "two by two"), ([["some text"]], "--image"):
        assert main(["run", out, *args[0]]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
    # another image size than the processor's: the graph reads it (dynamic height and width)
    pixels = torch.rand(1, 2, 3, 96, 224)
    got = ours.session.run(None, {"pixel_values": pixels.numpy()})
    with torch.no_grad():
        eager = transformers.EfficientLoFTRForKeypointMatching.from_pretrained(checkpoint).eval()(pixels)
    for name, value in zip(ours.outputs, got):
        np.testing.assert_allclose(value, eager[name].numpy(), atol=1e-4)


def test_superglue_is_refused_in_one_line(tmp_path):
    config = transformers.AutoConfig.for_model("superglue", architectures=["SuperGlueForKeypointMatching"])
    with pytest.raises(ValueError, match="SuperPoint") as error:
        export_keypoint_matching_pieces(str(tmp_path), str(tmp_path / "out"), config, torch.float32, {})
    assert "\n" not in str(error.value) and "SuperGlueForKeypointMatching" in str(error.value)
