"""A DETR panoptic segmenter and a MaskFormer instance segmenter made in code, exported with no flag (task
universal-segmentation, read from config.json) and run by ``fx2onnx.pipeline`` / ``python -m fx2onnx run --subtask``:
the segments of transformers' image-segmentation pipeline (labels equal, scores within 1e-4, masks equal)."""

import json
import os

import numpy as np
import pytest

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.testing.pipeline_folders import write_detr_panoptic_folder, write_maskformer_folder

from test_encoder_tasks import _image_files, _reference


def _exported(tmp_path_factory, name, write):
    root = tmp_path_factory.mktemp(name)
    checkpoint = write(root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    return str(checkpoint), str(root / "out"), result


def _same_segments(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g["label"] == e["label"], (g, e)
        assert (g["score"] is None) == (e["score"] is None) and abs((g["score"] or 0) - (e["score"] or 0)) <= 1e-4
        assert (np.asarray(g["mask"]) == np.asarray(e["mask"])).all()


@pytest.mark.parametrize("name, write, outputs, subtasks", [
    ("detr", write_detr_panoptic_folder, ["logits", "pred_boxes", "pred_masks"], ("panoptic", "instance")),
    ("maskformer", write_maskformer_folder, ["class_queries_logits", "masks_queries_logits"],
     ("instance", "panoptic", "semantic")),
])
@pytest.mark.slow  # a backbone and a transformer each
def test_segmenter_folder_equals_transformers(tmp_path_factory, tmp_path, capsys, name, write, outputs, subtasks):
    checkpoint, out, result = _exported(tmp_path_factory, name, write)
    assert result.task == "universal-segmentation"
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["pieces"]["model"]["outputs"] == outputs
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("image-segmentation", checkpoint)
    found = 0
    for subtask in subtasks:
        for image in images:
            expected = reference(image, subtask=subtask, threshold=0.0)
            found += len(expected)
            _same_segments(ours(image, subtask=subtask, threshold=0.0), expected)
    assert found > len(subtasks)  # segments found: the comparison means something
    assert main(["run", out, "--image", images[0], "--subtask", subtasks[0], "--threshold", "0", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [m["label"] for m in printed] == [e["label"] for e in reference(images[0], subtask=subtasks[0],
                                                                            threshold=0.0)]
