"""An export from a checkpoint keeps every weight lazy until saved, quantized ones included: the
transposed weights (:mod:`fx2onnx.weights.lazy_transpose`) and the int4 blocks
(:mod:`fx2onnx.optimizer.rules.quantize_lazy`) are computed one weight at a time while written,
and the files are those of the same export from weights held in memory."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch
import transformers

from fx2onnx.convert.api import to_onnx
from fx2onnx.optimizer.rules import quantize_lazy
from fx2onnx.optimizer.rules.quantize import dequantize_matmul_weight
from fx2onnx.weights import checkpoint_weights, empty_weights, meta_tensor_names, save_model, write_random_checkpoint
from fx2onnx.weights.export import model_from_checkpoint_config
from fx2onnx.weights.lazy_transpose import fold_lazy_transposes
from fx2onnx.inputs.folder_inputs import task_inputs


def test_transpose_of_a_lazy_weight_stays_lazy():
    reads = []
    weight = np.arange(12, dtype=np.float32).reshape(3, 4)

    def read():
        reads.append(1)
        return ir.tensor(torch.from_numpy(weight.copy()), name="w")

    w = ir.Value(name="w", shape=ir.Shape([3, 4]), type=ir.TensorType(ir.DataType.FLOAT),
                 const_value=ir.LazyTensor(read, dtype=ir.DataType.FLOAT, shape=ir.Shape([3, 4]), name="w"))
    x = ir.Value(name="x", shape=ir.Shape([2, 4]), type=ir.TensorType(ir.DataType.FLOAT))
    t = ir.node("Transpose", [w], {"perm": [1, 0]}, outputs=[ir.Value(name="w_t")])
    mm = ir.node("MatMul", [x, t.outputs[0]], outputs=[ir.Value(name="y")])
    graph = ir.Graph([x], [mm.outputs[0]], nodes=[t, mm], initializers=[w], opset_imports={"": 23})
    assert fold_lazy_transposes(ir.Model(graph, ir_version=10)) == 1
    assert [n.op_type for n in graph] == ["MatMul"] and not reads  # folded, nothing read
    folded = graph.initializers["w_t"].const_value
    assert isinstance(folded, ir.LazyTensor) and tuple(folded.shape) == (4, 3)
    np.testing.assert_array_equal(folded.numpy(), weight.T)
    assert len(reads) == 1


def test_lazy_blocks_are_computed_once_and_released():
    quantize_lazy.reset_stats()
    calls = []

    def compute():
        calls.append(1)
        return {"codes": np.full((2, 1, 16), 7, np.uint8), "scales": np.ones((2, 1), np.float32)}

    shapes = {"codes": ((2, 1, 16), ir.DataType.UINT8), "scales": ((2, 1), ir.DataType.FLOAT)}
    parts = quantize_lazy.lazy_parts(compute, shapes, {"codes": "c", "scales": "s"})
    assert not calls and parts["codes"].nbytes == 32  # the size without computing
    np.testing.assert_array_equal(parts["codes"].numpy(), np.full((2, 1, 16), 7, np.uint8))
    assert quantize_lazy.STATS["held"] == 1
    np.testing.assert_array_equal(parts["scales"].numpy(), np.ones((2, 1), np.float32))
    assert len(calls) == 1 and quantize_lazy.STATS["held"] == 0  # every part read: released
    parts["codes"].numpy()  # read again: computed again, the same values
    assert len(calls) == 2


def _export(folder, path, lazy: bool, quantize: str | None):
    """The export of the folder's model, its weights read on demand (lazy) or held in memory."""
    config = transformers.AutoConfig.from_pretrained(folder)
    model = model_from_checkpoint_config(folder, torch.float32)
    inputs, _, dynamic_shapes = task_inputs(config, "text-generation", with_cache=True)
    meta = set(meta_tensor_names(model))
    with empty_weights(model) as empty:
        weights = checkpoint_weights(folder, model, torch.float32, names=sorted(meta & set(empty)))
        assert weights
        if not lazy:
            weights = {name: tensor.numpy() for name, tensor in weights.items()}
        onnx_model = to_onnx(model, (), inputs, weights=weights, return_ir=True, dynamic_shapes=dynamic_shapes,
                             optimize="onnxruntime", quantize=quantize, quantize_symmetric=True)
    large = [v for v in onnx_model.graph.initializers.values() if v.const_value.nbytes > 4096]
    quantize_lazy.reset_stats()
    save_model(onnx_model, path, external_data=True)
    return large, dict(quantize_lazy.STATS)


@pytest.mark.slow
@pytest.mark.parametrize("quantize", ["int4", None])
@pytest.mark.parametrize("tied", [False, True])
def test_export_from_checkpoint_keeps_weights_lazy_and_files_equal(tmp_path, quantize, tied):
    config = transformers.MistralConfig(
        hidden_size=256, intermediate_size=512, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=320, tie_word_embeddings=tied, sliding_window=None, architectures=["MistralForCausalLM"])
    folder = str(tmp_path / "checkpoint")
    write_random_checkpoint(config, folder, "bfloat16", seed=0)
    large, stats = _export(folder, str(tmp_path / "lazy.onnx"), True, quantize)
    # before the save, no large weight was read: every one is lazy (checkpoint, transposed or blocks)
    assert large and all(isinstance(v.const_value, ir.LazyTensor) for v in large), [
        v.name for v in large if not isinstance(v.const_value, ir.LazyTensor)]
    in_memory, _ = _export(folder, str(tmp_path / "memory.onnx"), False, quantize)
    assert not any(isinstance(v.const_value, ir.LazyTensor) for v in in_memory if v.name.endswith("_q4"))
    lazy_proto, memory_proto = onnx.load(str(tmp_path / "lazy.onnx")), onnx.load(str(tmp_path / "memory.onnx"))
    # the same graph, the same bytes in every initializer
    assert [(n.op_type, list(n.input), list(n.output)) for n in lazy_proto.graph.node] == [
        (n.op_type, list(n.input), list(n.output)) for n in memory_proto.graph.node]
    lazy_values = {t.name: onnx.numpy_helper.to_array(t) for t in lazy_proto.graph.initializer}
    memory_values = {t.name: onnx.numpy_helper.to_array(t) for t in memory_proto.graph.initializer}
    assert lazy_values.keys() == memory_values.keys()
    for name, value in lazy_values.items():
        np.testing.assert_array_equal(value, memory_values[name], err_msg=name)
    matmuls = [n for n in lazy_proto.graph.node if n.op_type == "MatMulNBits"]
    if quantize is None:
        assert not matmuls and stats == {"held": 0, "peak": 0, "computed": 0}
        return
    # one weight's blocks in memory at a time, each weight quantized once (the scales above the
    # external data threshold of 1024 bytes: a smaller part is written later, with the graph)
    assert stats == {"held": 0, "peak": 1, "computed": len({n.input[1] for n in matmuls})}, stats
    # the blocks are the checkpoint's weight: the head's, within half a step
    from safetensors import safe_open

    head = next(n for n in matmuls if int(next(a.i for a in n.attribute if a.name == "N")) == 320)
    with safe_open(f"{folder}/model.safetensors", framework="pt") as f:
        weight = f.get_tensor("model.embed_tokens.weight" if tied else "lm_head.weight").float().numpy()
    codes, scales = lazy_values[head.input[1]], lazy_values[head.input[2]]
    dequantized = dequantize_matmul_weight(codes, scales, None, 4, 256)
    # symmetric blocks: the value of largest magnitude is exact, the other side is clipped at 7/8 of it,
    # so a value is within one step of its block
    step = np.repeat(np.abs(scales), 32, axis=1).T
    error = np.abs(dequantized - weight.T)
    assert (error <= step + 1e-6).all() and (error <= step / 2 + 1e-6).mean() > 0.99


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("axis", [0, 1])
def test_quantize_blocks_by_chunks_gives_the_same_blocks(monkeypatch, symmetric, axis):
    """A large weight (a 256000 x 2304 tied table) is quantized a few rows at a time: the same codes,
    scales and zero points as in one pass, a row not a multiple of the block included."""
    from fx2onnx.optimizer.rules import quantize

    weight = np.random.default_rng(0).standard_normal((97, 80)).astype(np.float32)
    whole = quantize.quantize_blocks(weight, 4, 32, symmetric, axis)
    monkeypatch.setattr(quantize, "QUANTIZE_CHUNK", 200)  # two or three rows a chunk
    chunked = quantize.quantize_blocks(weight, 4, 32, symmetric, axis)
    assert (whole[2] is None) == (chunked[2] is None) == symmetric
    for a, b in zip(whole, chunked):
        if a is not None:
            assert a.dtype == b.dtype and np.array_equal(a, b)
    codes, scales, _ = chunked
    rows = weight.T if axis == 0 else weight
    n_blocks = -(-rows.shape[1] // 32)
    assert codes.shape == (rows.shape[0], n_blocks, 32) and scales.shape == (rows.shape[0], n_blocks)
