"""A universal segmenter's folder (Mask2Former) exported with no flag (pixel_values -> class_queries_logits,
masks_queries_logits) and run by ``fx2onnx.pipeline`` / ``python -m fx2onnx run --subtask``: the panoptic, instance
and semantic masks of transformers' image-segmentation pipeline on the same images (labels and scores equal, masks
equal on 99 % of the pixels)."""

import json

import numpy as np
import pytest

import fx2onnx
from fx2onnx.__main__ import main
from test_encoder_tasks import _exported, _image_files, _reference


@pytest.mark.slow
def test_universal_segmentation_equals_transformers(tmp_path_factory, tmp_path, capsys):
    checkpoint, out, result = _exported(tmp_path_factory, "Mask2FormerForUniversalSegmentation")
    assert result.task == "universal-segmentation"
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("image-segmentation", checkpoint)
    found = 0
    for subtask in (None, "instance", "semantic"):
        for image in images:
            got, expected = ours(image, subtask=subtask, threshold=0.0), reference(image, subtask=subtask, threshold=0.0)
            assert [(m["label"], m["score"]) for m in got] == [(m["label"], m["score"]) for m in expected]
            for g, e in zip(got, expected):
                assert (np.asarray(g["mask"]) == np.asarray(e["mask"])).mean() > 0.99
            found += len(expected)
    assert found > 5
    assert main(["run", out, "--image", images[0], "--subtask", "instance", "--threshold", "0.1", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [m["label"] for m in printed] == [m["label"] for m in reference(images[0], subtask="instance",
                                                                           threshold=0.1)]
    assert main(["run", out, "--image", images[0], "--subtask", "depth"]) == 2
    err = capsys.readouterr().err
    assert "'depth' is not one of panoptic, instance, semantic" in err and err.count("\n") == 1, err
