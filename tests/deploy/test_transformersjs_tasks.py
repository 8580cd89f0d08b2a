"""The folders ``python -m fx2onnx export`` writes for transformers' pipeline tasks, run by transformers.js' pipeline
of the same task (Node, onnxruntime-node, one process for every folder): what transformers' pipeline returns on the
same inputs (scores within 1e-4, labels and texts equal, boxes within a pixel).

Where transformers.js prepares or reports otherwise, the inputs are those both treat alike: images already at the
processor's size (the two libraries resize otherwise), a DETR image of 64x96 (its processor's 64 on the shorter side,
96 at most: no resize); transformers' template of zero-shot image classification (``This is a photo of {}.``,
transformers.js' default has no final period); sounds that CLAP's 1 s does not hold a whole number of times
(transformers.js 4.3 repeats such a sound once less than transformers' ``repeatpad``). Tokens are tagged without
``start`` / ``end`` (transformers.js gives no offsets); a semantic segmenter's masks are equal on 99% of the pixels
(both upsample the logits bilinearly, rounding apart at the edges).
A zero-shot object detector's boxes (OWL-ViT) are compared in any order: its random weights give saturated scores,
whose ties each library orders its own way."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from fx2onnx.deploy import export_folder
from fx2onnx.testing.encoder_folder import write_encoder_folder

from test_encoder_tasks import MASKED, TEXTS, _reference, _same, _same_detections

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "clients", "transformersjs_pipeline.mjs")
LABELS = ["cat", "dog", "the sea"]
#: transformers' default template of zero-shot image classification (transformers.js' has no final period)
PHOTO = {"hypothesis_template": "This is a photo of {}."}
#: the folders of this module: name -> (architecture, task given to the export, classifier labels)
FOLDERS = {
    "classifier": ("BertForSequenceClassification", None, None),
    "masked": ("BertForMaskedLM", None, None),
    "tagger": ("BertForTokenClassification", None, None),
    "embedder": ("BertModel", None, None),
    "nli": ("BertForSequenceClassification", "zero-shot-classification", ("contradiction", "neutral", "entailment")),
    "image_classifier": ("ViTForImageClassification", None, None),
    "image_embedder": ("ViTModel", None, None),
    "ctc": ("Wav2Vec2ForCTC", None, None),
    "audio_classifier": ("Wav2Vec2ForSequenceClassification", None, None),
    "detector": ("DetrForObjectDetection", None, None),
    "depth": ("DPTForDepthEstimation", None, None),
    "segmenter": ("SegformerForSemanticSegmentation", None, None),
    "clip": ("CLIPModel", None, None),
    "siglip": ("SiglipModel", None, None),
    "clap": ("ClapModel", None, None),
    "owlvit": ("OwlViTForObjectDetection", None, None),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> (checkpoint, exported folder), each exported once."""
    made = {}
    for name, (architecture, task, labels) in FOLDERS.items():
        root = tmp_path_factory.mktemp(name)
        checkpoint = write_encoder_folder(architecture, root / "checkpoint", labels=labels)
        # each folder its own name: transformers.js remembers the files of a name
        result = export_folder(checkpoint, root / name, **({"task": task} if task else {}))
        assert result.ok and result.written, result.check_lines()
        made[name] = (str(checkpoint), str(root / name))
    return made


def _images(folder):
    import PIL.Image

    rng = np.random.default_rng(2)
    paths = {}
    for name, shape in (("square", (32, 32, 3)), ("wide", (64, 96, 3))):
        paths[name] = os.path.join(folder, f"{name}.png")
        PIL.Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(paths[name])
    return paths


def _run_transformersjs(jobs, tmp_path):
    """transformers.js' outputs for each job (one Node process)."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: transformers.js runs in Node")
    if not os.path.isdir(os.path.join(ROOT, "node_modules", "@huggingface", "transformers")):
        pytest.fail("transformers.js is not installed: run make venv (npm ci --ignore-scripts at the root)")
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(jobs))
    done = subprocess.run(["node", SCRIPT, str(path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _same_detections_any_order(got, expected):
    """The same objects in any order: each expected one found once (label equal, score within 1e-4, corners within
    a pixel)."""
    assert len(got) == len(expected)
    left = list(got)
    for e in expected:
        found = next((g for g in left if g["label"] == e["label"] and abs(g["score"] - e["score"]) <= 1e-4
                      and all(abs(g["box"][k] - e["box"][k]) <= 1 for k in e["box"])), None)
        assert found is not None, (e, left[:3])
        left.remove(found)


def _array(tensor):
    return np.asarray(tensor["data"], dtype=np.float64).reshape(tensor["dims"])


def test_a_processor_and_a_ctc_tokenizer_are_written_as_transformersjs_reads_them(tmp_path):
    """transformers 5 saves a wav2vec2's feature extractor inside processor_config.json and its CTC tokenizer as
    vocab.json: the folder gets preprocessor_config.json and a tokenizer.json decoding as transformers' pipeline."""
    import tokenizers
    import transformers

    from fx2onnx.deploy.transformersjs import write_ctc_tokenizer_json, write_preprocessor_config
    from fx2onnx.testing.encoder_folder import ctc_processor

    processor = ctc_processor(tmp_path)
    processor.save_pretrained(tmp_path)
    assert not (tmp_path / "preprocessor_config.json").exists() and not (tmp_path / "tokenizer.json").exists()
    assert write_preprocessor_config(tmp_path) and write_ctc_tokenizer_json(tmp_path)
    written = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert written == json.loads((tmp_path / "processor_config.json").read_text())["feature_extractor"]
    assert transformers.AutoFeatureExtractor.from_pretrained(tmp_path).to_dict() == \
        processor.feature_extractor.to_dict()
    # ids as a CTC head gives them: repeats, pads between repeats, <s> </s> <unk>, word delimiters
    ids = [1, 5, 5, 0, 5, 4, 4, 6, 2, 3, 0, 6, 6, 4, 7]
    expected = processor.tokenizer.decode(ids)  # transformers' pipeline skips no special token of a CTC head
    assert expected == "<s>aa b</s><unk>b c"
    assert tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json")).decode(ids, skip_special_tokens=True) \
        == expected
    assert write_preprocessor_config(tmp_path) is None and write_ctc_tokenizer_json(tmp_path) is None  # once


@pytest.mark.slow
def test_every_task_folder_runs_in_transformersjs_as_in_transformers(folders, tmp_path):
    config = json.load(open(os.path.join(folders["classifier"][1], "config.json")))
    assert config["transformers.js_config"]["use_external_data_format"] == {"model.onnx": 1}
    assert os.path.isfile(os.path.join(folders["classifier"][1], "onnx", "model.onnx_data"))
    images = _images(str(tmp_path))
    # 0.4 s and 0.4375 s at 16 kHz: CLAP's 1 s holds neither a whole number of times (transformers.js 4.3 repeats
    # a sound one time less than transformers when it does: 0.5 s is repeated once, then zeros)
    sounds = [(np.random.default_rng(seed).standard_normal(length) * 0.2).astype(np.float32)
              for seed, length in enumerate((6400, 7000))]
    audio = [{"audio": s.tolist()} for s in sounds]
    texts = TEXTS + ["zebras run in qatar"]
    # name, task, transformers.js' inputs, its positional arguments, its options
    jobs = [("classifier", "text-classification", TEXTS, [], {"top_k": 3}),
            ("masked", "fill-mask", MASKED, [], {"top_k": 3}),
            ("tagger", "token-classification", texts, [], {}),
            ("embedder", "feature-extraction", TEXTS, [], {}),
            ("nli", "zero-shot-classification", TEXTS, [["cinema", "travel", "the sea"]], {}),
            ("nli", "zero-shot-classification", TEXTS, [["cinema", "travel"]], {"multi_label": True}),
            ("image_classifier", "image-classification", [images["square"]], [], {"top_k": 3}),
            ("image_embedder", "image-feature-extraction", [images["square"]], [], {}),
            ("ctc", "automatic-speech-recognition", audio, [], {}),
            ("audio_classifier", "audio-classification", audio, [], {"top_k": 3}),
            ("detector", "object-detection", [images["wide"]], [], {"threshold": 0.0}),
            ("depth", "depth-estimation", [images["square"]], [], {}),
            ("segmenter", "image-segmentation", [images["square"]], [], {}),
            ("clip", "zero-shot-image-classification", [images["square"]], [LABELS], PHOTO),
            ("siglip", "zero-shot-image-classification", [images["square"]], [LABELS], PHOTO),
            ("clap", "zero-shot-audio-classification", audio, [LABELS], {}),
            ("owlvit", "zero-shot-object-detection", [images["square"]], [LABELS], {"threshold": 0.0})]
    outputs = _run_transformersjs([{"folder": folders[name][1], "task": task, "inputs": inputs, "args": args,
                                    "options": options} for name, task, inputs, args, options in jobs], tmp_path)
    compared = []
    for (name, task, inputs, args, options), got in zip(jobs, outputs):
        reference = _reference(task, folders[name][0])
        given = [np.asarray(i["audio"], dtype=np.float32) if isinstance(i, dict) else i for i in inputs]
        keywords = dict(options, **({"candidate_labels": args[0]} if args else {}))
        expected = [reference(i, **keywords) for i in given]
        if task == "token-classification":  # transformers.js gives no character offsets
            expected = [[{k: v for k, v in e.items() if k not in ("start", "end")} for e in row] for row in expected]
            assert sum(map(len, expected)) > 5
        if task in ("feature-extraction", "image-feature-extraction"):
            for g, e in zip(got, expected):
                np.testing.assert_allclose(_array(g), np.asarray(e), atol=1e-4)
        elif task == "object-detection":
            assert len(expected[0]) == 10  # every query
            for g, e in zip(got, expected):
                _same_detections(g, e)
        elif task == "zero-shot-object-detection":  # saturated scores tie: the order of ties is each one's own
            for g, e in zip(got, expected):
                assert len(e) > 16  # boxes of several labels
                _same_detections_any_order(g, e)
        elif task == "depth-estimation":
            for g, e in zip(got, expected):
                depth = e["predicted_depth"].numpy()
                np.testing.assert_allclose(_array(g["predicted_depth"]).reshape(depth.shape), depth,
                                           atol=1e-4 * np.abs(depth).max())
                grey = np.asarray(g["depth"]["data"]).reshape(e["depth"].size[::-1])
                assert np.abs(grey - np.asarray(e["depth"], dtype=int)).max() <= 1
        elif task == "image-segmentation":
            for g, e in zip(got, expected):
                assert [(m["label"], m["score"]) for m in g] == [(m["label"], m["score"]) for m in e]
                for gm, em in zip(g, e):
                    mask = np.asarray(gm["mask"]["data"]).reshape(em["mask"].size[::-1])
                    assert (mask == np.asarray(em["mask"])).mean() > 0.99
        else:
            _same(got, expected, f"{name}/{task}")
        compared.append(task)
    assert len(compared) == len(jobs)
