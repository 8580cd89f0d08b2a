"""In-place operators on intermediates made out-of-place without re-tracing (convert/local_functionalize.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch

import fx2onnx
from fx2onnx.convert.decompose import functionalize_and_decompose
from fx2onnx.convert.local_functionalize import functionalize_intermediates


def _mutating(ep):
    return [n for n in ep.graph.nodes if n.op == "call_function" and getattr(n.target, "_schema", None)
            is not None and n.target._schema.is_mutable]


def _check(model, example, others, dynamic_shapes=None):
    """to_onnx on ``example``, the ONNX model equal to eager on every input of ``others``."""
    onx = fx2onnx.to_onnx(model, example, dynamic_shapes=dynamic_shapes)
    sess = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    for inputs in [example, *others]:
        feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs)}
        got = sess.run(None, feeds)
        expected = model(*inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e.detach().numpy(), atol=1e-6)


class MaskedAssignment(torch.nn.Module):
    """Longformer's pattern: a mask computed, sliced, then written where a condition holds."""

    def forward(self, x, flags):
        mask = (x * 2)[:, None, None, :].expand(-1, 1, 1, -1).clone()
        extended = mask[:, 0, 0, :]
        extended[flags == 2] = 100.0
        return extended + 1


def test_masked_assignment_needs_no_retrace():
    x, flags = torch.rand(2, 5), torch.tensor([[0, 2, 1, 2, 0], [2, 0, 0, 0, 1]])
    ep = torch.export.export(MaskedAssignment(), (x, flags))
    assert [str(n.target) for n in _mutating(ep)] == ["aten.index_put_.default"]
    assert functionalize_intermediates(ep) == ["aten.index_put_.default"]
    assert not _mutating(ep)
    torch.testing.assert_close(ep.module()(x, flags), MaskedAssignment()(x, flags))
    # nothing left for run_decompositions: the same program object comes back
    again, decomposed = functionalize_and_decompose(ep)
    assert again is ep and not decomposed


def test_masked_assignment_exports_right_for_other_values_and_sizes():
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    example = (torch.rand(2, 5), torch.tensor([[0, 2, 1, 2, 0], [2, 0, 0, 0, 1]]))
    others = [(torch.rand(3, 7), torch.randint(0, 3, (3, 7))), (torch.rand(1, 2), torch.zeros(1, 2, dtype=torch.int64))]
    _check(MaskedAssignment(), example, others, dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))


class BaseReadAfter(torch.nn.Module):
    """The base of the written view is read after the write: the write must show there."""

    def forward(self, x):
        y = x * 2
        row = y[0]
        row.add_(1.0)
        return y - 1


class InputWritten(torch.nn.Module):
    def forward(self, x):
        x.mul_(2.0)
        return x + 1


class Promoting(torch.nn.Module):
    """An in-place add keeps float32; ``add`` would give float64."""

    def forward(self, x, y):
        z = x * 1
        z.add_(y)
        return z


class ReturnedAfterWrite(torch.nn.Module):
    def forward(self, x):
        y = x + 0
        y[:, 0] = -1.0
        z = y.clone()
        z.masked_fill_(z > 0.5, 0.0)
        return y, z


@pytest.mark.parametrize(
    "model, inputs, replaced",
    [
        (BaseReadAfter(), (torch.rand(3, 4),), ["aten.add_.Tensor"]),  # a view of the base: scattered back
        (InputWritten(), (torch.rand(3, 4),), []),
        (Promoting(), (torch.rand(3, 4), torch.rand(3, 4, dtype=torch.float64)), []),
        (ReturnedAfterWrite(), (torch.rand(3, 4),), ["aten.fill_.Tensor", "aten.masked_fill_.Scalar"]),
    ],
)
def test_replaced_or_left_to_torch(model, inputs, replaced):
    ep = torch.export.export(model, tuple(t.clone() for t in inputs))
    before = len(_mutating(ep))
    assert before > 0
    assert sorted(functionalize_intermediates(ep)) == sorted(replaced)
    assert len(_mutating(ep)) == before - len(replaced)
    if not isinstance(model, InputWritten):
        torch.testing.assert_close(ep.module()(*inputs), model(*inputs))
    # every case exports right, the remaining mutations functionalized by torch
    _check(model, tuple(t.clone() for t in inputs), [tuple(torch.rand_like(t) for t in inputs)])


class ShapesTable(torch.nn.Module):
    """RT-DETR's pattern: a table filled row by row, a column divided in place, the base read after."""

    def forward(self, x):
        table = torch.empty((2, 2), dtype=torch.int64)
        for level in range(2):
            table[level, 0] = x.shape[0] * (level + 1)
            table[level, 1] = x.shape[1]
        grid = x * 1
        grid[..., 0] /= x.shape[1]
        row = grid[1]
        grid[:, 1:2] = -1.0
        return table * 2, grid + 1, row


@pytest.mark.parametrize("model, inputs", [(ShapesTable(), (torch.rand(3, 4),)),
                                           (BaseReadAfter(), (torch.rand(3, 4),)),
                                           (ReturnedAfterWrite(), (torch.rand(3, 4),))])
def test_writes_through_views_scattered_back(model, inputs):
    ep = torch.export.export(model, inputs)
    assert _mutating(ep)
    functionalize_intermediates(ep)
    assert not _mutating(ep)
    torch.testing.assert_close(ep.module()(*inputs), model(*inputs))
    again, decomposed = functionalize_and_decompose(ep)
    assert again is ep and not decomposed
    _check(model, inputs, [(torch.rand(3, 4),)])
