"""Export from a save_pretrained folder: the model on the meta device, the weights streamed from
the safetensors files; checked on onnxruntime against the eager model loaded from the same folder."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

import fx2onnx
from fx2onnx.weights import checkpoint_files, checkpoint_weights, empty_weights, to_onnx_from_checkpoint

transformers = pytest.importorskip("transformers")

DYNAMIC = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}


def _inputs(batch, seq, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(3, 128, (batch, seq), generator=g),
            "attention_mask": torch.ones((batch, seq), dtype=torch.int64)}


def _checkpoint(folder, tie=True, shard=None, dtype=torch.float32):
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=tie, use_cache=False,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(dtype)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, **kwargs)
    return folder


def _initializers(path):
    return {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def _checkpoint_tensors(folder):
    from safetensors.torch import load_file

    tensors = {}
    for file in set(checkpoint_files(folder).values()):
        tensors.update(load_file(file))
    return tensors


@pytest.mark.parametrize("tie,shard", [pytest.param(True, None, marks=pytest.mark.slow), (False, "20KB")])
def test_export_from_checkpoint_matches_eager(tmp_path, tie, shard):
    folder = _checkpoint(tmp_path / "ckpt", tie=tie, shard=shard)
    if shard:
        assert (folder / "model.safetensors.index.json").exists()
    path = tmp_path / "llama.onnx"
    onx = to_onnx_from_checkpoint(folder, (), _inputs(2, 5), filename=path, dynamic_shapes=DYNAMIC)
    external = [t for t in onx.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external and not any(t.raw_data for t in external)  # returned without the weights
    eager = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    for inputs in (_inputs(2, 5), _inputs(3, 7, seed=1)):
        report = fx2onnx.validate(str(path), eager, (), inputs)
        assert report.ok, report
    # every matrix of the checkpoint is an initializer, as stored or transposed (the optimizer
    # folds the transposition of a small weight), with exactly its values
    stored = _checkpoint_tensors(folder)
    got = [v for v in _initializers(path).values() if v.ndim == 2]
    for name, tensor in stored.items():
        if tensor.ndim == 2:
            value = tensor.numpy()
            assert any(np.array_equal(g, value) or np.array_equal(g.T, value) for g in got), name
    assert ("lm_head.weight" in stored) == (not tie)  # tied: read under the embeddings' name

@pytest.mark.slow
def test_export_from_checkpoint_casts_to_bfloat16(tmp_path):
    folder = _checkpoint(tmp_path / "ckpt")
    path = tmp_path / "llama_bf16.onnx"
    to_onnx_from_checkpoint(folder, (), _inputs(2, 5), filename=path, dynamic_shapes=DYNAMIC, dtype="bfloat16",
                            optimize=False)
    full = onnx.load(str(path))
    stored = _checkpoint_tensors(folder)
    by_name = {t.name: t for t in full.graph.initializer}
    weight = by_name["model.layers.0.mlp.up_proj.weight"]
    assert weight.data_type == onnx.TensorProto.BFLOAT16
    expected = stored["model.layers.0.mlp.up_proj.weight"].to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    assert weight.raw_data == expected


@pytest.mark.slow
def test_meta_model_given_by_the_caller(tmp_path):
    folder = _checkpoint(tmp_path / "ckpt")
    config = transformers.AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).eval()
    path = tmp_path / "meta.onnx"
    to_onnx_from_checkpoint(folder, (), _inputs(2, 5), filename=path, model=model, dynamic_shapes=DYNAMIC)
    assert all(p.is_meta for p in model.parameters())  # restored after the export
    eager = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    assert fx2onnx.validate(str(path), eager, (), _inputs(3, 4, seed=2)).ok


def test_checkpoint_of_another_model_is_refused(tmp_path):
    folder = _checkpoint(tmp_path / "ckpt")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    with pytest.raises(KeyError, match="not in the checkpoint.*model.layers.2"):
        checkpoint_weights(folder, model)


def test_a_meta_buffer_nobody_computes_is_refused():
    class WithBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.register_buffer("scale", torch.arange(4.0), persistent=False)

        def forward(self, x):
            return self.linear(x) * self.scale

    with torch.device("meta"):
        model = WithBuffer()
    with pytest.raises(ValueError, match="'scale' is on the meta device"):
        with empty_weights(model):
            pass
    with empty_weights(model, buffers={"scale": torch.arange(4.0)}) as empty:
        assert empty == ["linear.weight", "linear.bias"] and model.scale.tolist() == [0, 1, 2, 3]
    assert model.scale.is_meta
    model.scale = torch.empty(4, dtype=torch.int64, device="meta")  # an integer one: refused the same way
    with pytest.raises(ValueError, match="'scale' is on the meta device"):
        with empty_weights(model):
            pass


def test_an_integer_meta_buffer_is_computed():
    # CLIP's position ids: an integer buffer no checkpoint holds, computed by _init_weights (it was NaN-filled: a crash)
    import transformers

    config = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                           num_attention_heads=4, image_size=16, patch_size=4)
    with torch.device("meta"):
        model = transformers.CLIPVisionModel(config)
    with empty_weights(model):
        ids = dict(model.named_buffers())["embeddings.position_ids"]
        assert ids.dtype == torch.int64 and ids.tolist() == [list(range(17))]


def test_a_meta_buffer_set_by_an_enclosing_module_is_computed():
    # Falcon-H1: the model's _init_weights sets each mixer's non-persistent mup_vector, the mixer's own does not
    class Mixer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mup_vector", torch.empty(3), persistent=False)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Mixer(), Mixer()])

        def _init_weights(self, module):
            if module is self:
                for layer in self.layers:
                    layer.mup_vector.copy_(torch.tensor([1.0, 2.0, 3.0]))

    with torch.device("meta"):
        model = Model()
    with empty_weights(model):
        assert [layer.mup_vector.tolist() for layer in model.layers] == [[1.0, 2.0, 3.0]] * 2


def test_folded_transposes_read_the_checkpoint_again(tmp_path):
    from fx2onnx.weights import model_from_checkpoint_config
    from fx2onnx.weights.checkpoint import _READS, relazify_views

    folder = _checkpoint(tmp_path / "ckpt", tie=False)
    model = model_from_checkpoint_config(folder)
    _READS.clear()
    with empty_weights(model) as empty:
        weights = checkpoint_weights(folder, model, names=empty)
        onnx_model = fx2onnx.to_onnx(model, (), _inputs(2, 5), weights=weights, return_ir=True)
    before = {v.name: v.const_value.numpy().copy() for v in onnx_model.graph.initializers.values()}
    # Transpose(weight) folded into lazy tensors reading the checkpoint again when saved
    # (fx2onnx.weights.lazy_transpose): no view of a tensor read is left for relazify_views
    assert relazify_views(onnx_model) == 0
    transposed = [v for v in onnx_model.graph.initializers.values()
                  if type(v.const_value).__name__ == "LazyTensor" and len(v.const_value.shape) == 2
                  and v.producer() is None and "transpose" in v.name]
    assert len(transposed) == 15, [v.name for v in transposed]  # 7 linear layers x 2 + lm_head
    lazy = [v for v in onnx_model.graph.initializers.values() if type(v.const_value).__name__ == "LazyTensor"]
    assert len(lazy) >= 15
    for v in onnx_model.graph.initializers.values():
        np.testing.assert_array_equal(v.const_value.numpy(), before[v.name])


@pytest.mark.slow  # 8 s: a full folder export; make test-all runs it
def test_tensors_transformers_converts_are_computed_from_the_checkpoint(tmp_path):
    """A Mixtral folder stores every expert apart (what ``save_pretrained`` and the hub write); the model
    stacks them into one tensor per layer (transformers' ``WeightConverter``): the reader runs the same
    operations, on meta tensors first (nothing read), then on the checkpoint's when a tensor is read.
    The folder exports and matches eager."""
    import transformers
    from safetensors import safe_open

    from fx2onnx.deploy import export_folder
    from fx2onnx.weights.checkpoint import transformers_converted_tensors

    config = transformers.MixtralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                        num_local_experts=4, num_experts_per_tok=2,
                                        architectures=["MixtralForCausalLM"])
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(config).eval()
    folder = tmp_path / "mixtral"
    model.save_pretrained(folder)
    files = checkpoint_files(folder)
    with safe_open(next(iter(set(files.values()))), "pt") as f:
        keys = list(f.keys())
    assert "model.layers.0.mlp.experts.gate_up_proj" not in keys
    assert any(".experts.3." in k for k in keys)  # one tensor per expert
    converted = transformers_converted_tensors(folder, files, model)
    stacked = converted["model.layers.1.mlp.experts.gate_up_proj"]
    expected = model.model.layers[1].mlp.experts.gate_up_proj
    assert tuple(stacked.shape) == tuple(expected.shape)
    np.testing.assert_array_equal(stacked.numpy(), expected.detach().numpy())
    result = export_folder(folder, tmp_path / "onnx", optimize="default")
    assert result.ok, result.check_lines()
