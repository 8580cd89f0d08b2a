"""python -m fx2onnx export <save_pretrained folder>: task inferred, weights streamed, validated."""

from __future__ import annotations

import onnx
import pytest
import torch

from fx2onnx.__main__ import main

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama_ckpt")
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_cli_exports_a_checkpoint_folder_without_cache(checkpoint, tmp_path, capsys):
    out = tmp_path / "llama.onnx"
    assert main(["export", str(checkpoint), "--out", str(out), "--no-cache"]) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out and "(text-generation, float32)" in captured.out
    assert captured.out.count("OK:") == 2  # two input sets of other shapes, compared with eager
    assert "weights" in captured.err  # the progress bar on the bytes written
    assert (tmp_path / "llama.onnx.data").stat().st_size > 128 * 32 * 4
    names = [i.name for i in onnx.load(str(out), load_external_data=False).graph.input]
    assert names == ["input_ids", "attention_mask", "position_ids"]


def test_cli_exports_with_cache_by_default(checkpoint, tmp_path, capsys):
    out = tmp_path / "llama_cache.onnx"
    code = main(["export", str(checkpoint), "--out", str(out), "--task", "text-generation", "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    # the cache updated in place: each input set run as the kernel takes it (prompt, first sequence, last token)
    assert "with its cache" in captured.err and captured.out.count("OK:") == 6 and "MISMATCH" not in captured.out
    model = onnx.load(str(out), load_external_data=False)
    assert any("past" in i.name or "key" in i.name for i in model.graph.input)
    outputs = [o.name for o in model.graph.output]
    # the last position's logits, keys and values of 2 layers, the last positions' logits a speculative loop verifies
    assert outputs[0] == "logits" and outputs[-1] == "verify_logits" and len(outputs) == 2 + 2 * 2, outputs
    assert (tmp_path / "genai_config.json").exists() and (tmp_path / "config.json").exists()


@pytest.mark.slow
def test_cli_bfloat16_keeps_the_type(checkpoint, tmp_path, capsys):
    out = tmp_path / "llama_bf16.onnx"
    assert main(["export", str(checkpoint), "--out", str(out), "--dtype", "bfloat16", "--no-validate", "--quiet"]) == 0
    model = onnx.load(str(out), load_external_data=False)
    types = {t.data_type for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    assert types == {onnx.TensorProto.BFLOAT16}


def test_cli_unknown_task_is_refused(checkpoint, tmp_path, capsys):
    assert main(["export", str(checkpoint), "--out", str(tmp_path / "x.onnx"), "--task", "image-classification"]) == 2
    err = capsys.readouterr().err
    assert "not supported from a folder" in err and err.count("\n") == 1
