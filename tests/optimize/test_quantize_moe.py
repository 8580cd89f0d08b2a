"""Weight-only quantization of the routed experts of a mixture of experts: the 3D table
``[experts, ., .]`` gathered by expert index then multiplied becomes a ``GatherBlockQuantized``
(optimizer/rules/quantize.py). The rule alone on a Gather + MatMul (eager and lazy tables), then
tiny Mixtral and Qwen3-MoE folders exported with ``--quantize int4`` against eager float32."""

from __future__ import annotations

import copy
import os

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch
from onnx import helper as oh
from onnx_ir.passes import common
from optimize_helpers import FLOAT, apply_rule, make_model, op_types, run

from fx2onnx.optimizer.rules import quantize_lazy
from fx2onnx.optimizer.rules.quantize import quantize_blocks, quantize_gathers

RNG = np.random.default_rng(0)
E, K, N = 4, 80, 48  # N is not a multiple of the block: padded to 64


def _experts_model(table: np.ndarray, as_b: bool) -> onnx.ModelProto:
    """x [T, 1, K] @ table[ids] [T, K, N] (as_b), or table[ids] [T, K, N] @ x [T, N, 1]."""
    inputs = ["x", "w"] if as_b else ["w", "x"]
    nodes = [oh.make_node("Gather", ["table", "ids"], ["w"], axis=0), oh.make_node("MatMul", inputs, ["y"])]
    x_shape = ["t", 1, K] if as_b else ["t", N, 1]
    y_shape = ["t", 1, N] if as_b else ["t", K, 1]
    return make_model(nodes, [("ids", onnx.TensorProto.INT64, ["t"]), ("x", FLOAT, x_shape)], [("y", FLOAT, y_shape)],
                      [("table", table)], opset=21)


def _dequantized(table: np.ndarray, bits: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """The table as the blocks (along the last axis) give it back and the bound of each value's
    error: half a step, a step when symmetric (the side opposite the largest magnitude is clipped)."""
    out, bound = np.empty_like(table), np.empty_like(table)
    for e in range(table.shape[0]):
        codes, scales, zero = quantize_blocks(table[e], bits, 32, symmetric, axis=1)
        zero = np.full(scales.shape, 1 << (bits - 1)) if zero is None else zero
        values = (codes - zero[..., None].astype(np.float32)) * scales[..., None]
        out[e] = values.reshape(len(codes), -1)[:, :N]
        bound[e] = np.repeat(np.abs(scales) * (1.0 if symmetric else 0.5), 32, axis=1)[:, :N]
    return out, bound


@pytest.mark.parametrize(("as_b", "symmetric"), [(True, False), (False, False), (True, True)])
@pytest.mark.parametrize("bits", [4, 8])
def test_expert_table_quantized(bits, as_b, symmetric):
    table = RNG.standard_normal((E, K, N)).astype(np.float32)
    model = _experts_model(table, as_b)
    report = []
    # the 3D tables are quantized whatever ``tables`` (the 2D tables to quantize) says
    quantized, count = apply_rule(model, lambda m: quantize_gathers(m, bits=bits, report=report, tables=set(),
                                                                    symmetric=symmetric))
    assert count == 1 and op_types(quantized) == {"GatherBlockQuantized": 1, "MatMul": 1}, op_types(quantized)
    (node,) = (n for n in quantized.graph.node if n.op_type == "GatherBlockQuantized")
    # blocks along the last axis (onnxruntime reads uint8 codes so), codes packed two a byte in int4
    assert {a.name: a.i for a in node.attribute}["quantize_axis"] == 2
    assert len(node.input) == (3 if symmetric else 4)  # symmetric: the default zero point 2**(bits-1)
    inits = {i.name: i for i in quantized.graph.initializer}
    assert "table" not in inits and list(inits[node.input[0]].dims) == [E, K, N * bits // 8]
    assert list(inits[node.input[2]].dims) == [E, K, 2]
    dequantized, bound = _dequantized(table, bits, symmetric)
    assert np.all(np.abs(dequantized - table) <= bound * (1 + 1e-5) + 1e-7)
    ids = np.array([3, 0, 2, 2, 1], np.int64)
    x = RNG.standard_normal((5, 1, K) if as_b else (5, N, 1)).astype(np.float32)
    (got,) = run(quantized, {"ids": ids, "x": x})
    # onnxruntime multiplies by the dequantized experts
    expected = x @ dequantized[ids] if as_b else dequantized[ids] @ x
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
    (entry,) = report
    assert entry.op_type == "GatherBlockQuantized" and entry.shape == (E, K, N) and entry.bytes_before == table.nbytes
    stored = [onnx.numpy_helper.to_array(inits[name]) for name in node.input if name in inits]
    assert entry.bytes_after == sum(array.nbytes for array in stored)
    assert entry.bytes_after < table.nbytes * (bits + 2) / 32  # codes, scales and zero points


def test_lazy_expert_table_quantized_when_saved(tmp_path):
    """A table read on demand (a checkpoint) is quantized when saved: the same bytes as an eager
    one, one table's blocks in memory at a time."""
    tables = [RNG.standard_normal((E, K, N)).astype(np.float32) for _ in range(2)]
    nodes = [oh.make_node("Gather", [f"table{i}", "ids"], [f"w{i}"], axis=0) for i in range(2)]
    nodes += [oh.make_node("MatMul", ["x", "w0"], ["h"]), oh.make_node("MatMul", ["h", "w1"], ["y"])]
    tables[1] = tables[1][:, :N].copy()  # [E, N, N]
    model = make_model(nodes, [("ids", onnx.TensorProto.INT64, ["t"]), ("x", FLOAT, ["t", 1, K])],
                       [("y", FLOAT, ["t", 1, N])], [("table0", tables[0]), ("table1", tables[1])], opset=21)
    eager, count = apply_rule(model, lambda m: quantize_gathers(m, bits=4))
    assert count == 2
    lazy_model = ir.from_proto(model)
    reads = []
    for i, array in enumerate(tables):
        value = lazy_model.graph.initializers[f"table{i}"]

        def read(array=array, i=i):
            reads.append(i)
            return ir.tensor(array)

        value.const_value = ir.LazyTensor(read, dtype=ir.DataType.FLOAT, shape=ir.Shape(array.shape))
    quantize_lazy.reset_stats()
    assert quantize_gathers(lazy_model, bits=4) == 2 and not reads  # nothing read yet
    common.RemoveUnusedNodesPass()(lazy_model)  # the float tables, as optimize does
    path = str(tmp_path / "lazy.onnx")
    ir.save(lazy_model, path, external_data="lazy.onnx.data")
    assert sorted(reads) == [0, 1] and quantize_lazy.STATS == {"held": 0, "peak": 1, "computed": 2}
    saved = onnx.load(path)
    ours = {i.name: onnx.numpy_helper.to_array(i).tobytes() for i in saved.graph.initializer}
    theirs = {i.name: onnx.numpy_helper.to_array(i).tobytes() for i in eager.graph.initializer}
    assert ours == theirs


# ---------------------------------------------------------------- tiny folders, end to end

def _mixtral():
    import transformers

    return transformers.MixtralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=128, num_local_experts=4,
                                      num_experts_per_tok=2, architectures=["MixtralForCausalLM"])


def _qwen3_moe():
    import transformers

    return transformers.Qwen3MoeConfig(hidden_size=64, intermediate_size=96, moe_intermediate_size=64,
                                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       vocab_size=128, num_experts=4, num_experts_per_tok=2,
                                       architectures=["Qwen3MoeForCausalLM"])


@pytest.mark.slow
@pytest.mark.parametrize("make_config", [_mixtral, _qwen3_moe], ids=["mixtral", "qwen3_moe"])
def test_moe_folder_int4(tmp_path, make_config):
    """``python -m fx2onnx export FOLDER --quantize int4``: no float expert table is left, the
    weights' file is under a quarter of float32's, the logits stay near eager float32's."""
    import transformers

    from fx2onnx.__main__ import main
    from fx2onnx.deploy.check import in_place_input_sets
    from fx2onnx.inputs.folder_inputs import task_inputs
    from fx2onnx.validation import run_onnx

    config = make_config()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(tmp_path / "ckpt")
    out = tmp_path / "int4"
    assert main(["export", str(tmp_path / "ckpt"), "--out", str(out), "--quiet", "--quantize", "int4"]) == 0
    proto = onnx.load(str(out / "onnx" / "model_q4.onnx"), load_external_data=False)
    ops = op_types(proto)
    assert ops["GatherBlockQuantized"] == 2 * 2, ops  # gate_up and down, two layers
    floats = {i.name for i in proto.graph.initializer if len(i.dims) == 3 and i.data_type == onnx.TensorProto.FLOAT}
    assert floats == {n.input[2] for n in proto.graph.node if n.op_type == "GatherBlockQuantized"}  # scales only
    float_bytes = sum(p.numel() * 4 for p in model.parameters())
    stored = os.path.getsize(out / "onnx" / "model_q4.onnx_data")
    assert stored < float_bytes / 4, (stored, float_bytes)
    inputs, _, _ = task_inputs(config, "text-generation", with_cache=True)
    # GroupQueryAttention's input sets: the prompt with an empty cache, one sequence, the last token
    sets, _ = in_place_input_sets([inputs], ["inputs"])
    agree = []
    for feeds in sets:
        got = np.asarray(run_onnx(str(out / "onnx" / "model_q4.onnx"), (), copy.deepcopy(feeds))[0])
        with torch.no_grad():  # the model extends the cache it is given: a copy
            expected = model(**copy.deepcopy(feeds)).logits.numpy()[:, -1:]
        assert got.shape == expected.shape  # the decoder returns the last position's logits
        assert np.abs(got - expected).max() < 0.25  # the logits of these random models spread over about +-1
        agree.extend((got.argmax(-1) == expected.argmax(-1)).ravel())
    assert np.mean(agree) >= 0.8, agree  # the greedy tokens
