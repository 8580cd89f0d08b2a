"""An OWLv2 folder made in code (OWL-ViT's in tests/deploy/test_zero_shot_towers.py), exported with no flag as one
model and run by ``fx2onnx.pipeline`` / ``python -m fx2onnx run --labels``: the boxes of transformers'
zero-shot-object-detection pipeline (labels equal, scores within 1e-4, corners within a pixel: the pipeline truncates
them to integers)."""

import json
import os

import pytest
import torch
import transformers

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.deploy.encoder import export_encoder_pieces
from fx2onnx.testing.pipeline_folders import write_owlv2_folder

from test_encoder_tasks import _image_files, _reference

LABELS = ["cat", "dog"]


def _same_boxes(got, expected):
    assert len(got) == len(expected) > 0
    key = lambda o: (o["label"], round(o["score"], 3), o["box"]["xmin"], o["box"]["ymin"])  # noqa: E731
    for g, e in zip(sorted(got, key=key), sorted(expected, key=key)):
        assert g["label"] == e["label"] and abs(g["score"] - e["score"]) <= 1e-4, (g, e)
        assert all(abs(g["box"][k] - e["box"][k]) <= 1 for k in e["box"]), (g, e)


def test_a_zero_shot_detector_fusing_its_towers_is_refused_in_one_line(tmp_path):
    config = transformers.GroundingDinoConfig(architectures=["GroundingDinoForObjectDetection"])
    with pytest.raises(ValueError, match=r"type 'grounding-dino'.*supports \['owlvit', 'owlv2'\]") as error:
        export_encoder_pieces("zero-shot-object-detection", str(tmp_path), str(tmp_path / "out"), config,
                              torch.float32, {})
    assert "\n" not in str(error.value)


@pytest.mark.slow  # two towers and a box head
def test_owlv2_folder_equals_transformers(tmp_path_factory, tmp_path, capsys):
    root = tmp_path_factory.mktemp("owlv2")
    checkpoint = write_owlv2_folder(root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    out = str(root / "out")
    assert result.task == "zero-shot-object-detection"
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert piece["inputs"] == ["input_ids", "attention_mask", "pixel_values"]
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("zero-shot-object-detection", checkpoint)
    for threshold in (0.0, 0.7):
        for image in images:
            expected = reference(image, candidate_labels=LABELS, threshold=threshold)
            assert len({round(e["score"], 3) for e in expected}) > 1  # scores below 1, not all equal
            _same_boxes(ours(image, candidate_labels=LABELS, threshold=threshold), expected)
    assert main(["run", out, "--image", images[0], "--labels", "cat,dog", "--top-k", "3", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = reference(images[0], candidate_labels=LABELS, top_k=3)
    assert len(printed) == 3 and all(abs(g["score"] - e["score"]) <= 1e-4 for g, e in zip(printed, expected))
