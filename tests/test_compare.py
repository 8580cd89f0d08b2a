"""compare_onnx_execution: alignment of two models result by result."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest
import torch

import fx2onnx
from fx2onnx.validation import validate
from fx2onnx.compare import run_with_intermediate_results

FLOAT = onnx.TensorProto.FLOAT


def chain_model(ops=("Add", "Relu", "Mul", "Tanh"), insert_after=None, insert_op="Identity", input_name="x"):
    """x -> op0(x, W) -> op1 -> op2(., W) -> op3 -> y, with an optional extra node."""
    w = onnx.numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "W")
    nodes, last = [], input_name
    for k, op in enumerate(ops):
        inputs = [last, "W"] if op in ("Add", "Sub", "Mul") else [last]
        out = f"r{k}"
        nodes.append(oh.make_node(op, inputs, [out], name=f"n{k}"))
        last = out
        if insert_after == k:
            attrs = {"to": FLOAT} if insert_op == "Cast" else {}
            nodes.append(oh.make_node(insert_op, [last], ["extra"], name="extra", **attrs))
            last = "extra"
    nodes.append(oh.make_node("Identity", [last], ["y"], name="out"))
    graph = oh.make_graph(
        nodes,
        "chain",
        [oh.make_tensor_value_info(input_name, FLOAT, [3, 4])],
        [oh.make_tensor_value_info("y", FLOAT, [3, 4])],
        [w],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9)


@pytest.fixture
def x():
    return np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)


def test_intermediate_results_match_reference(x):
    model = chain_model()
    ort = run_with_intermediate_results(model, {"x": x})
    ref = run_with_intermediate_results(model, {"x": x}, runtime="reference")
    assert [r.op_type for r in ort] == ["input", "Add", "Relu", "Mul", "Tanh", "Identity"]
    assert [r.name for r in ort] == [r.name for r in ref]
    for a, b in zip(ort, ref):
        np.testing.assert_allclose(a.value, b.value, atol=1e-6)
    np.testing.assert_allclose(ort[1].value, x + onnx.numpy_helper.to_array(model.graph.initializer[0]))


def test_same_model_is_a_perfect_diagonal(x):
    model = chain_model()
    result = fx2onnx.compare_onnx_execution(model, model, {"x": x})
    assert [(r.index1, r.index2) for r in result.rows] == [(i, i) for i in range(6)]
    assert all(r.status == "same" and r.max_abs_diff == 0 for r in result.rows)
    assert result.first_divergence is None
    assert result.cost == 0
    frame = result.to_frame()
    assert frame.shape[0] == 6
    assert (frame["max_abs_diff"] == 0).all()
    text = str(result)
    assert "values never diverge" in text and "Tanh" in text


def test_changed_node_is_aligned_and_flagged(x):
    model1 = chain_model(("Add", "Relu", "Mul", "Tanh"))
    model2 = chain_model(("Sub", "Relu", "Mul", "Tanh"))
    result = fx2onnx.compare_onnx_execution(model1, model2, {"x": x})
    # still a diagonal: no result is left alone
    assert [(r.index1, r.index2) for r in result.rows] == [(i, i) for i in range(6)]
    statuses = [r.status for r in result.rows]
    assert statuses == ["same", "diff", "diff", "diff", "diff", "diff"]
    assert result.first_divergence == 1
    row = result.rows[1]
    assert (row.op_type1, row.op_type2) == ("Add", "Sub")
    # Add(x, W) - Sub(x, W) = 2 W, the largest |W| is 1
    assert row.max_abs_diff == pytest.approx(2.0)
    lines = str(result).splitlines()
    pointed = [line for line in lines if ">>" in line]
    assert len(pointed) == 1 and "Add" in pointed[0] and "Sub" in pointed[0]
    assert "values diverge from row 1" in result.summary()


@pytest.mark.parametrize("insert_op", ["Identity", "Cast"])
def test_inserted_node_is_aligned_as_a_gap(x, insert_op):
    model1 = chain_model()
    model2 = chain_model(insert_after=1, insert_op=insert_op)
    result = fx2onnx.compare_onnx_execution(model1, model2, {"x": x})
    pairs = [(r.index1, r.index2) for r in result.rows]
    assert pairs == [(0, 0), (1, 1), (2, 2), (None, 3), (3, 4), (4, 5), (5, 6)]
    gap = result.rows[3]
    assert gap.status == "only2" and gap.op_type2 == insert_op and gap.name2 == "extra"
    assert result.count("same") == 6 and result.count("diff") == 0
    assert result.first_divergence is None
    assert " + " in str(result).splitlines()[3 + 3][:10]


def test_inputs_with_other_names_are_mapped_by_position(x):
    model1 = chain_model(input_name="x")
    model2 = chain_model(input_name="input_0")
    result = fx2onnx.compare_onnx_execution(model1, model2, [torch.from_numpy(x)])
    assert result.notes == ["inputs have different names, mapped by position: 'x' -> 'input_0'"]
    assert result.count("same") == 6
    assert str(result).startswith("inputs have different names")


def test_bad_feeds_name_the_expected_inputs(x):
    model = chain_model()
    with pytest.raises(ValueError, match=r"expects \['x'\].*got \['X'\]"):
        fx2onnx.compare_onnx_execution(model, model, {"X": x})
    with pytest.raises(ValueError, match=r"expects 1 inputs \['x'\] but 2"):
        fx2onnx.compare_onnx_execution(model, model, [x, x])
    with pytest.raises(ValueError, match="Input 'x' expects dtype float32 but got float64"):
        fx2onnx.compare_onnx_execution(model, model, {"x": x.astype(np.float64)})
    with pytest.raises(ValueError, match="rank 2"):
        fx2onnx.compare_onnx_execution(model, model, {"x": x[0]})


def test_missing_model_file(tmp_path, x):
    missing = tmp_path / "nothere.onnx"
    with pytest.raises(FileNotFoundError, match="nothere.onnx"):
        fx2onnx.compare_onnx_execution(chain_model(), missing, {"x": x})


def test_models_given_as_paths(tmp_path, x):
    path = tmp_path / "m.onnx"
    onnx.save(chain_model(), path)
    result = fx2onnx.compare_onnx_execution(str(path), path, {"x": x})
    assert result.count("same") == 6


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(torch.nn.functional.gelu(self.norm(self.l1(x)))).softmax(-1)


@pytest.mark.slow
def test_dynamo_optimized_vs_not_on_an_mlp():
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(2, 3, 8)
    onx = {
        opt: torch.onnx.export(model, (x,), dynamo=True, optimize=opt, verbose=False).model_proto
        for opt in (True, False)
    }
    for proto in onx.values():
        assert validate(proto, model, (x,)).ok
    result = fx2onnx.compare_onnx_execution(onx[True], onx[False], {"x": x})
    ops1 = [n.op_type for n in onx[True].graph.node]
    ops2 = [n.op_type for n in onx[False].graph.node if n.op_type != "Constant"]
    assert ops1 != ops2  # the two exports really differ
    assert result.n_results1 == len(ops1) + 1 and result.n_results2 == len(ops2) + 1
    # every result of the optimized model is found in the other one with the same values
    assert result.count("only1") == 0 and result.count("diff") == 0
    assert result.count("same") == result.n_results1
    # the unoptimized model transposes the weights of both Linear layers
    only2 = [r.op_type2 for r in result.rows if r.status == "only2"]
    assert only2.count("Transpose") == 2
    last = result.rows[-1]
    assert last.op_type1 == last.op_type2 == "Softmax" and last.max_abs_diff < 1e-6


def test_text_window_and_counts(x):
    model1 = chain_model(("Add", "Relu", "Mul", "Tanh"))
    model2 = chain_model(("Sub", "Relu", "Mul", "Tanh"))
    result = fx2onnx.compare_onnx_execution(model1, model2, {"x": x})
    text = result.to_text(start=2, max_rows=2, show_values=False)
    lines = text.splitlines()
    assert lines[3] == "... 2 rows before"
    assert lines[4].startswith("   2   x") and "Relu" in lines[4]
    assert lines[5].startswith("   3   x") and "Mul" in lines[5]
    assert lines[6] == "... 2 more rows"
    assert "values1" not in text and "values1" in result.to_text()
    with pytest.raises(ValueError, match="status must be one of"):
        result.count("equal")
    assert len(result.to_dicts()) == 6


def test_reference_runtime_gives_the_same_alignment(x):
    model1 = chain_model()
    model2 = chain_model(insert_after=2)
    ort = fx2onnx.compare_onnx_execution(model1, model2, {"x": x})
    ref = fx2onnx.compare_onnx_execution(model1, model2, {"x": x}, runtime="reference")
    assert [(r.index1, r.index2, r.status) for r in ort.rows] == [
        (r.index1, r.index2, r.status) for r in ref.rows
    ]
    with pytest.raises(ValueError, match="runtime must be"):
        fx2onnx.compare_onnx_execution(model1, model2, {"x": x}, runtime="torch")


def test_reshaped_result_is_paired():
    """A Flatten in one model, a Reshape to another shape in the other: same values."""
    w = onnx.numpy_helper.from_array(np.array([2, 6], dtype=np.int64), "shape")

    def make(second):
        nodes = [oh.make_node("Relu", ["x"], ["r"])]
        if second == "Flatten":
            nodes.append(oh.make_node("Flatten", ["r"], ["f"], axis=2))
        else:
            nodes.append(oh.make_node("Reshape", ["r", "shape"], ["f"]))
        nodes.append(oh.make_node("Neg", ["f"], ["y"]))
        graph = oh.make_graph(
            nodes, "g", [oh.make_tensor_value_info("x", FLOAT, [2, 3, 2])],
            [oh.make_tensor_value_info("y", FLOAT, None)], [w] if second == "Reshape" else [],
        )
        return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9)

    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2) - 6
    result = fx2onnx.compare_onnx_execution(make("Flatten"), make("Reshape"), {"x": x})
    assert [(r.index1, r.index2) for r in result.rows] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    # values are close, shapes differ: paired and the values are said to match
    row = result.rows[2]
    assert (row.shape1, row.shape2, row.status) == ("6x2", "2x6", "same")


def test_module_path_from_metadata(x):
    model = chain_model()
    onnx.helper.set_metadata_props(model.graph.node[1], {"module": "block.act"})
    onnx.helper.set_metadata_props(
        model.graph.node[2], {"pkg.torch.onnx.name_scopes": "['', 'block', 'block.mul', 'mul']"}
    )
    results = run_with_intermediate_results(model, {"x": x})
    assert [r.module for r in results] == ["", "", "block.act", "block.mul", "", ""]
    frame = fx2onnx.compare_onnx_execution(model, model, {"x": x}).to_frame()
    assert frame["module1"].tolist()[2:4] == ["block.act", "block.mul"]
