"""forward(self, ..., **kwargs): dynamic shapes given by input name, flat or nested like torch.export."""

import pytest
import torch

import fx2onnx
from fx2onnx.validation import validate


class KeywordsOnly(torch.nn.Module):
    def forward(self, **kwargs):
        return kwargs["x"] * 2 + kwargs["y"]


class NamedAndKeywords(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 4)

    def forward(self, x, **kwargs):
        return self.linear(x) * kwargs["scale"]


@pytest.mark.parametrize(
    "dynamic_shapes",
    [
        {"x": {0: "batch"}, "y": {0: "batch"}},  # flat, by input name
        {"kwargs": {"x": {0: "batch"}, "y": {0: "batch"}}},  # nested under the parameter, as torch.export takes it
    ],
)
def test_keyword_inputs_take_dynamic_shapes(dynamic_shapes):
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    model = KeywordsOnly()
    onx = fx2onnx.to_onnx(model, (), kwargs=dict(x=x, y=y), dynamic_shapes=dynamic_shapes)
    assert [i.name for i in onx.graph.input] == ["x", "y"]
    assert onx.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    report = validate(onx, model, (), dict(x=torch.randn(5, 3), y=torch.randn(5, 3)))
    assert report.ok, report
    assert "forward" not in model.__dict__  # the signature given for the capture is removed


def test_named_and_keyword_inputs_with_weights():
    model = NamedAndKeywords()
    x, scale = torch.randn(2, 3), torch.randn(2, 4)
    onx = fx2onnx.to_onnx(model, (x,), kwargs=dict(scale=scale),
                          dynamic_shapes={"x": {0: "batch"}, "scale": {0: "batch"}})
    assert {i.name for i in onx.graph.initializer} == {"linear.weight", "linear.bias"}
    report = validate(onx, model, (torch.randn(6, 3),), dict(scale=torch.randn(6, 4)))
    assert report.ok, report
