"""onnxscript's ``SlicesSplit`` (two ``Slice`` of one tensor into a ``Split``) matched among the consumers
of the sliced tensor: onnxscript tries every ``Slice`` of the graph as the second one, for every node of
the graph (quadratic: Longformer-base's optimization took over 10 minutes, 6 layers 185 s, 11 s now)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper
from onnxscript.rewriter import _matcher

import fx2onnx

PAIRS = 30


def _model():
    """``PAIRS`` inputs [2, 8], each cut in two halves along the last axis, the halves added."""
    nodes, inputs, outputs = [], [], []
    inits = [numpy_helper.from_array(np.array([v], dtype=np.int64), name) for name, v in
             (("zero", 0), ("half", 4), ("end", 8), ("last", -1))]
    for i in range(PAIRS):
        inputs.append(oh.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [2, 8]))
        nodes += [
            oh.make_node("Slice", [f"x{i}", "zero", "half", "last"], [f"a{i}"], name=f"s{i}_a"),
            oh.make_node("Slice", [f"x{i}", "half", "end", "last"], [f"b{i}"], name=f"s{i}_b"),
            oh.make_node("Add", [f"a{i}", f"b{i}"], [f"y{i}"]),
        ]
        outputs.append(oh.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [2, 4]))
    graph = oh.make_graph(nodes, "pairs", inputs, outputs, inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)


def test_slices_split_tries_only_the_sliced_tensors_consumers(monkeypatch):
    tried = []
    original = _matcher.SimplePatternMatcher._multi_match

    def counting(self, candidate, check_removable):
        tried.append(tuple(n.name for n in candidate))
        return original(self, candidate, check_removable)

    monkeypatch.setattr(_matcher.SimplePatternMatcher, "_multi_match", counting)
    optimized = fx2onnx.optimize(_model())
    # each Slice is tried with itself and its sibling (onnxscript: with every Slice of the graph, 60 x 60)
    assert 0 < len(tried) <= 4 * PAIRS, len(tried)
    assert all(a[:-1] == b[:-1] for a, b in tried), tried[:4]  # s{i}_a with s{i}_a or s{i}_b: siblings only
    feeds = {f"x{i}": np.random.default_rng(i).standard_normal((2, 8)).astype(np.float32) for i in range(PAIRS)}
    got = ort.InferenceSession(optimized.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for i, y in enumerate(got):
        np.testing.assert_allclose(y, feeds[f"x{i}"][:, :4] + feeds[f"x{i}"][:, 4:], rtol=1e-6)
