"""Initializers over the torch tensors' memory, and the save which streams them to external data."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch

import fx2onnx
from fx2onnx.weights import initializer_tensor, save_model


def _mlp(dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).to(dtype).eval()


def test_initializers_share_the_torch_memory():
    model = _mlp()
    onnx_model = fx2onnx.to_onnx(model, (torch.randn(3, 64),), optimize=False, return_ir=True)
    pointers = {p.data_ptr() for p in model.parameters()}
    shared = [
        v.name for v in onnx_model.graph.initializers.values()
        if isinstance(v.const_value, ir.tensor_adapters.TorchTensor) and v.const_value.raw.data_ptr() in pointers
    ]
    assert len(shared) == 4, shared  # two weights, two biases: no copy


def test_external_data_returns_references_not_weights(tmp_path):
    model = _mlp()
    path = tmp_path / "mlp.onnx"
    onx = fx2onnx.to_onnx(model, (torch.randn(3, 64),), dynamic_shapes=({0: "batch"},), filename=path, external_data=True)
    big = [t for t in onx.graph.initializer if t.dims and np.prod(t.dims) * 4 > 1024]
    assert big and all(t.data_location == onnx.TensorProto.EXTERNAL and not t.raw_data for t in big)
    # the full proto when it fits
    full = onnx.load(str(path))
    assert all(t.data_location == onnx.TensorProto.DEFAULT for t in full.graph.initializer)
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in full.graph.initializer}
    torch_weights = [p.detach().numpy() for p in model.parameters() if p.numel() * 4 > 1024]
    assert all(any(w.shape == t.shape and np.array_equal(w, t) or np.array_equal(w.T, t) for w in weights.values())
               for t in torch_weights)
    for x in (torch.randn(3, 64), torch.randn(7, 64)):
        report = fx2onnx.validate(str(path), model, (x,))
        assert report.ok, report
    # the proto without its weights cannot run alone: the error says to give the path
    with pytest.raises(ValueError, match="give the path"):
        fx2onnx.validate(onx, model, (torch.randn(3, 64),))


def test_small_model_without_external_data_returns_the_full_proto(tmp_path):
    model = _mlp()
    path = tmp_path / "mlp.onnx"
    onx = fx2onnx.to_onnx(model, (torch.randn(3, 64),), filename=path)
    assert all(t.data_location == onnx.TensorProto.DEFAULT for t in onx.graph.initializer)
    assert fx2onnx.validate(onx, model, (torch.randn(3, 64),)).ok


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_weights_keep_their_type(tmp_path, dtype):
    model = _mlp(dtype)
    path = tmp_path / "half.onnx"
    fx2onnx.to_onnx(model, (torch.randn(3, 64, dtype=dtype),), filename=path, external_data=True, optimize=False)
    full = onnx.load(str(path))
    expected = {ir.tensor_adapters.from_torch_dtype(dtype).value}
    by_name = {t.name: t for t in full.graph.initializer}
    for name, param in model.named_parameters():
        tensor = by_name[name]
        assert {tensor.data_type} == expected
        # the bytes written are the tensor's own bytes
        assert tensor.raw_data == param.detach().view(torch.int16).numpy().tobytes()
    if dtype == torch.float16:
        x = torch.randn(3, 64, dtype=dtype)
        assert fx2onnx.validate(str(path), model, (x,), atol=1e-2, rtol=1e-2).ok


def test_save_streams_with_a_progress_callback(tmp_path, capsys):
    model = _mlp()
    onnx_model = fx2onnx.to_onnx(model, (torch.randn(3, 64),), return_ir=True)
    assert save_model(onnx_model, tmp_path / "m.onnx", external_data=True, progress=True)
    assert "weights" in capsys.readouterr().err  # the bar, on stderr
    assert (tmp_path / "m.onnx.data").stat().st_size >= 64 * 128 * 4
    # the in-memory model still refers to torch memory after the save (nothing replaced)
    values = [v.const_value for v in onnx_model.graph.initializers.values()]
    assert any(isinstance(v, ir.tensor_adapters.TorchTensor) for v in values)


def test_meta_weight_without_values_is_refused():
    with pytest.raises(ValueError, match="meta device"):
        initializer_tensor("w", torch.empty(3, 4, device="meta"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_transposed_views_are_written_in_order_and_left_unchanged(tmp_path, dtype, monkeypatch):
    # the optimizer folds Transpose(weight) into a strided numpy view: written through a torch
    # view of the same memory (numpy would write it element by element), the model unchanged
    import ml_dtypes

    base = np.arange(6 * 700, dtype=np.float32).reshape(6, 700)
    if dtype == "bfloat16":
        base = base.astype(ml_dtypes.bfloat16)
    tensor = ir.Tensor(base.T, name="w")
    x = ir.Value(name="x", shape=ir.Shape([2, 700]), type=ir.TensorType(tensor.dtype))
    w = ir.Value(name="w", const_value=tensor, shape=ir.Shape([700, 6]), type=ir.TensorType(tensor.dtype))
    node = ir.node("MatMul", [x, w], num_outputs=1)
    node.outputs[0].name = "y"
    graph = ir.Graph([x], node.outputs, nodes=[node], initializers=[w], opset_imports={"": 18})
    model = ir.Model(graph, ir_version=10)
    from fx2onnx.weights.save import _torch_views

    swapped = _torch_views(model)
    assert [t for _, t in swapped] == [tensor]
    view = model.graph.initializers["w"].const_value
    assert isinstance(view, ir.tensor_adapters.TorchTensor) and view.raw.data_ptr() == base.ctypes.data  # no copy
    model.graph.initializers["w"].const_value = tensor
    monkeypatch.setattr("fx2onnx.weights.save.STRIDED_BLOCK", 6 * 64 * base.itemsize)  # 64 rows a block, 11 blocks
    assert save_model(model, tmp_path / "m.onnx", external_data=True)
    assert model.graph.initializers["w"].const_value is tensor
    assert onnx.load(str(tmp_path / "m.onnx"), load_external_data=False).graph.initializer[0].data_location == 1
    saved = onnx.load(str(tmp_path / "m.onnx")).graph.initializer[0]
    got = onnx.numpy_helper.to_array(saved)
    assert got.shape == (700, 6)
    np.testing.assert_array_equal(got.astype(np.float32), base.T.astype(np.float32))
