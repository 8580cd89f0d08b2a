"""Submodules exported as ONNX local functions (export_modules_as_functions)."""

from __future__ import annotations

import onnx
import pytest
import torch
from helpers import check_export

import fx2onnx
from fx2onnx.convert.functions import FUNCTION_DOMAIN


class Block(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.lin = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(torch.relu(self.lin(x)) + x)


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(4) for _ in range(3)])
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        x = self.blocks[0](x)  # the same instance called twice
        return self.head(x)


def _calls(onx: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in onx.graph.node if n.domain == FUNCTION_DOMAIN]


X, X2, DS = torch.randn(3, 4), torch.randn(7, 4), ({0: "batch"},)


@pytest.mark.parametrize("optimize", [False, True])
def test_one_function_per_class(optimize):
    torch.manual_seed(0)
    onx = check_export(
        Stack(), (X,), dynamic_shapes=DS, inputs2=((X2,), None), export_modules_as_functions={Block}, optimize=optimize
    )
    assert [f.name for f in onx.functions] == ["Block"]
    assert _calls(onx) == ["Block"] * 4
    # weights are inputs of the function: x, then the weights of lin and norm
    assert len(onx.functions[0].input) == 5
    assert onx.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_class_given_by_name_and_nested_functions():
    onx = check_export(
        Stack(), (X,), dynamic_shapes=DS, inputs2=((X2,), None), export_modules_as_functions={"Block", torch.nn.Linear}
    )
    names = sorted(f.name for f in onx.functions)
    assert names == ["Block", "Linear"]
    block = next(f for f in onx.functions if f.name == "Block")
    assert [n.op_type for n in block.node if n.domain == FUNCTION_DOMAIN] == ["Linear"]
    assert _calls(onx) == ["Block"] * 4 + ["Linear"]


def test_all_submodules():
    onx = check_export(Stack(), (X,), dynamic_shapes=DS, inputs2=((X2,), None), export_modules_as_functions=True)
    assert sorted(f.name for f in onx.functions) == ["Block", "LayerNorm", "Linear"]


class TwoSignatures(torch.nn.Module):
    """Two Linear layers with different signatures (bias or not) -> two functions."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4, bias=False)
        self.c = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.c(self.b(self.a(x)))


def test_one_function_per_signature():
    onx = check_export(
        TwoSignatures(), (X,), dynamic_shapes=DS, inputs2=((X2,), None), export_modules_as_functions={torch.nn.Linear}
    )
    assert sorted(f.name for f in onx.functions) == ["Linear", "Linear_1"]
    assert len(_calls(onx)) == 3


class WithCond(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block(4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.block(x), lambda x: x * 2, [x])


def test_function_and_control_flow():
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = WithCond()

        def forward(self, x):
            return self.inner(x) + 1

    onx = check_export(
        Outer(), (X.abs(),), dynamic_shapes=DS, inputs2=((-X2.abs(),), None), export_modules_as_functions={WithCond}
    )
    assert [f.name for f in onx.functions] == ["WithCond"]
    assert "If" in [n.op_type for n in onx.functions[0].node]


def test_bad_selection():
    with pytest.raises(TypeError, match="export_modules_as_functions"):
        fx2onnx.to_onnx(Stack(), (X,), export_modules_as_functions={3})


def test_functions_export_is_deterministic():
    torch.manual_seed(0)
    model = Stack()
    first = fx2onnx.to_onnx(model, (X,), dynamic_shapes=DS, export_modules_as_functions=True).SerializeToString()
    second = fx2onnx.to_onnx(model, (X,), dynamic_shapes=DS, export_modules_as_functions=True).SerializeToString()
    assert first == second


class SplitHeads(torch.nn.Module):
    """Reshapes with dynamic dimensions and returns two tensors."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.proj(x).view(b, s, 2, 4).transpose(1, 2)
        return h, h.sum(dim=-1)


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = SplitHeads()
        self.b = SplitHeads()

    def forward(self, x):
        ha, sa = self.a(x)
        hb, sb = self.b(x * 2)
        return (ha * hb).sum(dim=1), sa - sb


def test_function_with_dynamic_reshape_and_two_outputs():
    x, x2 = torch.randn(2, 3, 8), torch.randn(5, 7, 8)
    onx = check_export(
        TwoHeads(), (x,), dynamic_shapes=({0: "batch", 1: "seq"},), inputs2=((x2,), None), export_modules_as_functions={SplitHeads}
    )
    assert [f.name for f in onx.functions] == ["SplitHeads"]
    assert len(onx.functions[0].output) == 2
    assert _calls(onx) == ["SplitHeads"] * 2


@pytest.mark.parametrize("selection", ["layer", pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.slow
def test_tiny_llama_decoder_layers_as_functions(selection):
    from fx2onnx.zoo import get_tiny_model

    tiny = get_tiny_model("llama", num_hidden_layers=2)
    tiny.model.config.use_cache = False
    layer_class = type(tiny.model.model.layers[0])
    onx = check_export(
        tiny.model,
        (),
        tiny.inputs,
        dynamic_shapes=tiny.dynamic_shapes,
        inputs2=((), tiny.inputs2),
        export_modules_as_functions={layer_class} if selection == "layer" else True,
    )
    names = [f.name for f in onx.functions]
    assert "LlamaDecoderLayer" in names
    assert not any(n.startswith("_") for n in names)  # no function from torch's placeholder stack entries
    if selection == "layer":
        assert _calls(onx) == ["LlamaDecoderLayer"] * 2
