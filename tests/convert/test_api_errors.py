"""to_onnx: bad inputs fail early and clearly; errors point back to the user's code;
metadata on nodes; deterministic output; saving with external data."""

from __future__ import annotations

import os

import onnx
import pytest
import torch

import fx2onnx


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x, y):
        return self.linear(x) + y


X, Y = torch.randn(2, 4), torch.randn(2, 3)


@pytest.fixture
def no_export(monkeypatch):
    """Makes sure the error is raised before torch.export.export starts."""

    def fail(*args, **kwargs):
        raise AssertionError("torch.export.export should not be called")

    monkeypatch.setattr(torch.export, "export", fail)


@pytest.mark.parametrize(
    ("ds", "match"),
    [
        ({"z": {0: "batch"}}, r"names \['z'\] but the model received inputs \['x', 'y'\]"),
        ({"x": {2: "batch"}}, r"axis 2 does not exist, the tensor has shape \(2, 4\)"),
        (({0: "batch"},), r"dynamic_shapes has 1 entries but the model received 2 inputs"),
        ({"x": "batch"}, r"must be a dict .* or a list per axis"),
        ("batch", r"dynamic_shapes must be a dict, a tuple or a list"),
    ],
    ids=["unknown-input", "bad-axis", "count", "not-per-axis", "string"],
)
def test_dynamic_shapes_do_not_match(no_export, ds, match):
    with pytest.raises(ValueError, match=match):
        fx2onnx.to_onnx(TwoInputs(), (X, Y), dynamic_shapes=ds)


def test_inputs_do_not_match_forward(no_export):
    with pytest.raises(TypeError, match="do not match the signature of TwoInputs.forward"):
        fx2onnx.to_onnx(TwoInputs(), (X, Y, X), dynamic_shapes=({0: "b"}, {0: "b"}, {0: "b"}))


def test_not_a_module(no_export):
    with pytest.raises(TypeError, match="expects a torch.nn.Module or a torch.export.ExportedProgram, got function"):
        fx2onnx.to_onnx(lambda x: x + 1, (X,))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(args=X), TypeError, r"args must be a tuple of inputs, got Tensor: use \(x,\)"),
        (dict(args=(X, Y), kwargs=[1]), TypeError, "kwargs must be a dict"),
        (dict(args=(X, Y), target_opset=12), ValueError, r"target_opset must be an int in \[18, 23\]"),
        (dict(args=(X, Y), dispatcher={"a": 1}), TypeError, "dispatcher must be a fx2onnx.Dispatcher"),
        (dict(args=(X, Y), input_names="x"), TypeError, "input_names must be a list of strings"),
        (dict(args=(X, Y), unknown_option=1), TypeError, "unexpected keyword argument 'unknown_option'"),
    ],
    ids=["args", "kwargs", "opset", "dispatcher", "input_names", "unknown"],
)
def test_bad_options(no_export, kwargs, error, match):
    with pytest.raises(error, match=match):
        fx2onnx.to_onnx(TwoInputs(), **kwargs)


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: torch.export cannot capture it
            return x + 1
        return x - 1


def test_export_failure_is_an_export_error():
    # patches=False: to_onnx does not rewrite the `if` into torch.cond (see test_rewrite_retry.py)
    with pytest.raises(fx2onnx.ExportError, match="Step 'capture' failed: torch.export.export") as info:
        fx2onnx.to_onnx(DataDependent(), (X,), patches=False)
    message = str(info.value)
    assert "torch.cond" in message and "Frequent exceptions" in message
    assert "test_api_errors.py:82 in forward: `if x.sum() > 0:" in message  # the line responsible
    assert info.value.__cause__ is not None  # torch's exception stays attached


def test_torchscript_submodule_is_named():
    class Scripted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()))

        def forward(self, x):
            return self.inner(x) * 2

    with pytest.raises(fx2onnx.ExportError, match=r"Submodule\(s\) 'inner' are TorchScript modules"):
        fx2onnx.to_onnx(Scripted(), (torch.randn(2, 3),))


@torch.library.custom_op("fx2onnx_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.abs() + 1


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        return torch.ops.fx2onnx_test.mystery(y)  # the line the error must show


def test_unsupported_op_error_points_to_the_code():
    with pytest.raises(fx2onnx.UnsupportedOpError) as info:
        fx2onnx.to_onnx(UsesCustomOp(), (X,))
    message = str(info.value)
    assert "No converter for operator 'fx2onnx_test::mystery'" in message
    assert "FX node: %mystery" in message
    assert "test_api_errors.py" in message and "the line the error must show" in message
    assert "fx2onnx.Dispatcher({'fx2onnx_test::mystery': convert_op})" in message
    # the fix the message proposes works
    dispatcher = fx2onnx.Dispatcher({"fx2onnx_test::mystery": lambda ctx, node, x: ctx.op.Add(ctx.op.Abs(x), ctx.const(1.0))})
    onx = fx2onnx.to_onnx(UsesCustomOp(), (X,), dispatcher=dispatcher)
    assert fx2onnx.validate(onx, UsesCustomOp(), (torch.randn(2, 4),)).ok


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

    def forward(self, x):
        return self.inner(x) * 2  # multiply line


class Reshaped(Block):
    def forward(self, x):
        return super().forward(x).reshape(x.shape[0], 2, 2)


def test_node_metadata():
    onx = fx2onnx.to_onnx(Block(), (X,), optimize=False)
    metas = [{p.key: p.value for p in n.metadata_props} for n in onx.graph.node]
    assert all("fx_node" in m for m in metas), metas
    relu = next(m for m in metas if m["fx_node"] == "relu")
    assert relu["module"] == "inner.1" and relu["fx_target"] == "aten::relu"
    mul = next(m for m in metas if m["fx_node"] == "mul")
    assert "test_api_errors.py" in mul["source"] and "multiply line" in mul["source"]
    # the metadata survives the optimizer, also on the nodes it rebuilds (a folded shape)
    onx = fx2onnx.to_onnx(Reshaped(), (X,), dynamic_shapes=({0: "batch"},))
    assert "Reshape" in [n.op_type for n in onx.graph.node]
    assert all(any(p.key == "fx_node" for p in n.metadata_props) for n in onx.graph.node)


@pytest.mark.slow
def test_deterministic():
    from fx2onnx.zoo import get_tiny_model

    tiny = get_tiny_model("llama")
    tiny.model.config.use_cache = False
    first = fx2onnx.to_onnx(tiny.model, (), tiny.inputs, dynamic_shapes=tiny.dynamic_shapes)
    second = fx2onnx.to_onnx(tiny.model, (), tiny.inputs, dynamic_shapes=tiny.dynamic_shapes)
    assert first.SerializeToString() == second.SerializeToString()


def test_filename(tmp_path):
    path = tmp_path / "small.onnx"
    onx = fx2onnx.to_onnx(TwoInputs(), (X, Y), filename=path)
    assert path.exists() and not os.path.exists(str(path) + ".data")
    assert onnx.load(str(path)).SerializeToString() == onx.SerializeToString()


def test_external_data(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 16)).eval()
    x = torch.randn(3, 1024)
    path = tmp_path / "big.onnx"
    fx2onnx.to_onnx(model, (x,), dynamic_shapes=({0: "batch"},), filename=path, external_data=True)
    data = tmp_path / "big.onnx.data"
    assert data.exists() and data.stat().st_size > 4 * 1024 * 1024
    assert path.stat().st_size < 100_000  # the weights are not in the model file
    report = fx2onnx.validate(str(path), model, (torch.randn(5, 1024),))
    assert report.ok, report
