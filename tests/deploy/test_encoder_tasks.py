"""Folders of single-pass encoders (classifiers, tagger, masked LM, embedders, CTC) exported with no flag and run
by ``fx2onnx.pipeline`` / ``python -m fx2onnx run``: what transformers' pipeline returns on the same inputs (scores
within 1e-4, labels and texts equal); bad inputs end in one ``error:`` line."""

import json
import os
import shutil
import wave

import numpy as np
import pytest

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.runtime.speech_base import read_wav
from fx2onnx.testing.encoder_folder import write_encoder_folder

TEXTS = ["the movie was great", "paris is the capital of france, a city by the sea"]
MASKED = ["the cat [MASK] on the mat", "paris is the [MASK] of france"]


def _same(got, expected, path="result"):
    """Equal structures: floats within 1e-4, the rest equal."""
    if isinstance(expected, dict):
        assert set(got) == set(expected), (path, got, expected)
        for key in expected:
            _same(got[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), (path, len(got), len(expected))
        for i, (g, e) in enumerate(zip(got, expected)):
            _same(g, e, f"{path}[{i}]")
    elif isinstance(expected, (float, np.floating)):
        assert abs(float(got) - float(expected)) <= 1e-4, (path, got, expected)
    else:
        assert got == expected, (path, got, expected)


def _exported(tmp_path_factory, architecture):
    root = tmp_path_factory.mktemp(architecture)
    checkpoint = write_encoder_folder(architecture, root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    return str(checkpoint), str(root / "out"), result


def _reference(task, checkpoint):
    import transformers

    transformers.utils.logging.disable_progress_bar()
    return transformers.pipeline(task, model=checkpoint)


def _image_files(folder, count=2):
    import PIL.Image

    rng = np.random.default_rng(1)
    paths = []
    for i in range(count):
        path = os.path.join(folder, f"image_{i}.png")
        PIL.Image.fromarray(rng.integers(0, 256, (30 + 10 * i, 44 - 6 * i, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def _wav(path, rate=16000, seconds=0.4, seed=0):
    samples = (np.random.default_rng(seed).standard_normal(int(rate * seconds)) * 6000).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(samples.tobytes())
    return str(path)


def test_the_task_of_a_folder_is_the_pipeline_task_of_its_class():
    import transformers

    from fx2onnx.deploy.tasks import folder_task, tasks_of_class

    assert tasks_of_class("BertForSequenceClassification") == ["text-classification"]
    assert tasks_of_class("Wav2Vec2ForCTC") == ["automatic-speech-recognition"]
    assert tasks_of_class("MPNetModel") == ["feature-extraction"]  # a base model: AutoModel's mapping
    assert folder_task(transformers.BertConfig(architectures=["BertForMaskedLM"])) == "fill-mask"
    vit = transformers.ViTConfig(architectures=["ViTModel"])
    assert folder_task(vit) == "image-feature-extraction"
    assert folder_task(vit, "feature-extraction") == "feature-extraction"  # --task chooses among its tasks
    with pytest.raises(ValueError, match="not supported from a folder of ViTModel: its head is one of"):
        folder_task(vit, "image-classification")
    # transformers' pipeline name of an instance / universal segmenter's task
    mask2former = transformers.Mask2FormerConfig(architectures=["Mask2FormerForUniversalSegmentation"])
    assert folder_task(mask2former, "image-segmentation") == folder_task(mask2former) == "universal-segmentation"
    detr = transformers.DetrConfig(architectures=["DetrForSegmentation"])  # listed under both: its panoptic head
    assert folder_task(detr, "image-segmentation") == folder_task(detr) == "universal-segmentation"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return _exported(tmp_path_factory, "BertForSequenceClassification")


@pytest.fixture(scope="module")
def image_classifier(tmp_path_factory):
    return _exported(tmp_path_factory, "ViTForImageClassification")


def test_text_classification_folder_equals_transformers(classifier, capsys):
    checkpoint, out, result = classifier
    assert result.task == "text-classification" and result.family == "encoder"
    assert result.nbytes > os.path.getsize(os.path.join(out, "onnx", "model.onnx"))  # the sub-folder counted
    assert os.path.isfile(os.path.join(out, "onnx", "model.onnx"))
    assert {"config.json", "tokenizer.json"} <= set(os.listdir(out))
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["task"] == "text-classification" and "onnx/model.onnx" in metadata["files"]
    assert metadata["pieces"]["model"]["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert metadata["pieces"]["model"]["outputs"] == ["logits"]
    assert "padding" not in metadata["pieces"]["model"]  # BERT's pads change nothing: run batches padded texts
    ours, reference = fx2onnx.pipeline(out), _reference("text-classification", checkpoint)
    assert ours.task == "text-classification"
    _same(ours(TEXTS[0]), reference(TEXTS[0]))
    _same(ours(TEXTS), reference(TEXTS))
    _same(ours(TEXTS, top_k=2), reference(TEXTS, top_k=2))
    assert main(["run", out, *TEXTS, "--json", "--top-k", "3"]) == 0
    _same(json.loads(capsys.readouterr().out), reference(TEXTS, top_k=3))
    # a text folder given an image; generate on a folder that generates nothing
    assert main(["run", out, "--image", "cat.png"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert main(["generate", out, "hello"]) == 2
    assert "is a folder of task 'text-classification': run it with python -m fx2onnx run" in capsys.readouterr().err


def test_a_text_outside_the_range_the_export_narrowed_ends_in_one_line(classifier, tmp_path, capsys):
    import onnx

    from fx2onnx.runtime.input_ranges import FROZEN_INPUTS
    from fx2onnx.runtime.integrity import folder_manifest

    # the classifier's folder, its model holding the tokens 2 to 6 only, as an export narrowing them records it
    out = str(tmp_path / "narrowed")
    shutil.copytree(classifier[1], out)
    path = os.path.join(out, "onnx", "model.onnx")
    model = onnx.load(path, load_external_data=False)
    narrowed = {"input_ids.shape[1]": {"kind": "dim_range", "position": 0, "axis": 1, "min": 2, "max": 6,
                                       "weight_bound": False}}
    onnx.helper.set_model_props(model, {FROZEN_INPUTS: json.dumps(narrowed)})
    onnx.save(model, path)
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    metadata["files"] = folder_manifest(out)
    json.dump(metadata, open(os.path.join(out, "fx2onnx.json"), "w"))
    ours = fx2onnx.pipeline(out)
    assert ours("a movie")[0]["label"]  # 4 tokens with [CLS] and [SEP]: inside the range
    with pytest.raises(ValueError, match=r"The text gives input_ids of \d+ along axis 1: the exported model holds "
                                         r"sizes 2 to 6 only \(the export narrowed it\); shorten the text"):
        ours(TEXTS[1])
    assert main(["run", out, TEXTS[1]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "sizes 2 to 6 only" in err and err.count("\n") == 1, err


def test_image_classification_folder_equals_transformers_and_refuses_bad_inputs(image_classifier, tmp_path, capsys):
    checkpoint, out, result = image_classifier
    assert result.task == "image-classification"
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("image-classification", checkpoint)
    _same(ours(images[0]), reference(images[0]))
    _same(ours(images), reference(images))
    _same(ours(images, top_k=2), reference(images, top_k=2))
    assert main(["run", out, "--image", images[0], "--image", images[1]]) == 0
    printed = capsys.readouterr().out
    assert f"[2] {images[1]}" in printed and reference(images[1])[0]["label"] in printed
    # a text to an image model, an image that does not decode
    broken = tmp_path / "broken.png"
    broken.write_bytes(open(images[0], "rb").read()[:60])
    for argv, words in ([[out, "a cat on a mat"], "takes --image PATH, not texts"],
                        [[out, "--image", str(broken)], "does not decode as an image"],
                        [[out, "--image", str(tmp_path / "missing.png")], "does not exist"]):
        assert main(["run", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_fill_mask_token_classification_and_features_equal_transformers(tmp_path_factory, capsys):
    checkpoint, out, _ = _exported(tmp_path_factory, "BertForMaskedLM")
    ours, reference = fx2onnx.pipeline(out), _reference("fill-mask", checkpoint)
    _same(ours(MASKED[0]), reference(MASKED[0]))
    _same(ours(MASKED, top_k=3), reference(MASKED, top_k=3))
    with pytest.raises(ValueError, match="no mask token"):
        ours("no mask here")

    checkpoint, out, result = _exported(tmp_path_factory, "BertForTokenClassification")
    assert result.task == "token-classification"
    ours, reference = fx2onnx.pipeline(out), _reference("token-classification", checkpoint)
    texts = TEXTS + ["zebras run in qatar"]  # unknown words: the text under the token
    expected = reference(texts)
    assert sum(len(e) for e in expected) > 5
    _same(ours(texts), expected)
    for strategy in ("simple", "first", "average", "max"):  # tokens grouped into entities, words as a whole
        expected = reference(texts, aggregation_strategy=strategy)
        assert all("entity_group" in e for row in expected for e in row) and sum(map(len, expected)) > 3
        _same(ours(texts, aggregation_strategy=strategy), expected)
    assert main(["run", out, texts[1], "--aggregation", "first", "--json"]) == 0
    _same(json.loads(capsys.readouterr().out), reference(texts[1], aggregation_strategy="first"))
    assert main(["run", out, texts[1], "--aggregation", "longest"]) == 2
    err = capsys.readouterr().err
    assert "'longest' is not one of transformers' ['none', 'simple'" in err and err.count("\n") == 1, err

    checkpoint, out, result = _exported(tmp_path_factory, "BertModel")
    assert result.task == "feature-extraction"
    ours, reference = fx2onnx.pipeline(out), _reference("feature-extraction", checkpoint)
    got, expected = ours(TEXTS), reference(TEXTS)
    for g, e in zip(got, expected):
        assert np.asarray(g).shape == np.asarray(e).shape
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), atol=1e-4)


@pytest.mark.slow
def test_image_features_equal_transformers(tmp_path_factory, tmp_path, capsys):
    checkpoint, out, result = _exported(tmp_path_factory, "ViTModel")
    assert result.task == "image-feature-extraction"
    images = _image_files(str(tmp_path))
    got, expected = fx2onnx.pipeline(out)(images), _reference("image-feature-extraction", checkpoint)(images)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-4)
    assert main(["run", out, "--image", images[0], "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["shape"] == list(np.asarray(expected[0]).shape)
    assert abs(printed["norm"] - np.linalg.norm(np.asarray(expected[0]))) < 1e-3


@pytest.mark.slow
def test_ctc_and_audio_classification_equal_transformers(tmp_path_factory, tmp_path, capsys):
    checkpoint, out, result = _exported(tmp_path_factory, "Wav2Vec2ForCTC")
    assert result.task == "automatic-speech-recognition"
    wavs = [_wav(tmp_path / "a.wav", seed=0), _wav(tmp_path / "b.wav", seconds=0.6, seed=1)]
    ours, reference = fx2onnx.pipeline(out), _reference("automatic-speech-recognition", checkpoint)
    for path in wavs:
        expected = reference(read_wav(path))
        assert expected["text"]
        _same(ours(path), expected)
    assert main(["run", out, "--audio", wavs[0]]) == 0
    assert capsys.readouterr().out.strip() == reference(read_wav(wavs[0]))["text"]
    # a WAV at another rate than the feature extractor's
    assert main(["run", out, "--audio", _wav(tmp_path / "c.wav", rate=48000)]) == 2
    err = capsys.readouterr().err
    assert "48000 Hz" in err and "16000 Hz" in err and err.count("\n") == 1, err

    checkpoint, out, result = _exported(tmp_path_factory, "Wav2Vec2ForSequenceClassification")
    assert result.task == "audio-classification"
    ours, reference = fx2onnx.pipeline(out), _reference("audio-classification", checkpoint)
    _same(ours(wavs), [reference(read_wav(path)) for path in wavs])
    _same(ours(wavs[1], top_k=1), reference(read_wav(wavs[1]), top_k=1))


@pytest.mark.slow
def test_zero_shot_classification_equals_transformers(tmp_path_factory, capsys):
    root = tmp_path_factory.mktemp("nli")
    checkpoint = write_encoder_folder("BertForSequenceClassification", root / "checkpoint",
                                      labels=("contradiction", "neutral", "entailment"))
    result = export_folder(checkpoint, root / "out", task="zero-shot-classification")
    assert result.ok and result.task == "zero-shot-classification"
    out, checkpoint = str(root / "out"), str(checkpoint)
    ours, reference = fx2onnx.pipeline(out), _reference("zero-shot-classification", checkpoint)
    labels = ["cinema", "travel", "the sea"]
    _same(ours(TEXTS[0], candidate_labels=labels), reference(TEXTS[0], candidate_labels=labels))
    _same(ours(TEXTS, candidate_labels="cinema, travel", multi_label=True),
          reference(TEXTS, candidate_labels="cinema, travel", multi_label=True))
    _same(ours(TEXTS[1], candidate_labels=["travel"], hypothesis_template="It is about {}."),
          reference(TEXTS[1], candidate_labels=["travel"], hypothesis_template="It is about {}."))
    assert main(["run", out, TEXTS[0], "--labels", "cinema,travel", "--json"]) == 0
    _same(json.loads(capsys.readouterr().out), reference(TEXTS[0], candidate_labels=["cinema", "travel"]))
    assert main(["run", out, TEXTS[0]]) == 2
    assert "needs candidate labels" in capsys.readouterr().err
    # a classifier without an entailment label is not a zero-shot classifier
    other = write_encoder_folder("BertForSequenceClassification", root / "sentiment")
    with pytest.raises(ValueError, match="no 'entailment' label"):
        export_folder(other, root / "out2", task="zero-shot-classification")


def _same_detections(got, expected):
    """The same objects: labels equal, scores within 1e-4, box corners within a pixel (the pipeline truncates them
    to integers)."""
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g["label"] == e["label"] and abs(g["score"] - e["score"]) <= 1e-4, (g, e)
        assert all(abs(g["box"][k] - e["box"][k]) <= 1 for k in e["box"]), (g, e)


@pytest.mark.slow
def test_object_detection_equals_transformers(tmp_path_factory, tmp_path, capsys):
    checkpoint, out, result = _exported(tmp_path_factory, "DetrForObjectDetection")
    assert result.task == "object-detection"
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert metadata["inputs"] == ["pixel_values", "pixel_mask"] and metadata["outputs"] == ["logits", "pred_boxes"]
    images = _image_files(str(tmp_path), 3)  # three sizes: the height and width are dynamic
    ours, reference = fx2onnx.pipeline(out), _reference("object-detection", checkpoint)
    for got, expected in zip(ours(images, threshold=0.0), reference(images, threshold=0.0)):
        assert len(expected) == 10  # every query
        _same_detections(got, expected)
    _same_detections(ours(images[0], threshold=0.5), reference(images[0], threshold=0.5))
    assert main(["run", out, "--image", images[1], "--threshold", "0.3", "--json"]) == 0
    _same_detections(json.loads(capsys.readouterr().out), reference(images[1], threshold=0.3))


@pytest.mark.slow
def test_depth_estimation_equals_transformers(tmp_path_factory, tmp_path, capsys):
    import PIL.Image

    checkpoint, out, result = _exported(tmp_path_factory, "DPTForDepthEstimation")
    assert result.task == "depth-estimation"
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("depth-estimation", checkpoint)
    for got, expected in zip(ours(images), reference(images)):
        depth = expected["predicted_depth"].numpy()
        assert got["predicted_depth"].shape == depth.shape and np.abs(depth).max() > 0.01
        np.testing.assert_allclose(got["predicted_depth"], depth, atol=1e-4 * np.abs(depth).max())
        assert got["depth"].size == expected["depth"].size  # the grey image at the image's size, 0-255
        assert np.abs(np.asarray(got["depth"], dtype=int) - np.asarray(expected["depth"], dtype=int)).max() <= 1
    assert main(["run", out, "--image", images[0], "--save-dir", str(tmp_path / "depth"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = tmp_path / "depth" / "image_0_depth.png"
    assert printed["saved"] == str(saved) and PIL.Image.open(saved).size == PIL.Image.open(images[0]).size


@pytest.mark.slow
def test_semantic_segmentation_equals_transformers(tmp_path_factory, tmp_path, capsys):
    checkpoint, out, result = _exported(tmp_path_factory, "SegformerForSemanticSegmentation")
    assert result.task == "image-segmentation"
    images = _image_files(str(tmp_path))
    ours, reference = fx2onnx.pipeline(out), _reference("image-segmentation", checkpoint)
    for got, expected in zip(ours(images), reference(images)):
        assert [(m["label"], m["score"]) for m in got] == [(m["label"], m["score"]) for m in expected]
        for g, e in zip(got, expected):
            assert g["mask"].size == e["mask"].size and (np.asarray(g["mask"]) == np.asarray(e["mask"])).mean() > 0.99
    assert main(["run", out, "--image", images[1], "--save-dir", str(tmp_path / "masks"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [m["label"] for m in printed] == [m["label"] for m in reference(images[1])]
    assert abs(sum(m["share"] for m in printed) - 1) < 1e-5 and all(os.path.isfile(m["saved"]) for m in printed)
