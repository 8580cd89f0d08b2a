"""Cases about signatures: how inputs are given and how outputs are returned."""

from __future__ import annotations

import torch

from .case import I, T

B = "batch"


class OneTensor(torch.nn.Module):
    """One tensor in, one tensor out: the simplest signature."""

    _inputs = [I(T(3, 4)), I(T(5, 6))]
    _dynamic = ({0: B, 1: "dim"},)

    def forward(self, x):
        return x.relu() + 1


class TwoTensors(torch.nn.Module):
    """Two tensors of the same shape sharing their dynamic dimensions."""

    _inputs = [I(T(3, 4), T(3, 4)), I(T(5, 6), T(5, 6))]
    _dynamic = ({0: B, 1: "dim"}, {0: B, 1: "dim"})

    def forward(self, x, y):
        return x * y - y


class TwoTensorsBroadcast(torch.nn.Module):
    """A matrix plus a vector broadcast along the batch dimension."""

    _inputs = [I(T(3, 4), T(4)), I(T(5, 6), T(6))]
    _dynamic = ({0: B, 1: "dim"}, {0: "dim"})

    def forward(self, x, y):
        return x + y


class ThreeTensorsMatmul(torch.nn.Module):
    """Three inputs: x @ w + b, the inner dimension shared by x and w."""

    _inputs = [I(T(3, 4), T(4, 2), T(2)), I(T(5, 6), T(6, 2), T(2))]
    _dynamic = ({0: B, 1: "dim"}, {0: "dim"}, None)

    def forward(self, x, w, b):
        return x @ w + b


class NoneInput(torch.nn.Module):
    """An optional input given as None: the exporters drop it."""

    _inputs = [I(T(3, 4), None), I(T(5, 4), None)]
    _dynamic = ({0: B}, None)

    def forward(self, x, y=None):
        if y is None:
            return x * 2
        return x + y


class OptionalInputGiven(torch.nn.Module):
    """The same optional input, this time given."""

    _inputs = [I(T(3, 4), T(3, 4)), I(T(5, 4), T(5, 4))]
    _dynamic = ({0: B}, {0: B})

    def forward(self, x, y=None):
        if y is None:
            return x * 2
        return x + y


class OptionalKwargMissing(torch.nn.Module):
    """A keyword-only optional tensor left out of the call."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = {"x": {0: B}}

    def forward(self, x, *, bias=None):
        return x if bias is None else x + bias


class KeywordTensors(torch.nn.Module):
    """Tensors given as keyword arguments, one of them a boolean mask."""

    _inputs = [
        I(x=T(3, 4), mask=T(3, 4, dtype=torch.bool)),
        I(x=T(5, 4), mask=T(5, 4, dtype=torch.bool)),
    ]
    _dynamic = {"x": {0: B}, "mask": {0: B}}

    def forward(self, x, mask):
        return x.masked_fill(mask, -1.0)


class ListOfTensors(torch.nn.Module):
    """A list of two tensors (fixed length)."""

    _inputs = [I([T(3, 4), T(3, 4)]), I([T(5, 4), T(5, 4)])]
    _dynamic = ([{0: B}, {0: B}],)

    def forward(self, xs):
        return xs[0] * xs[1]


class ListVariableLength(torch.nn.Module):
    """A list whose length changes between the input sets: the length is not dynamic."""

    _inputs = [I([T(3, 4), T(3, 4)]), I([T(5, 4), T(5, 4), T(5, 4)])]
    _dynamic = ([{0: B}, {0: B}],)

    def forward(self, xs):
        return torch.stack(xs).sum(dim=0)


class TupleOfTensors(torch.nn.Module):
    """A tuple of tensors of different ranks."""

    _inputs = [I((T(3, 4), T(4))), I((T(5, 6), T(6)))]
    _dynamic = (({0: B, 1: "dim"}, {0: "dim"}),)

    def forward(self, xy):
        x, y = xy
        return x - y


class DictOfTensors(torch.nn.Module):
    """A dictionary of tensors."""

    _inputs = [I({"x": T(3, 4), "y": T(3, 4)}), I({"x": T(5, 4), "y": T(5, 4)})]
    _dynamic = ({"x": {0: B}, "y": {0: B}},)

    def forward(self, inputs):
        return inputs["x"] / (inputs["y"].abs() + 1)


class NestedContainers(torch.nn.Module):
    """A dictionary holding a list and a tuple of tensors."""

    _inputs = [
        I({"a": [T(3, 4), T(3, 4)], "b": (T(4),)}),
        I({"a": [T(5, 4), T(5, 4)], "b": (T(4),)}),
    ]
    _dynamic = ({"a": [{0: B}, {0: B}], "b": (None,)},)

    def forward(self, inputs):
        a0, a1 = inputs["a"]
        return a0 + a1 * inputs["b"][0]


class IntArgument(torch.nn.Module):
    """An int argument which changes between the input sets: exported as a constant."""

    _inputs = [I(T(3, 4), 3), I(T(5, 4), 4)]
    _dynamic = ({0: B}, None)

    def forward(self, x, n):
        return x * n


class IntArgumentUnchanged(torch.nn.Module):
    """An int argument (a reduction axis) which keeps its value: a constant is right."""

    _inputs = [I(T(3, 4), 1), I(T(5, 4), 1)]
    _dynamic = ({0: B}, None)

    def forward(self, x, axis):
        return x.sum(dim=axis)


class FloatArgument(torch.nn.Module):
    """A float argument which changes between the input sets."""

    _inputs = [I(T(3, 4), 0.5), I(T(5, 4), 1.5)]
    _dynamic = ({0: B}, None)

    def forward(self, x, alpha):
        return x * alpha


class BoolArgument(torch.nn.Module):
    """A bool flag choosing a branch: the branch taken at export time is kept."""

    _inputs = [I(T(3, 4), True), I(T(5, 4), False)]
    _dynamic = ({0: B}, None)

    def forward(self, x, flag):
        return x + 1 if flag else x - 1


class ScalarTensorArgument(torch.nn.Module):
    """A 0-d tensor instead of a Python float: it stays an input."""

    _inputs = [I(T(3, 4), torch.tensor(0.5)), I(T(5, 4), torch.tensor(1.5))]
    _dynamic = ({0: B}, None)

    def forward(self, x, alpha):
        return x * alpha


class VarArgs(torch.nn.Module):
    """``*args``: any number of positional tensors."""

    _inputs = [I(T(3, 4), T(3, 4), T(3, 4)), I(T(5, 4), T(5, 4), T(5, 4))]
    _dynamic = {"args": ({0: B}, {0: B}, {0: B})}

    def forward(self, *args):
        return sum(args[1:], args[0])


class VarKwargs(torch.nn.Module):
    """``**kwargs``: tensors given by keyword, collected in a dict."""

    _inputs = [I(T(3, 4), y=T(3, 4), z=T(3, 4)), I(T(5, 4), y=T(5, 4), z=T(5, 4))]
    _dynamic = {"x": {0: B}, "kwargs": {"y": {0: B}, "z": {0: B}}}

    def forward(self, x, **kwargs):
        return x + kwargs["y"] * kwargs["z"]


class ArgsAndKwargs(torch.nn.Module):
    """Positional tensors, ``*args`` and a keyword-only tensor together."""

    _inputs = [I(T(3, 4), T(3, 4), bias=T(4)), I(T(5, 4), T(5, 4), bias=T(4))]
    _dynamic = {"x": {0: B}, "args": ({0: B},), "bias": None}

    def forward(self, x, *args, bias):
        return x * args[0] + bias


class OutputTuple(torch.nn.Module):
    """Two outputs returned as a tuple."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x + 1, x.sum(dim=1)


class OutputList(torch.nn.Module):
    """Outputs returned as a list."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return [x.exp(), x.neg()]


class OutputDict(torch.nn.Module):
    """Outputs returned as a dictionary."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return {"max": x.max(dim=1).values, "min": x.min(dim=1).values}


class OutputNested(torch.nn.Module):
    """Outputs nested: a tuple holding a list holding a dict."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x.abs(), [x.sin(), {"c": x.cos()}]


class OutputScalarTensor(torch.nn.Module):
    """A 0-d tensor output (a full reduction)."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B, 1: "dim"},)

    def forward(self, x):
        return x.pow(2).mean()


class OutputShapeInt(torch.nn.Module):
    """A Python int computed from a shape returned next to a tensor."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x * 2, x.shape[0] * 2


class OutputNone(torch.nn.Module):
    """A None among the outputs."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x + 1, None


class OutputInputAlias(torch.nn.Module):
    """An input returned unchanged next to a computed output."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x, x * 3
