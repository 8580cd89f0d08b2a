"""A Whisper checkpoint folder -> ``export`` -> ``generate --audio talk.wav``, the tokens checked
against transformers' generate; the audio made in code (a chirp written with ``wave``)."""

from __future__ import annotations

import json
import os
import wave

import numpy as np
import onnx
import pytest
import torch
import transformers

from fx2onnx.__main__ import main
from fx2onnx.runtime.speech import read_wav, write_wav

RATE = 16000


def _chirp(seconds: float = 0.75, low: float = 220.0, high: float = 520.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * (low + (high - low) * t / seconds) * t)).astype(np.float32)


def _config(**kwargs):
    values = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                  encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=80, max_source_positions=50,
                  max_target_positions=64)
    values.update(kwargs)
    return transformers.WhisperConfig(**values)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A bf16 Whisper folder with a tokenizer and a feature extractor, the folder ``export`` wrote
    from it, and a WAV file."""
    from fx2onnx.testing.speech_folder import write_whisper_folder

    root = tmp_path_factory.mktemp("speech")
    checkpoint, out, wav = str(root / "whisper"), str(root / "whisper_onnx"), str(root / "talk.wav")
    write_whisper_folder(_config(), checkpoint, dtype="bfloat16", std=0.6)
    write_wav(wav, _chirp())
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return checkpoint, out, wav


def _expected(checkpoint, wav, max_new_tokens, **kwargs):
    model = transformers.WhisperForConditionalGeneration.from_pretrained(checkpoint, dtype=torch.float32).eval()
    extractor = transformers.AutoFeatureExtractor.from_pretrained(checkpoint, local_files_only=True)
    audios = wav if isinstance(wav, list) else [wav]
    features = extractor([read_wav(a) for a in audios], sampling_rate=RATE, return_tensors="pt")["input_features"]
    return model.generate(features, max_new_tokens=max_new_tokens, do_sample=False, **kwargs).tolist()


def _until_eos(tokens, eos):
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


@pytest.mark.slow
def test_export_writes_the_pieces(folders):
    """The layout transformers.js and optimum load: the encoder returns last_hidden_state, the merged decoder computes
    the cross keys and values in the false branch of its If on use_cache_branch (their projections nowhere else)."""
    _, out, _ = folders
    assert {"preprocessor_config.json", "tokenizer.json", "generation_config.json", "config.json",
            "fx2onnx.json"} <= set(os.listdir(out))
    assert {"encoder_model.onnx", "encoder_model.onnx_data", "decoder_model_merged.onnx",
            "decoder_model_merged.onnx_data"} <= set(os.listdir(os.path.join(out, "onnx")))
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["task"] == "speech-seq2seq"
    pieces = metadata["pieces"]
    assert pieces["encoder"]["outputs"] == ["last_hidden_state"]
    decoder = onnx.load(os.path.join(out, pieces["decoder"]["file"]), load_external_data=False)
    assert [i.name for i in decoder.graph.input] == pieces["decoder"]["inputs"]
    assert pieces["decoder"]["inputs"][:4] == ["input_ids", "encoder_hidden_states", "use_cache_branch",
                                               "past_key_values.0.decoder.key"]
    assert [o.name for o in decoder.graph.output] == pieces["decoder"]["outputs"]
    assert json.loads({p.key: p.value for p in decoder.metadata_props}["fx2onnx.cache"]) == pieces["decoder"]["cache"]
    [branch] = [n for n in decoder.graph.node if n.op_type == "If"]
    else_branch = next(a.g for a in branch.attribute if a.name == "else_branch")
    assert any(n.op_type in ("MatMul", "Gemm", "MatMulNBits") for n in else_branch.node)


@pytest.mark.slow
@pytest.mark.parametrize("language", [None, "fr"])
def test_generate_audio_equals_transformers_greedy(folders, capsys, language):
    checkpoint, out, wav = folders
    capsys.readouterr()
    args = ["generate", out, "--audio", wav, "--max-new-tokens", "24", "--print-ids"]
    assert main(args + (["--language", language] if language else [])) == 0
    captured = capsys.readouterr()
    ours = [int(t) for t in captured.out.strip().split(",")]
    eos = transformers.AutoConfig.from_pretrained(checkpoint).eos_token_id
    [expected] = _expected(checkpoint, wav, 24, language=language)
    assert len(set(expected)) > 2  # the tokens vary: a real check
    assert ours == _until_eos(expected, eos)
    assert "encoder:" in captured.err and "tokens/s" in captured.err
    # the text printed is the tokenizer's decoding of the same tokens
    assert main(args[:-1] + (["--language", language] if language else [])) == 0
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint)
    assert capsys.readouterr().out == tok.decode(ours, skip_special_tokens=True) + "\n"


@pytest.mark.slow
def test_batch_and_task_equal_transformers(folders, tmp_path):
    from fx2onnx.runtime.speech import SpeechGenerator

    checkpoint, out, wav = folders
    other = str(tmp_path / "other.wav")
    write_wav(other, _chirp(0.5, 800.0, 300.0))
    result = SpeechGenerator(out).transcribe([wav, other], 16, task="translate")
    eos = transformers.AutoConfig.from_pretrained(checkpoint).eos_token_id
    expected = _expected(checkpoint, [wav, other], 16, task="translate")
    assert result.new_ids == [_until_eos(e, eos) for e in expected]
    assert result.prompt_ids[0][-2:] == [transformers.AutoTokenizer.from_pretrained(checkpoint).convert_tokens_to_ids(
        t) for t in ("<|translate|>", "<|notimestamps|>")]


@pytest.mark.slow
def test_bfloat16_pieces_are_held_to_eager(folders, tmp_path):
    """A bfloat16 export of a checkpoint whose random weights keep the activations moderate (the std of 0.6 the other
    tests draw for varied tokens makes the bfloat16 rounding of eager and of onnxruntime drift apart over the layers,
    each branch of the merged decoder chaining the cross projections and two layers)."""
    from fx2onnx.deploy import export_folder
    from fx2onnx.runtime.speech import SpeechGenerator
    from fx2onnx.testing.speech_folder import write_whisper_folder

    _, _, wav = folders
    checkpoint = str(tmp_path / "whisper_bf16")
    write_whisper_folder(_config(), checkpoint, dtype="bfloat16", std=0.2)
    result = export_folder(checkpoint, tmp_path / "bf16", dtype="bfloat16")
    assert result.ok and len(result.checks) == 6, [str(c) for c in result.checks]
    assert SpeechGenerator(tmp_path / "bf16").transcribe(wav, 8).new_ids[0]


def test_wav_round_trip_and_refusals(tmp_path):
    path = tmp_path / "a.wav"
    samples = _chirp(0.1)
    write_wav(path, samples)
    assert np.abs(read_wav(path, RATE) - samples).max() < 1e-4
    with pytest.raises(ValueError, match="8000 Hz.*expects 16000 Hz"):
        write_wav(tmp_path / "b.wav", samples, 8000)
        read_wav(tmp_path / "b.wav", RATE)
    stereo = tmp_path / "stereo.wav"
    with wave.open(str(stereo), "wb") as f:
        f.setnchannels(2)
        f.setsampwidth(2)
        f.setframerate(RATE)
        f.writeframes(np.array([[1000, 3000]] * 10, dtype="<i2").tobytes())
    assert np.allclose(read_wav(stereo), 2000 / 32768)


def test_bad_audio_ends_in_one_line(tmp_path, capsys):
    folder = tmp_path / "speech_onnx"
    folder.mkdir()
    (folder / "fx2onnx.json").write_text(json.dumps({"task": "speech-seq2seq", "pieces": {}}))
    capsys.readouterr()
    assert main(["generate", str(folder), "--audio", str(tmp_path / "missing.wav")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing.wav" in err and "does not exist" in err
    assert main(["generate", str(folder)]) == 2
    assert "--audio" in capsys.readouterr().err
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not a wav file at all")
    with pytest.raises(ValueError, match="not a PCM WAV file"):
        read_wav(bad)
    # --audio on a folder of a text model
    (folder / "fx2onnx.json").write_text(json.dumps({"task": "text-generation"}))
    assert main(["generate", str(folder), "--audio", str(bad)]) == 2
    assert "not a speech folder" in capsys.readouterr().err


@pytest.mark.slow
def test_onnxruntime_genai_builder_on_the_same_folder_agrees(tmp_path):
    """onnxruntime-genai's Whisper builder runs on the same folder (its loop takes 3000 frames:
    a folder of 1500 encoder positions) and generates the tokens of our loop."""
    og = pytest.importorskip("onnxruntime_genai")
    import subprocess
    import sys

    from fx2onnx.testing.speech_folder import write_whisper_folder
    from fx2onnx.runtime.speech import SpeechGenerator

    checkpoint, out, genai, wav = (str(tmp_path / n) for n in ("whisper", "ours", "genai", "talk.wav"))
    write_whisper_folder(_config(max_source_positions=1500, max_target_positions=64), checkpoint, std=0.6)
    write_wav(wav, _chirp(2.0))
    assert main(["export", checkpoint, "--out", out, "--quiet", "--no-validate"]) == 0
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", checkpoint, "-o", genai, "-p",
                    "fp32", "-e", "cpu"], check=True, capture_output=True)
    gen = SpeechGenerator(out)
    result = gen.transcribe(wav, 16, language="en")
    model = og.Model(genai)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(result.prompt_ids[0]) + 16, do_sample=False)
    generator = og.Generator(model, params)
    named = og.NamedTensors()
    named["audio_features"] = gen.features(wav).astype(np.float32)
    named["input_ids"] = np.array(result.prompt_ids, dtype=np.int32)
    generator.set_inputs(named)
    theirs = []
    while not generator.is_done():
        generator.generate_next_token()
        theirs.append(int(generator.get_next_tokens()[0]))
    assert len(set(result.new_ids[0])) > 1
    assert theirs[: len(result.new_ids[0])] == result.new_ids[0]


def test_suppressed_ids_outside_the_vocabulary_are_ignored():
    """transformers' suppress processors test ``isin`` over the vocabulary: an id past it (the default
    ``begin_suppress_tokens`` of Whisper, ``[220, 50256]``, kept by a small model) suppresses nothing."""
    from fx2onnx.runtime.speech import _Suppress, suppress_logits
    from fx2onnx.runtime.speech_seq2seq import _Greedy

    logits = np.arange(8, dtype=np.float32)[None].repeat(2, axis=0)
    kept = logits.copy()
    suppress_logits(kept, np.array([220, 50256, -1], dtype=np.int64))
    assert (kept == logits).all()
    sequences = np.zeros((2, 1), dtype=np.int64)
    for chooser in (_Suppress(1, suppress=[50256], begin=[220, 7, 50256]).chooser(),
                    _Greedy(1, suppress=[50256], begin=[220, 7, 50256]).chooser()):
        assert chooser(logits, sequences, None).tolist() == [6, 6]  # 7 suppressed at the first token
        assert chooser(logits, np.zeros((2, 2), dtype=np.int64), None).tolist() == [7, 7]


@pytest.mark.slow
def test_task_zoo_whisper_generates_transformers_tokens():
    """The task zoo's tiny Whisper (vocabulary 1024, the configuration's default begin_suppress_tokens
    ``[220, 50256]``): its folder exported then generating gives transformers' greedy tokens."""
    from fx2onnx.zoo.task_generate import compare_folder_generation
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    model, config = tiny_task_model(get_task_architecture("speech-seq2seq", "whisper"))
    assert max(config.begin_suppress_tokens) >= config.vocab_size  # the case under test
    result = compare_folder_generation(model, config)
    assert result["equal"], result
    assert result["new_tokens"] == 8


@pytest.mark.slow
def test_previous_layout_still_transcribes_with_a_notice(folders, tmp_path):
    """A folder of the previous layout (encoder.onnx returning every layer's cross keys and values, decoder.onnx with
    the cache named past_key_values_key_<i>) still transcribes, the same tokens, with one OldLayoutWarning."""
    from fx2onnx.deploy.files import copy_folder_files
    from fx2onnx.deploy.speech import export_speech_pieces
    from fx2onnx.runtime.folder import OldLayoutWarning
    from fx2onnx.runtime.speech import SpeechGenerator

    checkpoint, out, wav = folders
    old = str(tmp_path / "old")
    os.makedirs(old)
    config = transformers.AutoConfig.from_pretrained(checkpoint)
    pieces = export_speech_pieces(checkpoint, old, config, torch.float32, optimize="onnxruntime", quantize=None,
                                  block_size=32, opset=None, progress=False, say=lambda _line: None)
    copy_folder_files(checkpoint, old)
    with open(os.path.join(old, "fx2onnx.json"), "w") as f:
        json.dump({"task": "speech-seq2seq", "pieces": {p.name: {"file": p.filename, "inputs": p.input_names,
                                                                 "outputs": p.output_names, "cache": p.cache}
                                                        for p in pieces}}, f)
    with pytest.warns(OldLayoutWarning, match="older fx2onnx"):
        generator = SpeechGenerator(old)
    assert generator.transcribe(wav, 12, language="en").new_ids == \
        SpeechGenerator(out).transcribe(wav, 12, language="en").new_ids
