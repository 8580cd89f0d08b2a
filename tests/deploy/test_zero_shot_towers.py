"""Folders of two-tower models scoring candidate labels (CLIP and SigLIP against an image, CLAP against a sound,
OWL-ViT's boxes in an image)
exported with no flag as one model (optimum's inputs and outputs) and run by ``fx2onnx.pipeline`` / ``python -m
fx2onnx run --labels``: what transformers' zero-shot pipelines return on the same inputs (scores within 1e-4, labels
in the same order); bad inputs end in one ``error:`` line."""

import json
import os

import pytest

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.runtime.speech_base import read_wav
from fx2onnx.testing.encoder_folder import write_encoder_folder

from test_encoder_tasks import _image_files, _reference, _same, _wav

LABELS = ["cat", "dog", "the sea"]


def _exported(tmp_path_factory, architecture):
    root = tmp_path_factory.mktemp(architecture)
    checkpoint = write_encoder_folder(architecture, root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    return str(checkpoint), str(root / "out"), result


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return _exported(tmp_path_factory, "CLIPModel")


@pytest.mark.slow  # an export of two towers: the fast tier keeps the single-tower encoder folders
def test_clip_folder_equals_transformers(clip, tmp_path, capsys):
    checkpoint, out, result = clip
    assert result.task == "zero-shot-image-classification"
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert piece["inputs"] == ["input_ids", "attention_mask", "pixel_values"]
    assert piece["outputs"] == ["logits_per_image", "text_embeds", "image_embeds"]
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("zero-shot-image-classification", checkpoint)
    expected = reference(images, candidate_labels=LABELS)
    assert len({round(e["score"], 3) for e in expected[0]}) == 3  # distinct scores: the order means something
    _same(ours(images, candidate_labels=LABELS), expected)
    _same(ours(images[0], candidate_labels="cat, dog", hypothesis_template="a {} on a mat"),
          reference(images[0], candidate_labels=["cat", "dog"], hypothesis_template="a {} on a mat"))
    assert main(["run", out, "--image", images[1], "--labels", "cat,dog,the sea", "--json"]) == 0
    _same(json.loads(capsys.readouterr().out), reference(images[1], candidate_labels=LABELS))
    # no label, a text to an image model, a template without {}, --labels on a classifier's folder
    for argv, words in ([["--image", images[0]], "needs candidate labels"],
                        [["a cat", "--labels", "cat,dog"], "takes --image PATH, not texts"],
                        [["--image", images[0], "--labels", "cat", "--template", "a photo"], "has no {}"]):
        assert main(["run", out, *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_siglip_folder_equals_transformers(tmp_path_factory, tmp_path):
    checkpoint, out, result = _exported(tmp_path_factory, "SiglipModel")
    assert result.task == "zero-shot-image-classification"
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert piece["inputs"] == ["input_ids", "pixel_values"]  # SigLIP's tokenizer gives no attention mask
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("zero-shot-image-classification", checkpoint)
    _same(ours(images, candidate_labels=LABELS), reference(images, candidate_labels=LABELS))  # sigmoids


@pytest.mark.slow
def test_siglip2_folder_equals_transformers(tmp_path_factory, tmp_path):
    checkpoint, out, result = _exported(tmp_path_factory, "Siglip2Model")
    assert result.task == "zero-shot-image-classification"
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    # NaFlex: the patches of each image resized to its own grid, padded, its mask and its grid's size beside them
    assert piece["inputs"] == ["input_ids", "pixel_values", "pixel_attention_mask", "spatial_shapes"]
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("zero-shot-image-classification", checkpoint)
    _same(ours(images, candidate_labels=LABELS), reference(images, candidate_labels=LABELS))


@pytest.mark.slow
def test_clap_folder_equals_transformers(tmp_path_factory, tmp_path, capsys):
    checkpoint, out, result = _exported(tmp_path_factory, "ClapModel")
    assert result.task == "zero-shot-audio-classification"  # no auto mapping names it: a text and an audio tower
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert piece["inputs"] == ["input_ids", "attention_mask", "input_features"]
    assert piece["outputs"] == ["logits_per_audio", "text_embeds", "audio_embeds"]
    wavs = [_wav(tmp_path / "a.wav", seconds=0.5, seed=0), _wav(tmp_path / "b.wav", seconds=0.8, seed=1)]
    ours, reference = fx2onnx.pipeline(out), _reference("zero-shot-audio-classification", checkpoint)
    labels = ["dog", "rain", "music"]
    _same(ours(wavs, candidate_labels=labels), [reference(read_wav(w), candidate_labels=labels) for w in wavs])
    argv = ["run", out, "--audio", wavs[0], "--labels", "dog,rain", "--template", "the sound of {}", "--json"]
    assert main(argv) == 0
    _same(json.loads(capsys.readouterr().out),
          reference(read_wav(wavs[0]), candidate_labels=["dog", "rain"], hypothesis_template="the sound of {}"))
    assert main(["run", out, "--audio", _wav(tmp_path / "c.wav", rate=48000), "--labels", "dog"]) == 2
    err = capsys.readouterr().err
    assert "48000 Hz" in err and err.count("\n") == 1, err


def _by_label(found):
    """The objects of a zero-shot detector in an order independent of near ties between labels."""
    return sorted(found, key=lambda o: (o["label"], -round(o["score"], 4), o["box"]["xmin"], o["box"]["ymin"]))


@pytest.mark.slow
def test_owlvit_folder_equals_transformers(tmp_path_factory, tmp_path, capsys):
    checkpoint, out, result = _exported(tmp_path_factory, "OwlViTForObjectDetection")
    assert result.task == "zero-shot-object-detection"
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert piece["inputs"] == ["input_ids", "attention_mask", "pixel_values"]
    assert piece["outputs"] == ["logits", "pred_boxes", "text_embeds", "image_embeds"]
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("zero-shot-object-detection", checkpoint)
    for threshold in (0.0, 0.8):
        for image in images:
            got, expected = ours(image, candidate_labels=["cat", "dog"], threshold=threshold), \
                reference(image, candidate_labels=["cat", "dog"], threshold=threshold)
            assert len(expected) > 0 if threshold == 0.0 else True
            assert len(got) == len(expected)
            for g, e in zip(_by_label(got), _by_label(expected)):
                assert g["label"] == e["label"] and abs(g["score"] - e["score"]) <= 1e-4, (g, e)
                assert all(abs(g["box"][k] - e["box"][k]) <= 1 for k in e["box"]), (g, e)
    assert main(["run", out, "--image", images[0], "--labels", "cat,dog", "--top-k", "3", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = reference(images[0], candidate_labels=["cat", "dog"], top_k=3)
    assert len(printed) == 3 and all(abs(g["score"] - e["score"]) <= 1e-4 for g, e in zip(printed, expected))
