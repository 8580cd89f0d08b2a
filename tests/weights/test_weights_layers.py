"""A random checkpoint written tensor by tensor, the saved initializers checked against it by hash,
and the saved file validated one layer at a time against the eager model."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
import torch

import fx2onnx
from fx2onnx.weights import to_onnx_from_checkpoint, write_random_checkpoint
from fx2onnx.weights.layers import split_by_layers, validate_by_layers
from fx2onnx.weights.verify import compare_with_checkpoint

transformers = pytest.importorskip("transformers")

DYNAMIC = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}


def _config(tie=True, layers=3):
    return transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=tie, use_cache=False, architectures=["LlamaForCausalLM"],
    )


def _inputs(batch=2, seq=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(3, 128, (batch, seq), generator=g),
            "attention_mask": torch.ones((batch, seq), dtype=torch.int64)}


@pytest.mark.parametrize("tie", [True, False])
def test_random_checkpoint_loads_as_save_pretrained_writes_it(tmp_path, tie):
    info = write_random_checkpoint(_config(tie), tmp_path / "a", "float32", max_shard_size=30_000)
    assert len(info["files"]) > 1 and all(os.path.exists(f) for f in info["files"])
    with open(tmp_path / "a" / "model.safetensors.index.json") as f:
        index = json.load(f)
    assert index["metadata"]["total_size"] == info["nbytes"]
    model = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "a")
    expected = transformers.LlamaForCausalLM(_config(tie)).state_dict()
    state = model.state_dict()
    assert set(state) == set(expected)
    assert ("lm_head.weight" in index["weight_map"]) == (not tie)
    for name, value in state.items():
        assert value.shape == expected[name].shape, name
    norm = state["model.layers.0.input_layernorm.weight"]
    assert abs(norm.mean().item() - 1) < 0.05 and abs(state["model.embed_tokens.weight"].std().item() - 0.02) < 0.002
    # seeded, the values do not depend on the sharding
    write_random_checkpoint(_config(tie), tmp_path / "b", "float32")
    from safetensors.torch import load_file

    single = load_file(tmp_path / "b" / "model.safetensors")
    assert all(torch.equal(single[k], v) for k, v in state.items() if k in single)


@pytest.mark.slow
def test_bfloat16_checkpoint_hash_matches_and_detects_a_change(tmp_path):
    folder = tmp_path / "ckpt"
    write_random_checkpoint(_config(), folder, "bfloat16", max_shard_size=20_000)
    path = tmp_path / "m.onnx"
    to_onnx_from_checkpoint(folder, (), _inputs(), filename=path, dynamic_shapes=DYNAMIC)
    report = compare_with_checkpoint(path, folder)
    assert report.ok, report
    assert len(report.matched) == 3 * 9 + 2 and not report.different  # 9 tensors a layer, embeddings, final norm
    # one byte changed in the largest initializer (the embeddings, the head of the tied weight stored
    # transposed): an initializer differs from every tensor of the checkpoint
    proto = onnx.load(str(path), load_external_data=False)
    external = [{e.key: e.value for e in t.external_data} for t in proto.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL]
    offset = int(max(external, key=lambda e: int(e["length"])).get("offset", 0))
    with open(str(path) + ".data", "r+b") as f:
        f.seek(offset + 2)
        byte = f.read(1)
        f.seek(offset + 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    report = compare_with_checkpoint(path, folder)
    assert not report.ok and len(report.different) == 1, str(report)


def _layer_initializer(path, layer):
    """An external initializer read by a node of ``model.layers.<layer>``."""
    proto = onnx.load(str(path), load_external_data=False)
    external = {t.name: t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    for key, nodes in split_by_layers(proto, "model.layers"):
        if key == layer:
            for node in nodes:
                for name in node.input:
                    if name in external:
                        return external[name]
    raise AssertionError(f"no initializer in layer {layer}")


@pytest.mark.parametrize("tie", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_validate_by_layers(tmp_path, tie):
    folder = tmp_path / "ckpt"
    write_random_checkpoint(_config(tie=tie), folder, "float32", std=0.2)
    path = tmp_path / "m.onnx"
    to_onnx_from_checkpoint(folder, (), _inputs(), filename=path, dynamic_shapes=DYNAMIC)
    # the whole model agrees (it fits twice here): the layers must too
    eager = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    assert fx2onnx.validate(str(path), eager, (), _inputs()).ok
    for inputs in (_inputs(), _inputs(3, 7, seed=1)):
        reports = validate_by_layers(path, folder, (), inputs)
        assert [r.name for r in reports] == [f"model.layers.{i}" for i in range(3)] + ["outputs"]
        assert all(r.ok for r in reports), [str(r) for r in reports]
        assert all(0 < r.max_abs < 1e-4 for r in reports), [str(r) for r in reports]
    # a weight of layer 1 zeroed in the saved file: layer 0 still agrees, layer 1 and after do not
    tensor = _layer_initializer(path, 1)
    info = {e.key: e.value for e in tensor.external_data}
    with open(str(path) + ".data", "r+b") as f:
        f.seek(int(info.get("offset", 0)))
        f.write(np.zeros(int(info["length"]), dtype=np.uint8).tobytes())
    reports = validate_by_layers(path, folder, (), _inputs())
    assert [r.ok for r in reports] == [True, False, False, False], [str(r) for r in reports]
    # the eager model left on the meta device, no part file left behind
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "m.onnx", "m.onnx.data"]
