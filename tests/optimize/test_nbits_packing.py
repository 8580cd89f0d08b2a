"""MatMulNBits of one input packed into one MatMulNBits and a Split: the same outputs, bit for bit."""

from __future__ import annotations

import numpy as np
import onnx.helper as oh
import onnx_ir as ir
from onnx import TensorProto
from onnx_ir.passes import common

from fx2onnx.optimizer.rules.nbits_packing import pack_matmul_nbits
from fx2onnx.optimizer.rules.quantize import quantize_matmuls

from optimize_helpers import apply_rule, make_model, op_types, run

FLOAT = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _quantized(columns, bias: tuple[bool, ...], symmetric: bool = False, width: int = 64, lazy: bool = False):
    """q, k, v (MatMul + optional bias Add each) of one input ``x``, quantized to int4, and a
    MatMul of another input ``h``."""
    nodes, inits = [], []
    for i, (c, b) in enumerate(zip(columns, bias)):
        nodes.append(oh.make_node("MatMul", ["x", f"w{i}"], [f"m{i}" if b else f"y{i}"]))
        inits.append((f"w{i}", RNG.standard_normal((width, c)).astype(np.float32)))
        if b:
            nodes.append(oh.make_node("Add", [f"m{i}", f"b{i}"], [f"y{i}"]))
            inits.append((f"b{i}", RNG.standard_normal(c).astype(np.float32)))
    nodes.append(oh.make_node("MatMul", ["h", "wh"], ["yh"]))
    inits.append(("wh", RNG.standard_normal((width, 8)).astype(np.float32)))
    outputs = [(f"y{i}", FLOAT, None) for i in range(len(columns))] + [("yh", FLOAT, None)]
    model = make_model(nodes, [("x", FLOAT, ["b", "s", width]), ("h", FLOAT, ["b", width])], outputs, inits)
    ir_model = ir.from_proto(model)
    if lazy:  # weights read on demand, as a checkpoint's
        for value in ir_model.graph.initializers.values():
            array = value.const_value.numpy()
            value.const_value = ir.LazyTensor(lambda a=array: ir.Tensor(a), dtype=ir.DataType.FLOAT,
                                              shape=ir.Shape(array.shape))
    quantize_matmuls(ir_model, block_size=32, symmetric=symmetric, accuracy_level=4)
    common.RemoveUnusedNodesPass()(ir_model)
    return ir.to_proto(ir_model)


def _check(model, expected_count: int, max_width_ratio=None):
    packed, count = apply_rule(model, lambda m: pack_matmul_nbits(m, max_width_ratio=max_width_ratio))
    assert count == expected_count, op_types(packed)
    feeds = {"x": RNG.standard_normal((2, 3, 64)).astype(np.float32),
             "h": RNG.standard_normal((2, 64)).astype(np.float32)}
    for got, expected in zip(run(packed, feeds), run(model, feeds)):
        np.testing.assert_array_equal(got, expected)
    return packed


def test_packs_q_k_v_bit_exact():
    """Zero points and biases packed along N; the other input's node stays apart."""
    packed = _check(_quantized((64, 32, 32), (True, True, True)), 2)
    assert op_types(packed) == {"MatMulNBits": 2, "Split": 1}
    # symmetric blocks (no zero points), no bias, an odd N
    packed = _check(_quantized((64, 32, 17), (False, False, False), symmetric=True), 2)
    assert op_types(packed) == {"MatMulNBits": 2, "Split": 1}
    # lazy blocks stay lazy until saved
    packed = _check(_quantized((64, 32, 32), (False,) * 3, lazy=True), 2)


def test_keeps_apart_what_differs():
    """A bias on one node only: the two without bias are packed, the one with it is left; a group wider than
    ``max_width_ratio`` times K (gate and up) stays apart."""
    packed = _check(_quantized((64, 32, 32), (True, False, False)), 1)
    assert op_types(packed) == {"MatMulNBits": 3, "Split": 1}
    _check(_quantized((256, 256), (False, False)), 0, max_width_ratio=4.0)


def test_optimize_runs_it_after_the_quantization_when_enabled():
    """``optimize(quantize="int4", enable=["nbits_packing"])`` packs the quantized q, k, v (off by default)."""
    from fx2onnx.optimizer import optimize

    nodes = [oh.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"]) for i in range(3)]
    inits = [(f"w{i}", RNG.standard_normal((64, c)).astype(np.float32)) for i, c in enumerate((64, 32, 32))]
    model = make_model(nodes, [("x", FLOAT, ["b", 64])], [(f"y{i}", FLOAT, None) for i in range(3)], inits)
    plain = optimize(model, "onnxruntime", quantize="int4")
    packed, report = optimize(model, "onnxruntime", quantize="int4", enable=["nbits_packing"], report=True)
    assert op_types(plain) == {"MatMulNBits": 3} and op_types(packed) == {"MatMulNBits": 1, "Split": 1}
    assert [r.matches for r in report.rules if r.name == "nbits_packing"] == [2]
    feeds = {"x": RNG.standard_normal((3, 64)).astype(np.float32)}
    for got, expected in zip(run(packed, feeds), run(plain, feeds)):
        np.testing.assert_array_equal(got, expected)
