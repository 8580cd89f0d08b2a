"""Dimension names of the ONNX model come from the user's dynamic shapes; output names from the outputs."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import fx2onnx
from fx2onnx.convert.naming import output_names_from_spec, path_to_name


def _dims(value_info) -> list:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


class CatModel(torch.nn.Module):
    def forward(self, x, past):
        z = torch.cat([past, x], dim=1)
        return {"z": z.relu() * 2, "flat": z.reshape(-1)}


X, PAST = torch.randn(2, 3, 4), torch.randn(2, 5, 4)


@pytest.mark.parametrize(
    "ds",
    [
        {"x": {0: "batch", 1: "seq"}, "past": {0: "batch", 1: "past"}},
        ({0: "batch", 1: "seq"}, {0: "batch", 1: "past"}),
        {"x": {0: Dim("batch"), 1: Dim("seq")}, "past": {0: Dim("batch"), 1: Dim("past")}},
        {"x": ["batch", "seq", None], "past": ["batch", "past", None]},
    ],
    ids=["strings", "tuple", "Dim", "lists"],
)
def test_user_names_everywhere(ds):
    onx = fx2onnx.to_onnx(CatModel(), (X, PAST), dynamic_shapes=ds)
    assert {i.name: _dims(i) for i in onx.graph.input} == {"x": ["batch", "seq", 4], "past": ["batch", "past", 4]}
    # outputs named after the dict keys, derived dimensions as readable expressions
    assert {o.name: _dims(o) for o in onx.graph.output} == {
        "z": ["batch", "past+seq", 4],
        "flat": ["4*batch*(past+seq)"],
    }
    # intermediate results carry the names too
    infos = {v.name: _dims(v) for v in onx.graph.value_info}
    assert infos["cat"] == ["batch", "past+seq", 4], infos
    report = fx2onnx.validate(onx, CatModel(), (torch.randn(3, 7, 4), torch.randn(3, 2, 4)))
    assert report.ok, report


def test_dim_dynamic_and_auto_get_default_names():
    ds = {"x": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, "past": {0: Dim.AUTO, 1: Dim.AUTO}}
    onx = fx2onnx.to_onnx(CatModel(), (X, PAST), dynamic_shapes=ds)
    inputs = {i.name: _dims(i) for i in onx.graph.input}
    # torch unifies both batch dimensions (cat): the first name wins
    assert inputs == {"x": ["x_dim0", "x_dim1", 4], "past": ["x_dim0", "past_dim1", 4]}
    assert _dims(onx.graph.output[0]) == ["x_dim0", "past_dim1+x_dim1", 4]
    assert fx2onnx.validate(onx, CatModel(), (torch.randn(3, 7, 4), torch.randn(3, 2, 4))).ok


class Half(torch.nn.Module):
    def forward(self, x):
        return x[:, ::2] + 1


def test_floor_division_expression():
    onx = fx2onnx.to_onnx(Half(), (torch.randn(2, 6),), dynamic_shapes=({0: "batch"},))
    assert _dims(onx.graph.output[0]) == ["batch", 3]
    onx = fx2onnx.to_onnx(Half(), (torch.randn(2, 6),), dynamic_shapes=({0: "batch", 1: Dim.AUTO},))
    assert _dims(onx.graph.output[0]) == ["batch", "(x_dim1+1)//2"]
    assert fx2onnx.validate(onx, Half(), (torch.randn(3, 9),)).ok


class Flatten(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], 12)


def test_static_dimension_with_auto():
    # Dim.AUTO lets torch specialize the dimension: the ONNX input is static there
    onx = fx2onnx.to_onnx(Flatten(), (torch.randn(2, 3, 4),), dynamic_shapes=({0: "batch", 1: Dim.AUTO},))
    assert _dims(onx.graph.input[0]) == ["batch", 3, 4]


def test_static_dimension_named_by_user_fails_clearly():
    # a name means "dynamic": torch refuses to specialize it and says which one
    with pytest.raises(fx2onnx.ExportError, match=r"'seq' \(x, axis 1\) static"):
        fx2onnx.to_onnx(Flatten(), (torch.randn(2, 3, 4),), dynamic_shapes=({0: "batch", 1: "seq"},))


class Many(torch.nn.Module):
    def forward(self, x):
        return x + 1, (x * 2, {"a": x - 1}), 3


def test_output_names_from_structure():
    onx = fx2onnx.to_onnx(Many(), (torch.randn(2, 3),))
    assert [o.name for o in onx.graph.output] == ["output_0", "output_1_0", "output_1_1_a", "output_2"]
    onx = fx2onnx.to_onnx(Many(), (torch.randn(2, 3),), output_names=["p", "q", "r", "s"])
    assert [o.name for o in onx.graph.output] == ["p", "q", "r", "s"]
    assert fx2onnx.validate(onx, Many(), (torch.randn(2, 3),)).ok


def test_output_names_model_output():
    ep = torch.export.export(Many(), (torch.randn(2, 3),))
    assert output_names_from_spec(ep.call_spec.out_spec) == ["output_0", "output_1_0", "output_1_1_a", "output_2"]
    assert path_to_name(()) == "output"
    assert path_to_name(("past_key_values", 0)) == "past_key_values_0"
    assert path_to_name(("a.b",)) == "a_b"


def test_output_names_distinct_from_inputs():
    from fx2onnx.convert.naming import distinct_from_inputs

    names = ["logits", "past_key_values_key_0", "x", None]
    assert distinct_from_inputs(names, {"x", "past_key_values_key_0"}) == ["logits", "present_key_0", "x_out", None]


class Identityish(torch.nn.Module):
    def forward(self, x):
        return {"x": x + 1}


def test_output_named_like_an_input():
    onx = fx2onnx.to_onnx(Identityish(), (torch.randn(2, 3),))
    assert [i.name for i in onx.graph.input] == ["x"]
    assert [o.name for o in onx.graph.output] == ["x_out"]
