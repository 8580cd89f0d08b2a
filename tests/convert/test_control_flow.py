"""torch.cond -> If, scan -> Scan, while_loop -> Loop, map -> Scan, with dynamic shapes."""

from __future__ import annotations

import onnx
import pytest
import torch
from helpers import check_export
from torch._higher_order_ops.map import map as torch_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop


def _op_types(onx: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in onx.graph.node}


def _dim_params(values) -> list[list]:
    return [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values]


# torch.cond


class CondTwoOutputs(torch.nn.Module):
    """Predicate from a tensor, two outputs, a branch using module weights."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, y):
        def true_fn(x, y):
            return self.lin(x) + y, x.sin()

        def false_fn(x, y):
            return x - y, x.cos()

        return torch.cond(x.sum() > 0, true_fn, false_fn, [x, y])


@pytest.mark.slow
def test_cond_tensor_predicate_two_outputs_weights():
    torch.manual_seed(0)
    x, y = torch.randn(3, 4).abs(), torch.randn(3, 4)
    x2, y2 = -torch.randn(5, 4).abs(), torch.randn(5, 4)
    ds = ({0: "batch"}, {0: "batch"})
    onx = check_export(CondTwoOutputs(), (x, y), dynamic_shapes=ds, inputs2=((x2, y2), None))
    assert "If" in _op_types(onx)
    assert _dim_params(onx.graph.output) == [["batch", 4], ["batch", 4]]
    # both branches are taken across the two input sets
    check_export(CondTwoOutputs(), (x2, y2), dynamic_shapes=ds, inputs2=((x, y), None))


class CondShapePredicate(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda x: x * 2, lambda x: x + 1, [x])


def test_cond_symbolic_shape_predicate():
    onx = check_export(
        CondShapePredicate(), (torch.randn(3, 4),), dynamic_shapes=({0: "batch"},), inputs2=((torch.randn(7, 4),), None)
    )
    assert "If" in _op_types(onx)


class CondClosure(torch.nn.Module):
    """Branches read an outer tensor (closure) and a buffer without receiving them as operands."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor([0.5, 2.0, 3.0]))

    def forward(self, x, bias):
        z = bias * 3

        def true_fn(x):
            return x * self.scale + z

        def false_fn(x):
            return x - z

        return torch.cond(x.mean() > 0, true_fn, false_fn, [x])


def test_cond_closure_outer_tensor_and_buffer():
    x, b = torch.ones(2, 3), torch.randn(3)
    check_export(CondClosure(), (x, b), dynamic_shapes=({0: "n"}, None), inputs2=((-torch.ones(6, 3), b), None))


class NestedCond(torch.nn.Module):
    def forward(self, x):
        def inner_true(x):
            return x * 10

        def inner_false(x):
            return x / 10

        def outer_true(x):
            return torch.cond(x.max() > 1, inner_true, inner_false, [x]) + 1

        def outer_false(x):
            return x.abs()

        return torch.cond(x.sum() > 0, outer_true, outer_false, [x])


@pytest.mark.parametrize("scale", [3.0, 0.1, -1.0])
def test_nested_cond(scale):
    x = torch.rand(4, 2) * scale
    check_export(NestedCond(), (x,), dynamic_shapes=({0: "n"},), inputs2=((torch.rand(7, 2) * scale,), None))


class CondInSubmodule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = CondTwoOutputs()
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x, y):
        a, b = self.block(x, y)
        return self.head(a * b)


def test_cond_inside_submodule():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    check_export(
        CondInSubmodule(), (x, y), dynamic_shapes=({0: "b"}, {0: "b"}), inputs2=((-x.abs(), y), None)
    )


# scan


class ScanCumsum(torch.nn.Module):
    """Two carries, two scanned inputs, additional input, two stacked outputs."""

    def __init__(self, reverse: bool = False):
        super().__init__()
        self.reverse = reverse
        self.weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))

    def forward(self, init_sum, init_prod, xs, ws):
        def combine(carry, inputs):
            (s, p), (x, w) = carry, inputs
            s2 = s + x * self.weight
            p2 = p * torch.tanh(w)
            return (s2, p2), (s2 * 2, p2 + s2)

        (s, p), (ys, zs) = scan(combine, (init_sum, init_prod), (xs, ws), reverse=self.reverse)
        return s, p, ys, zs


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.slow
def test_scan_several_carries_reverse(reverse):
    torch.manual_seed(1)
    inputs = (torch.zeros(3), torch.ones(3), torch.randn(5, 3), torch.randn(5, 3))
    inputs2 = (torch.randn(3), torch.ones(3), torch.randn(9, 3), torch.randn(9, 3))
    ds = (None, None, {0: "steps"}, {0: "steps"})
    onx = check_export(ScanCumsum(reverse), inputs, dynamic_shapes=ds, inputs2=(inputs2, None))
    assert "Scan" in _op_types(onx)
    assert _dim_params(onx.graph.output)[2] == ["steps", 3]


class ScanAdditional(torch.nn.Module):
    """A carry with a dynamic dimension and an explicit additional input."""

    def forward(self, x, xs):
        def combine(c, row):
            nc = torch.tanh(c * row + x)
            return nc, nc.sum(dim=1)

        return scan(combine, torch.zeros_like(x), xs)


def test_scan_dynamic_carry_and_outer_tensor():
    x, xs = torch.randn(2, 3) / 3, torch.randn(4, 3)
    check_export(
        ScanAdditional(),
        (x, xs),
        dynamic_shapes=({0: "batch"}, {0: "steps"}),
        inputs2=((torch.randn(5, 3) / 3, torch.randn(6, 3)), None),
    )


class PairwiseDistance(torch.nn.Module):
    """cdist written with scan: one row of ``x`` against every row of ``y`` per step."""

    def forward(self, x, y):
        def dist(carry, row):
            d = ((y - row.unsqueeze(0)) ** 2).sum(dim=1).sqrt()
            return carry.clone(), d

        _, out = scan(dist, torch.zeros(1, dtype=x.dtype), x)
        return out


@pytest.mark.slow
def test_scan_pairwise_distance():
    x, y = torch.randn(5, 3), torch.randn(4, 3)
    model = PairwiseDistance()
    torch.testing.assert_close(model(x, y), torch.cdist(x, y), atol=1e-5, rtol=1e-5)
    check_export(
        model, (x, y), dynamic_shapes=({0: "n"}, {0: "m"}), inputs2=((torch.randn(8, 3), torch.randn(2, 3)), None)
    )


# while_loop


class WhileCounter(torch.nn.Module):
    """A tensor counter and a carried tensor; the loop stops on a data-dependent condition."""

    def forward(self, x, limit):
        def cond_fn(i, x):
            return (i < 6) & (x.abs().sum() < limit)

        def body_fn(i, x):
            return i + 1, x * 2

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


def test_while_loop_tensors():
    x = torch.full((3,), 0.5)
    limit = torch.tensor(10.0)
    onx = check_export(
        WhileCounter(), (x, limit), dynamic_shapes=({0: "n"}, None), inputs2=((torch.full((2,), 0.25), torch.tensor(100.0)), None)
    )
    assert "Loop" in _op_types(onx)


class WhileInt(torch.nn.Module):
    """A Python int carried by the loop (becomes an int64 scalar) and additional inputs."""

    def forward(self, x, step):
        def cond_fn(i, x):
            return i < x.shape[0]

        def body_fn(i, x):
            return i + 1, x + step * i

        i, y = while_loop(cond_fn, body_fn, (0, x))
        return y, i * 1.0


def test_while_loop_int_carry():
    x = torch.randn(3, 2)
    check_export(WhileInt(), (x, torch.tensor(0.5)), dynamic_shapes=({0: "n"}, None), inputs2=((torch.randn(5, 2), torch.tensor(2.0)), None))


# map


class MapRows(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, xs, y):
        def body(x, y):
            return self.lin(x * y), x.sum()

        return torch_map(body, xs, y)


def test_map():
    xs, y = torch.randn(4, 3), torch.randn(3)
    onx = check_export(MapRows(), (xs, y), dynamic_shapes=({0: "n"}, None), inputs2=((torch.randn(7, 3), y), None))
    assert "Scan" in _op_types(onx)


def test_subgraphs_keep_dimension_names():
    onx = check_export(
        CondTwoOutputs(), (torch.randn(3, 4), torch.randn(3, 4)), dynamic_shapes=({0: "batch"}, {0: "batch"})
    )
    if_node = next(n for n in onx.graph.node if n.op_type == "If")
    for attr in if_node.attribute:
        assert _dim_params(attr.g.output) == [["batch", 4], ["batch", 4]]
    onx = check_export(ScanAdditional(), (torch.randn(2, 3), torch.randn(4, 3)), dynamic_shapes=({0: "batch"}, {0: "steps"}))
    body = next(n for n in onx.graph.node if n.op_type == "Scan").attribute[0].g
    assert _dim_params(body.input) == [["batch", 3], [3]]
    assert _dim_params(body.output) == [["batch", 3], ["batch"]]
    assert _dim_params(onx.graph.output) == [["batch", 3], ["steps", "batch"]]


def _without_source(onx: onnx.ModelProto) -> bytes:
    """The model without the 'source' metadata: torch numbers the generated code of
    higher-order ops (``<eval_with_key>.N``) with a counter growing at each export."""

    def strip(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            kept = [p for p in node.metadata_props if p.key != "source"]
            del node.metadata_props[:]
            node.metadata_props.extend(kept)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    strip(attr.g)

    strip(onx.graph)
    return onx.SerializeToString()


def test_control_flow_export_is_deterministic():
    import fx2onnx

    args, ds = (torch.randn(4, 2),), ({0: "n"},)
    first = _without_source(fx2onnx.to_onnx(NestedCond(), args, dynamic_shapes=ds))
    assert first == _without_source(fx2onnx.to_onnx(NestedCond(), args, dynamic_shapes=ds))


class ScanDim1(torch.nn.Module):
    """Scans along the second dimension; every step returns a 0-d tensor."""

    def forward(self, init, xs):
        def combine(c, x):
            return c + x, (c * x).sum(0)

        return scan(combine, init, xs, dim=1)


@pytest.mark.slow
def test_scan_along_dim1():
    onx = check_export(
        ScanDim1(), (torch.zeros(2), torch.randn(2, 5)), dynamic_shapes=(None, {1: "t"}), inputs2=((torch.ones(2), torch.randn(2, 9)), None)
    )
    assert _dim_params(onx.graph.output) == [[2], ["t"]]
