"""Small ONNX graphs built with onnx.helper, and a check that a rule keeps their results."""

from __future__ import annotations

import collections
from typing import Callable

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as onh

FLOAT = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 18, value_info=()) -> onnx.ModelProto:
    """inputs/outputs/value_info: (name, elem_type, shape) with strings for dynamic dimensions
    (value_info: the shapes torch gives and ONNX shape inference cannot find)."""
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [oh.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [onh.from_array(np.asarray(v), name=k) for k, v in initializers],
        value_info=[oh.make_tensor_value_info(n, t, s) for n, t, s in value_info],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model)


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime

    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def apply_rule(model: onnx.ModelProto, rule: Callable[[ir.Model], int]) -> tuple[onnx.ModelProto, int]:
    """Applies one rule alone (then removes the unused nodes)."""
    from onnx_ir.passes import common

    ir_model = ir.from_proto(model)
    count = rule(ir_model)
    common.RemoveUnusedNodesPass()(ir_model)
    ir_model.graph.sort()
    return ir.to_proto(ir_model), count


def op_types(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


def check_rule(model, rule, feeds_list, expected_count: int | None, atol: float = 1e-5) -> onnx.ModelProto:
    """The rule applies ``expected_count`` times and the results do not change, on every feed."""
    fused, count = apply_rule(model, rule)
    assert expected_count is None or count == expected_count, f"{count} match(es), expected {expected_count}: {op_types(fused)}"
    for feeds in feeds_list:
        expected = run(model, feeds)
        got = run(fused, feeds)
        for e, g in zip(expected, got):
            assert e.shape == g.shape, (e.shape, g.shape)
            np.testing.assert_allclose(g, e, atol=atol, rtol=1e-4)
    return fused
