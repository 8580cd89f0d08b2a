"""A MusicGen folder made in code (a T5 text encoder, a decoder over 4 delayed codebooks, an EnCodec; classifier-free
guidance and sampling in its generation config, as the published ones), exported with no flag as the text encoder,
the merged decoder with its cache and the codec's decoder, each checked against eager, then run by
``fx2onnx.pipeline`` / ``python -m fx2onnx run``: the waveform of transformers' text-to-audio pipeline in greedy
search (``do_sample=False`` on both sides) within 1e-4, at the codec's sampling rate, a WAV file written."""

import json
import os

import numpy as np
import pytest
import transformers

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.runtime.speech_base import read_wav
from fx2onnx.testing.pipeline_folders import write_musicgen_folder

TEXTS = ["the cat sat on the mat", "hello world, hello again", "Write a short story about a robot"]
GREEDY = {"do_sample": False}


@pytest.fixture(scope="module")
def musicgen(tmp_path_factory):
    root = tmp_path_factory.mktemp("musicgen")
    checkpoint = write_musicgen_folder(root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    return str(checkpoint), str(root / "out"), result


def _close(got, expected, rate=8000):
    assert got["sampling_rate"] == expected["sampling_rate"] == rate
    assert got["audio"].shape == expected["audio"].shape and got["audio"].shape[0] > 50
    np.testing.assert_allclose(got["audio"], expected["audio"], atol=1e-4)


@pytest.mark.slow  # export, eager and ONNX generation of three texts: about 20 s on the loaded machine
def test_musicgen_folder_equals_transformers(musicgen, tmp_path, capsys):
    checkpoint, out, result = musicgen
    assert result.task == "text-to-audio" and len(result.checks) == 8 and all(c.ok for c in result.checks)
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["split"] == "codebooks" and metadata["codebooks"] == 4
    assert metadata["pieces"]["encoder"]["file"] == "onnx/encoder_model.onnx"
    assert metadata["pieces"]["decoder"]["file"] == "onnx/decoder_model_merged.onnx"
    assert metadata["audio_decoder"] == {"file": "onnx/encodec_decode.onnx", "inputs": ["audio_codes"],
                                         "outputs": ["audio_values"]}
    ours, reference = fx2onnx.pipeline(out), transformers.pipeline("text-to-audio", model=checkpoint)
    expected = reference(TEXTS, forward_params=GREEDY)
    for got, want in zip(ours(TEXTS, forward_params=GREEDY), expected):
        _close(got, want)
    # the texts make different sounds: the comparison sees the codes
    assert np.abs(expected[0]["audio"] - expected[1]["audio"]).max() > 1e-2
    # fewer steps, and no guidance, on both sides
    options = {"generate_kwargs": {"max_new_tokens": 10, "do_sample": False}}
    _close(ours(TEXTS[0], **options), reference(TEXTS[0], **options))
    unguided = {"forward_params": {"do_sample": False, "guidance_scale": 1.0}}
    _close(ours(TEXTS[1], **unguided), reference(TEXTS[1], **unguided))
    with pytest.raises(ValueError, match="greedy: give do_sample=False"):
        ours(TEXTS[0], forward_params={"do_sample": True})
    # the command line writes a WAV file per text (the folder's loop is greedy: no option needed)
    assert main(["run", out, TEXTS[0], "--save-dir", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["samples"] == expected[0]["audio"].shape[0] and printed["sampling_rate"] == 8000
    np.testing.assert_allclose(read_wav(printed["saved"], 8000), np.clip(expected[0]["audio"], -1, 1),
                               atol=2 / 32767)
    assert main(["run", out, "--image", "cat.png"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "takes texts, not --image PATH" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("length", [5, 7, 12])
def test_delay_pattern_is_musicgen_s(length):
    """The loop's delay pattern equals the one transformers' MusicGen builds from its start code (and leaves free
    below ``2 * codebooks - 1`` steps)."""
    import types

    import torch
    from transformers.models.musicgen.modeling_musicgen import MusicgenForCausalLM

    from fx2onnx.runtime.text_to_audio_codebooks import delay_pattern

    decoder = types.SimpleNamespace(num_codebooks=4, config=types.SimpleNamespace(audio_channels=1))
    start = torch.full((4, 1), 64, dtype=torch.int64)
    _, expected = MusicgenForCausalLM.build_delay_pattern_mask(decoder, start, pad_token_id=64, max_length=length)
    np.testing.assert_array_equal(delay_pattern(4, length, 64), expected.numpy())
