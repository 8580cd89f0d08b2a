"""Speech language models (an audio encoder whose features are written over placeholder tokens of a
decoder LLM's prompt: Granite Speech, Fun-ASR-Nano, VibeVoice-ASR, Voxtral): the task zoo's tiny
model written as a ``save_pretrained`` folder -> ``export`` (the split of
:mod:`fx2onnx.deploy.audio_text_generic`) -> :class:`fx2onnx.runtime.audio_text.AudioTextGenerator`,
the tokens against transformers' greedy ``generate`` on the same prompt and audio."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch


def _zoo(name: str):
    from fx2onnx.zoo.checkable import spread_degenerate_weights
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    model, config = tiny_task_model(get_task_architecture("speech-seq2seq", name))
    spread_degenerate_weights(model, seed=0)
    return model, config


# the slow tier (make test-all, which CI runs): make test keeps the folder below; Voxtral's whole model does
# not capture (its row is not matched), its two pieces do
@pytest.mark.slow
@pytest.mark.parametrize("name", ["fun_asr_nano", "granite_speech", "vibevoice_asr", "voxtral"])
def test_the_zoo_models_generate_transformers_tokens(name):
    from fx2onnx.zoo.task_generate import compare_folder_generation

    model, config = _zoo(name)
    result = compare_folder_generation(model, config)
    assert result["equal"], result
    assert result["new_tokens"] >= 1


# the exported folder's tests: the slow tier too (make test keeps to its 5 minutes; CI runs make test-all)
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Fun-ASR-Nano's tiny model, its folder exported, the zoo's prompt and audio of two inputs."""
    from fx2onnx.deploy import export_folder
    from fx2onnx.inputs.task_inputs import build_task_inputs

    model, config = _zoo("fun_asr_nano")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # weights of a variance 4 / fan-in: greedy tokens which vary
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(2.0 * torch.randn(p.shape, generator=g) / p[0].numel() ** 0.5)
    root = tmp_path_factory.mktemp("fun_asr_nano")
    model.save_pretrained(root / "checkpoint")
    exported = export_folder(root / "checkpoint", root / "onnx", optimize="onnxruntime")
    assert exported.ok, exported.check_lines()
    inputs, _ = build_task_inputs("speech-seq2seq", model, config, batch=2)
    return model, str(root / "onnx"), inputs


@pytest.mark.slow
def test_the_pieces_and_a_batch(folder):
    from fx2onnx.runtime.audio_text import AudioTextGenerator
    from fx2onnx.runtime.speech import open_speech_generator

    model, out, inputs = folder
    config = model.config
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["task"] == "speech-seq2seq" and metadata["split"] == "placeholders"
    audio, decoder = metadata["pieces"]["audio"], metadata["pieces"]["decoder"]
    assert audio["inputs"] == ["input_features", "input_features_mask"] and audio["outputs"] == ["audio_features"]
    assert "audio_features" in decoder["inputs"] and decoder["cache_update"] == "in_place"
    assert decoder["audio_token_id"] == config.audio_token_id
    generator = open_speech_generator(out)
    assert isinstance(generator, AudioTextGenerator)
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=6, do_sample=False).numpy()
    got = generator.generate_ids(inputs, 6)
    assert got.tolist() == expected.tolist()
    assert len(set(got[:, inputs["input_ids"].shape[1]:].ravel().tolist())) > 2  # tokens which vary


@pytest.fixture(scope="module")
def vibevoice(tmp_path_factory):
    """A VibeVoice-ASR folder with its processor (tokenizer, chat template, 24 kHz feature extractor),
    exported, the transformers model and processor of the checkpoint."""
    import transformers

    from fx2onnx.deploy import export_folder
    from fx2onnx.testing.speech_folder import write_vibevoice_asr_folder

    root = tmp_path_factory.mktemp("vibevoice_asr")
    write_vibevoice_asr_folder(root / "checkpoint", dtype="float32")
    exported = export_folder(root / "checkpoint", root / "onnx", optimize="onnxruntime")
    assert exported.ok, exported.check_lines()
    model = transformers.AutoModelForSpeechSeq2Seq.from_pretrained(root / "checkpoint").eval()
    processor = transformers.AutoProcessor.from_pretrained(root / "checkpoint")
    return model, processor, str(root / "onnx"), root


def _talk(path, seconds: float, rate: int = 24000) -> np.ndarray:
    """A tone whose loudness varies, written as a WAV file, read back as the command line reads it."""
    from fx2onnx.runtime.speech import read_wav, write_wav

    t = np.arange(int(seconds * rate)) / rate
    write_wav(path, 0.3 * np.sin(2 * np.pi * 440 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2, rate)
    return read_wav(path, rate)


# the slow tier: make test keeps to its 5 minutes (the export takes 30 s)
@pytest.mark.slow
@pytest.mark.parametrize("prompt,chat,seconds", [(None, False, 1.0), ("what is said?", False, 2.0),
                                                 ("what is said?", True, 0.5)])
def test_the_command_line_generates_transformers_tokens(vibevoice, tmp_path, capsys, prompt, chat, seconds):
    """No prompt: the processor's transcription request; a prompt after the audio placeholder; a chat message;
    audios of three lengths (the audio piece's length is dynamic)."""
    from fx2onnx.__main__ import main

    model, processor, out, _ = vibevoice
    wav = str(tmp_path / "talk.wav")
    samples = _talk(wav, seconds)
    if prompt is None:
        inputs = processor.apply_transcription_request(audio=samples)
    else:
        text = processor.apply_chat_template(
            [{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": prompt}]}],
            add_generation_prompt=True, tokenize=False) if chat else processor.audio_token + "\n" + prompt
        inputs = processor(text=text, audio=samples, return_tensors="pt")
    with torch.no_grad():  # sample=False: the mean of VibeVoice's latents, as the audio piece (the default draws noise)
        expected = model.generate(**inputs, max_new_tokens=8, do_sample=False, sample=False)[
            0, inputs["input_ids"].shape[1]:]
    args = ["generate", out, *([prompt] if prompt else []), "--audio", wav, "--max-new-tokens", "8"]
    capsys.readouterr()
    assert main(args + ["--print-ids"] + (["--chat"] if chat else [])) == 0
    ids = [int(i) for i in capsys.readouterr().out.strip().split(",")]
    assert ids == expected.tolist()
    assert len(set(ids)) > 2  # tokens which vary
    assert main(args + (["--chat"] if chat else [])) == 0  # the text, the tokenizer's
    assert capsys.readouterr().out.strip() == processor.tokenizer.decode(expected, skip_special_tokens=True).strip()


@pytest.mark.slow
def test_the_command_line_refusals(vibevoice, tmp_path, capsys):
    from fx2onnx.__main__ import main

    _, _, out, _ = vibevoice
    wav = str(tmp_path / "talk16k.wav")
    _talk(wav, 0.5, rate=16000)
    assert main(["generate", out, "--audio", wav]) == 2
    assert "expects 24000 Hz" in capsys.readouterr().err  # not resampled
    assert main(["generate", out, "a", "b", "--audio", wav]) == 2
    assert "at most one prompt" in capsys.readouterr().err
    assert main(["generate", out, "a"]) == 2
    assert "give --audio" in capsys.readouterr().err
    good = str(tmp_path / "talk.wav")
    _talk(good, 0.5)
    assert main(["generate", out, "--audio", good, "--chat"]) == 2
    assert "--chat needs a prompt" in capsys.readouterr().err


@pytest.mark.slow
def test_placeholders_not_matching_the_features_are_refused(folder):
    from fx2onnx.runtime.audio_text import AudioTextGenerator

    _, out, inputs = folder
    generator = AudioTextGenerator(out)
    ids = inputs["input_ids"].clone()
    ids[0, 1] = 5  # one placeholder less than the audio's features
    with pytest.raises(ValueError, match="127 audio placeholders"):
        generator.generate_ids(dict(inputs, input_ids=ids), 2)


def test_what_the_audio_split_refuses():
    from fx2onnx.deploy.audio_text_generic import audio_split_reason

    model, config = _zoo("voxtral_realtime")
    assert audio_split_reason(model, config).startswith("its configuration names no audio placeholder token")
    model, config = _zoo("speech_to_text")
    assert audio_split_reason(model, config).startswith("it is an encoder-decoder")
