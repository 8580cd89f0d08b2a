"""A VITS folder made in code (MMS-TTS's layout: a character tokenizer), exported with no flag as one model
(``input_ids``, ``attention_mask`` -> ``waveform``, ``spectrogram``) and run by ``fx2onnx.pipeline`` / ``python -m
fx2onnx run``: the waveform of transformers' text-to-audio pipeline (samples within 1e-4, the same length), a WAV
file written."""

import json
import os

import numpy as np
import pytest

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.runtime.speech_base import read_wav
from fx2onnx.testing.pipeline_folders import write_vits_folder

from test_encoder_tasks import _reference

TEXTS = ["the cat sat on the mat", "good night, paris!"]


@pytest.fixture(scope="module")
def vits(tmp_path_factory):
    root = tmp_path_factory.mktemp("vits")
    checkpoint = write_vits_folder(root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    return str(checkpoint), str(root / "out"), result


@pytest.mark.slow  # the export of a tiny VITS takes about a minute (many small convolutions and flows)
def test_vits_folder_equals_transformers(vits, tmp_path, capsys):
    checkpoint, out, result = vits
    assert result.task == "text-to-audio" and len(result.checks) == 2
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert piece["file"] == "onnx/model.onnx" and piece["inputs"] == ["input_ids", "attention_mask"]
    assert piece["outputs"] == ["waveform", "spectrogram"]
    ours, reference = fx2onnx.pipeline(out), _reference("text-to-audio", checkpoint)
    for got, expected in zip(ours(TEXTS), reference(TEXTS)):
        assert got["sampling_rate"] == expected["sampling_rate"] == 16000
        assert got["audio"].shape == expected["audio"].shape and got["audio"].shape[0] > 100
        np.testing.assert_allclose(got["audio"], expected["audio"], atol=1e-4)
    # the command line writes a WAV file per text
    assert main(["run", out, TEXTS[0], "--save-dir", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = reference(TEXTS[0])["audio"]
    assert printed["samples"] == expected.shape[0] and printed["sampling_rate"] == 16000
    samples = read_wav(printed["saved"], 16000)
    np.testing.assert_allclose(samples, np.clip(expected, -1, 1), atol=2 / 32767)
    assert main(["run", out, TEXTS[1], "--save-dir", str(tmp_path)]) == 0
    assert "saved as" in capsys.readouterr().out
    # an image to a text folder, an option of another task
    for args, words in ([["--image", "cat.png"], "takes texts, not --image PATH"],
                        [["hello", "--top-k", "2"], "takes no ['top_k']"]):
        assert main(["run", out, *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
