"""Encoder-decoder speech models other than Whisper (Speech2Text, Moonshine): a folder written by
``save_pretrained`` with its feature extractor and tokenizer -> ``export`` (the generic split of
:mod:`fx2onnx.deploy.speech_generic`) -> ``generate --audio talk.wav``, every token checked against
transformers' greedy ``generate`` on the same features; the audio made in code; what cannot be split
refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch
import transformers

from fx2onnx.__main__ import main
from fx2onnx.runtime.speech import read_wav, write_wav
from test_optimum import _optimum_seq2seq, optimum_python  # noqa: F401 (optimum's environment: a fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RATE = 16000
NEW_TOKENS = 12


def _chirp(seconds: float = 1.0, low: float = 220.0, high: float = 520.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * (low + (high - low) * t / seconds) * t)).astype(np.float32)


def _family(name: str, vocab: int) -> tuple[str, object, object]:
    """(class name, configuration, feature extractor) of a tiny model of ``name``."""
    if name == "speech_to_text":
        config = transformers.Speech2TextConfig(
            vocab_size=vocab, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, conv_channels=32,
            input_feat_per_channel=40, max_source_positions=200, max_target_positions=64,
            tie_word_embeddings=False)  # tied, the random model repeats one token
        extractor = transformers.Speech2TextFeatureExtractor(feature_size=40, num_mel_bins=40, sampling_rate=RATE)
        return "Speech2TextForConditionalGeneration", config, extractor
    if name == "moonshine":
        config = transformers.MoonshineConfig(
            vocab_size=vocab, hidden_size=64, intermediate_size=128, encoder_num_hidden_layers=2,
            decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
            max_position_embeddings=128)
        extractor = transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=RATE, padding_value=0.0,
                                                          do_normalize=False, return_attention_mask=True)
        return "MoonshineForConditionalGeneration", config, extractor
    raise ValueError(name)


#: the scale of the random weights, whose variance is scale^2 / fan-in: tokens which vary
SCALES = {"speech_to_text": 1.0, "moonshine": 2.0}


def write_speech_folder(name: str, folder: str, seed: int = 0) -> None:
    """A ``save_pretrained`` folder of a tiny model of family ``name``: random weights (:data:`SCALES`),
    the feature extractor, a byte-level tokenizer."""
    from fx2onnx.testing.tokenizer import tiny_tokenizer

    tok = tiny_tokenizer(384)
    class_name, config, extractor = _family(name, len(tok))
    eos = tok.eos_token_id
    config.eos_token_id = config.pad_token_id = eos
    config.decoder_start_token_id = config.bos_token_id = tok.convert_tokens_to_ids("a")
    torch.manual_seed(seed)
    model = getattr(transformers, class_name)(config).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(SCALES[name] * torch.randn(p.shape, generator=g) / p[0].numel() ** 0.5)
    model.save_pretrained(folder)
    extractor.save_pretrained(folder)
    tok.save_pretrained(folder)


# exported folders: the slow tier (make test-all, which CI runs); make test keeps to its 5 minutes
FAMILIES = [pytest.param("speech_to_text", marks=pytest.mark.slow), pytest.param("moonshine", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=FAMILIES)
def folders(request, tmp_path_factory):
    """A checkpoint folder of one family, the folder ``export`` wrote from it, two WAV files."""
    root = tmp_path_factory.mktemp(request.param)
    checkpoint, out = str(root / "checkpoint"), str(root / "onnx")
    wavs = [str(root / "talk.wav"), str(root / "other.wav")]
    write_speech_folder(request.param, checkpoint)
    write_wav(wavs[0], _chirp(1.0))
    write_wav(wavs[1], _chirp(0.6, 900.0, 300.0))
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return request.param, checkpoint, out, wavs


def _features(checkpoint: str, wavs: list[str]) -> dict:
    """The folder's features (several audios padded to the longest); Moonshine's without the mask, as
    transformers.js and optimum run it (its exported encoder takes none)."""
    extractor = transformers.AutoFeatureExtractor.from_pretrained(checkpoint, local_files_only=True)
    extra = {"padding": "longest"} if len(wavs) > 1 else {}
    features = extractor([read_wav(w) for w in wavs], sampling_rate=RATE, return_tensors="pt", **extra)
    if "input_values" in features:
        features.pop("attention_mask", None)
    return dict(features)


def _expected(checkpoint: str, wavs: list[str], max_new_tokens: int) -> list[list[int]]:
    """transformers' greedy tokens on the folder's features (:func:`_features`)."""
    config = transformers.AutoConfig.from_pretrained(checkpoint)
    model = getattr(transformers, config.architectures[0]).from_pretrained(checkpoint, dtype=torch.float32).eval()
    features = _features(checkpoint, wavs)
    with torch.no_grad():
        tokens = model.generate(**features, max_new_tokens=max_new_tokens, do_sample=False)
    return tokens[:, 1:].tolist()  # the start token is the prompt


def transformersjs_seq2seq(folder: str, inputs: dict, new_tokens: int, tmp_path,
                           browser: bool = False, client: str = "transformersjs_seq2seq.mjs") -> list[list[int]]:
    """transformers.js' greedy sequences (Node, tests/clients/transformersjs_seq2seq.mjs or ``client``; ``browser``:
    headless Chromium, transformersjs_browser_seq2seq.mjs) on ``inputs`` (the encoder's, as nested lists; an
    image-text model's ids and pixels); skipped where node is absent."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: transformers.js runs in Node")
    path = tmp_path / "transformersjs_inputs.json"
    path.write_text(json.dumps(inputs))
    script = os.path.join(ROOT, "tests", "clients",
                          "transformersjs_browser_seq2seq.mjs" if browser else client)
    done = subprocess.run(["node", script, folder, str(path), str(new_tokens)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["sequences"]


def _until_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def test_the_pieces_of_the_generic_split(folders):
    """The files and names transformers.js and optimum load (fx2onnx.deploy.seq2seq_generic)."""
    name, _, out, _ = folders
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["task"] == "speech-seq2seq" and metadata["split"] == "generic"
    encoder, decoder = metadata["pieces"]["encoder"], metadata["pieces"]["decoder"]
    assert encoder["file"] == "onnx/encoder_model.onnx" and decoder["file"] == "onnx/decoder_model_merged.onnx"
    assert encoder["outputs"] == ["last_hidden_state"]
    assert decoder["outputs"][0] == "logits" and decoder["cache"]["past_key_values.1.encoder.value"] == \
        "present.1.encoder.value"
    constants = [n for n in decoder["inputs"] if n not in ("input_ids", "use_cache_branch") and n not in
                 decoder["cache"]]
    if name == "moonshine":  # its encoder's mask is subsampled from the audio's: run as the clients do, without one
        assert encoder["inputs"] == ["input_values"] and constants == ["encoder_hidden_states"]
    else:  # Speech2Text derives the encoder's mask from the feature extractor's, fed as encoder_attention_mask
        assert encoder["inputs"] == ["input_features", "attention_mask"]
        assert constants == ["encoder_attention_mask", "encoder_hidden_states"]


def test_generate_audio_equals_transformers_greedy(folders, capsys):
    _, checkpoint, out, wavs = folders
    capsys.readouterr()
    assert main(["generate", out, "--audio", wavs[0], "--max-new-tokens", str(NEW_TOKENS), "--print-ids"]) == 0
    captured = capsys.readouterr()
    ours = [int(t) for t in captured.out.strip().split(",")]
    eos = transformers.AutoConfig.from_pretrained(checkpoint).eos_token_id
    [expected] = _expected(checkpoint, wavs[:1], NEW_TOKENS)
    assert len(set(expected)) > 2  # the tokens vary: a real check
    assert ours == _until_eos(expected, eos)
    assert "encoder:" in captured.err and "tokens/s" in captured.err


def test_a_padded_batch_equals_transformers(folders):
    from fx2onnx.runtime.speech import open_speech_generator
    from fx2onnx.runtime.speech_seq2seq import Seq2SeqSpeechGenerator

    _, checkpoint, out, wavs = folders
    generator = open_speech_generator(out)
    assert isinstance(generator, Seq2SeqSpeechGenerator)
    result = generator.transcribe(wavs, NEW_TOKENS, as_text=False)
    eos = transformers.AutoConfig.from_pretrained(checkpoint).eos_token_id
    expected = _expected(checkpoint, wavs, NEW_TOKENS)
    assert result.new_ids == [_until_eos(e, eos) for e in expected]
    assert result.new_ids[0] != result.new_ids[1]  # two audios, two answers


def test_the_text_printed_is_the_tokenizers(folders, capsys):
    _, checkpoint, out, wavs = folders
    capsys.readouterr()
    assert main(["generate", out, "--audio", wavs[0], "--max-new-tokens", "6", "--print-ids"]) == 0
    ids = [int(t) for t in capsys.readouterr().out.strip().split(",")]
    assert main(["generate", out, "--audio", wavs[0], "--max-new-tokens", "6"]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint)
    assert capsys.readouterr().out == tok.decode(ids, skip_special_tokens=True) + "\n"
    assert main(["generate", out, "--audio", wavs[0], "--language", "fr"]) == 2
    assert "no language or task" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("folders", ["speech_to_text"], indirect=True)  # one family
def test_a_generation_config_the_loop_does_not_follow_is_refused(folders, tmp_path):
    from fx2onnx.runtime.speech import open_speech_generator

    _, _, out, wavs = folders
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)
    path = os.path.join(copy, "generation_config.json")
    generation = json.load(open(path))
    generation.update(num_beams=4, no_repeat_ngram_size=3)
    json.dump(generation, open(path, "w"))
    with pytest.raises(ValueError, match="num_beams=4, no_repeat_ngram_size=3"):
        open_speech_generator(copy).transcribe(wavs[0], 4)
    # an audio longer than the encoder's table of positions (200 positions, 804 frames): refused, not wrong
    with pytest.raises(ValueError, match="input_features of 8.. along axis 1.*holds sizes 0 to 804"):
        open_speech_generator(out).transcribe(_chirp(8.5), 4)


@pytest.mark.slow
def test_transformersjs_and_optimum_give_transformers_tokens(folders, optimum_python, tmp_path):
    """The folder as it is in transformers.js (Node and headless Chromium, where it lists the model type: Moonshine)
    and in optimum's ORTModelForSpeechSeq2Seq (its own environment, two audios): transformers' greedy sequences."""
    name, checkpoint, out, wavs = folders
    config = transformers.AutoConfig.from_pretrained(checkpoint)
    model = getattr(transformers, config.architectures[0]).from_pretrained(checkpoint, dtype=torch.float32).eval()
    for batch in (wavs[:1], wavs):  # one client call each (optimum's environment starts slowly)
        features = _features(checkpoint, batch)
        with torch.no_grad():
            expected = model.generate(**features, max_new_tokens=NEW_TOKENS, do_sample=False).tolist()
        inputs = {k: v.tolist() for k, v in features.items()}
        if len(batch) > 1:
            assert _optimum_seq2seq(optimum_python, out, inputs, NEW_TOKENS, tmp_path) == expected
        elif name == "moonshine":  # transformers.js' Moonshine reads one audio
            assert transformersjs_seq2seq(out, inputs, NEW_TOKENS, tmp_path) == expected
            if shutil.which("chromium"):  # headless Chromium: onnxruntime-web (WASM), which has no float64 Cast
                assert transformersjs_seq2seq(out, inputs, NEW_TOKENS, tmp_path, browser=True) == expected


@pytest.mark.slow
@pytest.mark.parametrize("folders", ["speech_to_text"], indirect=True)  # one family
def test_previous_layout_still_transcribes_with_a_notice(folders, tmp_path):
    """A folder of the previous layout (encoder.onnx returning the cross keys and values, decoder.onnx with the cache
    named past_key_values_key_<i>) still transcribes, the same tokens, with one OldLayoutWarning."""
    from fx2onnx.deploy.files import copy_folder_files
    from fx2onnx.deploy.speech_generic import export_generic_speech_pieces
    from fx2onnx.runtime.folder import OldLayoutWarning
    from fx2onnx.runtime.speech import open_speech_generator

    name, checkpoint, out, wavs = folders
    old = str(tmp_path / "old")
    os.makedirs(old)
    config = transformers.AutoConfig.from_pretrained(checkpoint)
    pieces, _ = export_generic_speech_pieces(checkpoint, old, config, torch.float32, optimize="onnxruntime",
                                             quantize=None, block_size=32, opset=None, progress=False,
                                             say=lambda _line: None)
    copy_folder_files(checkpoint, old)
    with open(os.path.join(old, "fx2onnx.json"), "w") as f:
        json.dump({"task": "speech-seq2seq", "split": "generic",
                   "pieces": {p.name: {"file": p.filename, "inputs": p.input_names, "outputs": p.output_names,
                                       "cache": p.cache} for p in pieces}}, f)
    with pytest.warns(OldLayoutWarning, match="older fx2onnx"):
        generator = open_speech_generator(old)
    assert generator.transcribe(wavs, NEW_TOKENS, as_text=False).new_ids == \
        open_speech_generator(out).transcribe(wavs, NEW_TOKENS, as_text=False).new_ids


def _zoo(name: str):
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    return tiny_task_model(get_task_architecture("speech-seq2seq", name))


@pytest.mark.parametrize("name, reason", [
    ("voxtral_realtime", "voxtral_realtime: it is not an encoder-decoder and names no audio placeholder token"),
    ("dia", "dia: its forward takes none of input_features, input_values, pixel_values"),
    ("pop2piano", "pop2piano: its encoder reads none of input_features, input_values, pixel_values"),
])
def test_what_cannot_be_split_is_refused_in_one_line(name, reason, tmp_path):
    from fx2onnx.deploy import export_folder
    from fx2onnx.deploy.speech_generic import UnsplittableSpeechModel

    model, config = _zoo(name)
    model.save_pretrained(tmp_path / "checkpoint")
    with pytest.raises(UnsplittableSpeechModel) as info:
        export_folder(tmp_path / "checkpoint", tmp_path / "onnx")
    assert str(info.value).startswith(reason) and "\n" not in str(info.value)


def test_the_tasks_page_says_why_a_speech_row_is_not_split():
    from fx2onnx.zoo.task_generate import GENERATE_TASKS, compare_folder_generation

    assert "speech-seq2seq" in GENERATE_TASKS
    model, config = _zoo("voxtral_realtime")
    result = compare_folder_generation(model, config)
    assert not result["equal"] and result["error"].startswith("split: voxtral_realtime: it is not an encoder-decoder"), \
        result


@pytest.mark.slow
@pytest.mark.parametrize("name", ["speech_to_text", "moonshine", "moonshine_streaming", "speecht5", "canary",
                                  "cohere_asr"])
def test_the_tasks_page_rows_generate_transformers_tokens(name):
    """The zoo's tiny model, its folder without a feature extractor: exported on the zoo's features.
    (Speech2Text's cross-attention, without an encoder mask, carries transformers' one-column mask
    ``[1, 1, q, 1]``: the onnxruntime-level attention fusion expands it to the encoder's length.)"""
    from fx2onnx.zoo.task_generate import compare_folder_generation

    model, config = _zoo(name)
    result = compare_folder_generation(model, config)
    assert result["equal"], result
    assert result["new_tokens"] >= 1
