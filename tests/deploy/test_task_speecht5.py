"""A SpeechT5 folder made in code (its vocoder in ``vocoder/``, a default voice), exported with no flag as optimum's
three files (encoder, decoder with its cache and stop probability, postnet and vocoder), each checked against eager,
and run by ``fx2onnx.pipeline`` / ``python -m fx2onnx run``: the waveform of transformers' text-to-audio pipeline
given the same vocoder and speaker embedding (samples within 1e-4, the same length, the vocoder's rate)."""

import json
import os
import shutil

import numpy as np
import pytest

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.runtime.speech_base import read_wav
from fx2onnx.testing.speecht5_folder import SPEAKER_DIM, write_speecht5_folder

# two long texts stop on the stop probability, the short one at the loop's length limit
TEXTS = ["the cat sat on the mat", "good night, paris!", "hello"]


@pytest.fixture(scope="module")
def speecht5(tmp_path_factory):
    root = tmp_path_factory.mktemp("speecht5")
    checkpoint = write_speecht5_folder(root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    return str(checkpoint), str(root / "out"), result


def _reference(checkpoint):
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    vocoder = transformers.SpeechT5HifiGan.from_pretrained(os.path.join(checkpoint, "vocoder"))
    pipe = transformers.pipeline("text-to-audio", model=checkpoint, vocoder=vocoder)

    def run(text, voice=None):
        voice = np.load(os.path.join(checkpoint, "speaker_embeddings.npy")) if voice is None else voice
        return pipe(text, forward_params={"speaker_embeddings": torch.tensor(voice)[None]})

    return run


@pytest.mark.slow  # the export and transformers' loop take about 20 s
def test_speecht5_folder_equals_transformers(speecht5, tmp_path, capsys):
    checkpoint, out, result = speecht5
    assert result.task == "text-to-audio" and len(result.checks) == 6 and all(c.ok for c in result.checks)
    pieces = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]
    assert [p["file"] for p in pieces.values()] == ["onnx/encoder_model.onnx", "onnx/decoder_model.onnx",
                                                    "onnx/decoder_postnet_and_vocoder.onnx"]
    assert pieces["decoder"]["outputs"][:2] == ["spectrum", "prob"] and len(pieces["decoder"]["cache"]) == 4
    ours, reference = fx2onnx.pipeline(out), _reference(checkpoint)
    lengths = []
    for got, text in zip(ours(TEXTS), TEXTS):
        expected = reference(text)
        assert got["sampling_rate"] == expected["sampling_rate"] == 16000
        assert got["audio"].shape == expected["audio"].shape and np.abs(expected["audio"]).max() > 0.1
        np.testing.assert_allclose(got["audio"], expected["audio"], atol=1e-4)
        lengths.append(got["audio"].shape[0])
    assert lengths[0] == lengths[1] < 22 * 10 * 2 * 16 and lengths[2] == 5 * 10 * 2 * 16  # threshold, then limit
    # another voice, as transformers' pipeline takes it or as a keyword
    voice = np.random.default_rng(5).standard_normal(SPEAKER_DIM).astype(np.float32)
    expected = reference(TEXTS[0], voice)["audio"]
    for got in (ours(TEXTS[0], forward_params={"speaker_embeddings": voice[None]}),
                ours(TEXTS[0], speaker_embeddings=voice)):
        np.testing.assert_allclose(got["audio"], expected, atol=1e-4)
    # the command line writes a WAV file with the folder's voice
    assert main(["run", out, TEXTS[1], "--save-dir", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = reference(TEXTS[1])["audio"]
    assert printed["samples"] == expected.shape[0] and printed["sampling_rate"] == 16000
    np.testing.assert_allclose(read_wav(printed["saved"], 16000), np.clip(expected, -1, 1), atol=2 / 32767)


@pytest.mark.slow  # an export
def test_speecht5_bad_inputs(speecht5, tmp_path, capsys):
    checkpoint, out, _ = speecht5
    # a checkpoint without its vocoder: the export says where to put it
    bare = shutil.copytree(checkpoint, tmp_path / "bare", ignore=shutil.ignore_patterns("vocoder"))
    assert main(["export", str(bare), "--out", str(tmp_path / "bare_out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "save its vocoder" in err and err.count("\n") == 1, err
    # a folder without a default voice, no voice given; a voice of the wrong size
    silent = shutil.copytree(out, tmp_path / "silent")
    os.remove(os.path.join(silent, "speaker_embeddings.npy"))
    for folder, args, words in ((str(silent), [], "give a voice, speaker_embeddings="),
                                (out, ["--image", "cat.png"], "takes texts, not --image PATH")):
        assert main(["run", folder, "hello", *args] if not args else ["run", folder, *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
    with pytest.raises(ValueError, match="holds 3 values, the model takes 8"):
        fx2onnx.pipeline(out)("hello", speaker_embeddings=np.zeros(3, dtype=np.float32))
