"""fx2onnx.profiling: onnxruntime profiles as DataFrames."""

from __future__ import annotations

import glob
import os
import tempfile

import matplotlib

matplotlib.use("Agg")

import numpy as np
import onnx
import onnx.helper as oh
import pytest
import torch

from fx2onnx.profiling import aggregate_by_op_type, plot_profile, profile
from fx2onnx.validation import validate

FLOAT = onnx.TensorProto.FLOAT


def matmul_model():
    """y = Tanh(Relu(x @ W + B) @ W2)"""
    rng = np.random.default_rng(0)
    inits = [
        onnx.numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W"),
        onnx.numpy_helper.from_array(rng.standard_normal((64,)).astype(np.float32), "B"),
        onnx.numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "W2"),
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
        oh.make_node("Add", ["mm", "B"], ["add"], name="add"),
        oh.make_node("Relu", ["add"], ["relu"], name="relu"),
        oh.make_node("MatMul", ["relu", "W2"], ["mm2"], name="mm2"),
        oh.make_node("Tanh", ["mm2"], ["y"], name="tanh"),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", FLOAT, ["batch", 64])],
        [oh.make_tensor_value_info("y", FLOAT, ["batch", 32])],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9)


X = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)


def test_profile_per_node_and_per_op_type():
    model = matmul_model()
    per_node = profile(model, {"x": X}, repeat=5, warmup=2, optimization="disable", intra_op_num_threads=1)
    assert list(per_node["node"].sort_values()) == ["add", "mm", "mm2", "relu", "tanh"]
    assert dict(zip(per_node["node"], per_node["op_type"])) == {
        n.name: n.op_type for n in model.graph.node
    }
    # warmup runs are not counted
    assert (per_node["count"] == 5).all()
    assert per_node["total_us"].sum() > 0
    assert per_node["mean_us"].tolist() == pytest.approx((per_node["total_us"] / 5).tolist())
    assert per_node["share"].sum() == pytest.approx(1.0)
    assert per_node["total_us"].is_monotonic_decreasing
    assert per_node.attrs["run_mean_us"] > 0
    per_op = aggregate_by_op_type(per_node)
    assert set(per_op["op_type"]) == {"MatMul", "Add", "Relu", "Tanh"}
    matmul = per_op.set_index("op_type").loc["MatMul"]
    assert matmul["n_nodes"] == 2 and matmul["count"] == 10
    assert matmul["total_us"] == per_node[per_node["op_type"] == "MatMul"]["total_us"].sum()


def test_optimized_profile_shows_fused_nodes():
    per_node = profile(matmul_model(), [torch.from_numpy(X)], repeat=3, optimization="all", intra_op_num_threads=1)
    assert per_node["total_us"].sum() > 0
    # onnxruntime fuses nodes: fewer nodes than the model has
    assert len(per_node) < 5


def test_profile_files_are_removed():
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "fx2onnx_profile_*")))
    profile(matmul_model(), {"x": X}, repeat=1, warmup=0)
    after = set(glob.glob(os.path.join(tempfile.gettempdir(), "fx2onnx_profile_*")))
    assert after == before
    assert not glob.glob("profile*.json")


def test_profile_bad_feeds():
    model = matmul_model()
    with pytest.raises(ValueError, match=r"expects \['x'\].*got \['input'\]"):
        profile(model, {"input": X})
    with pytest.raises(ValueError, match="expects dtype float32 but got float64"):
        profile(model, {"x": X.astype(np.float64)})
    with pytest.raises(ValueError, match="optimization must be one of"):
        profile(model, {"x": X}, optimization="max")
    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        profile("missing.onnx", {"x": X})


def test_plot_profile():
    per_node = profile(matmul_model(), {"x": X}, repeat=2, optimization="disable")
    ax = plot_profile(aggregate_by_op_type(per_node), top=3)
    assert len(ax.patches) == 3
    assert ax.get_xlabel() == "time per run (µs)"
    ax = plot_profile(per_node)
    assert len(ax.patches) == 5


@pytest.mark.slow
def test_profile_dynamo_export_op_types_match_the_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 10)
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    onx = torch.onnx.export(model, (x,), dynamo=True, verbose=False).model_proto
    assert validate(onx, model, (x,)).ok
    per_node = profile(onx, {onx.graph.input[0].name: x}, repeat=3, optimization="disable")
    model_ops = {n.op_type for n in onx.graph.node} - {"Constant"}
    assert set(per_node["op_type"]) == model_ops
    assert per_node["total_us"].sum() > 0


def test_profile_a_file_with_external_data(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(matmul_model(), path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").exists()
    per_node = profile(path, {"x": X}, repeat=2, optimization="disable")
    assert set(per_node["node"]) == {"mm", "add", "relu", "mm2", "tanh"}
    assert per_node["total_us"].sum() > 0
