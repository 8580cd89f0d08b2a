"""Cases about control flow: Python tests and loops, torch.cond, scan, while_loop, map."""

from __future__ import annotations

import torch
from torch._higher_order_ops.map import map as torch_map
from torch._higher_order_ops.scan import scan

from .case import I, T

B = "batch"


class IfOnShapeBothBranches(torch.nn.Module):
    """A Python ``if`` on a dynamic dimension whose two input sets take different branches."""

    _inputs = [I(T(3, 4)), I(T(6, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        if x.shape[0] > 4:
            return x + 1
        return x - 1


class IfOnShapeSameBranch(torch.nn.Module):
    """A Python ``if`` on a dynamic dimension, the same branch for both input sets."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        if x.shape[0] > 2:
            return x + 1
        return x - 1


class IfOnStaticShape(torch.nn.Module):
    """A Python ``if`` on a static dimension: resolved at export time."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        if x.shape[1] == 4:
            return x * 2
        return x


class IfOnValue(torch.nn.Module):
    """A Python ``if`` on a tensor value: data-dependent, torch.export cannot trace it."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1


class IntOfTensorSlice(torch.nn.Module):
    """``int()`` of a tensor value as a slice bound: a Python number read from the data."""

    _inputs = [I(T(2, 9), torch.tensor([3, 5])), I(T(3, 11), torch.tensor([2, 8, 4]))]
    _dynamic = ({0: B, 1: "seq"}, {0: B})

    def forward(self, x, lengths):
        return x[:, : int(lengths.max())] * 2


class WhereInsteadOfIf(torch.nn.Module):
    """``torch.where``: a test on values without control flow."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return torch.where(x.sum(dim=1, keepdim=True) > 0, x + 1, x - 1)


class CondOnValue(torch.nn.Module):
    """``torch.cond`` on a tensor predicate."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (x,))


class CondOnShape(torch.nn.Module):
    """``torch.cond`` on an int predicate built from a dynamic dimension."""

    _inputs = [I(T(3, 4)), I(T(6, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda x: x * 2, lambda x: x / 2, (x,))


class CondBoolInput(torch.nn.Module):
    """``torch.cond`` with a boolean 0-d tensor input as predicate."""

    _inputs = [I(torch.tensor(True), T(3, 4)), I(torch.tensor(False), T(5, 4))]
    _dynamic = (None, {0: B})

    def forward(self, pred, x):
        return torch.cond(pred, lambda x: x.cos(), lambda x: x.sin(), (x,))


class CondTwoOutputs(torch.nn.Module):
    """``torch.cond`` whose branches return two tensors."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        def true_fn(x):
            return x + 1, x.sum(dim=1)

        def false_fn(x):
            return x - 1, x.mean(dim=1)

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))


class CondClosure(torch.nn.Module):
    """``torch.cond`` branches using a tensor they close over (not an operand)."""

    _inputs = [I(T(3, 4), T(3, 4)), I(T(5, 4), T(5, 4))]
    _dynamic = ({0: B}, {0: B})

    def forward(self, x, y):
        return torch.cond(x.sum() > 0, lambda x: x + y, lambda x: x - y, (x,))


class CondNested(torch.nn.Module):
    """A ``torch.cond`` inside a branch of another one."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        def inner_true(x):
            return x * 2

        def inner_false(x):
            return x * 3

        def outer_true(x):
            return torch.cond(x.mean() > 0, inner_true, inner_false, (x,))

        def outer_false(x):
            return -x

        return torch.cond(x.sum() > 0, outer_true, outer_false, (x,))


class CondWithParameter(torch.nn.Module):
    """``torch.cond`` branches using a parameter of the module."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x @ self.weight, lambda x: x @ self.weight.T, (x,))


class ForLoopOnShape(torch.nn.Module):
    """A Python loop over a dynamic dimension: unrolled for the export shape."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        acc = torch.zeros_like(x[0])
        for i in range(x.shape[0]):
            acc = acc * 0.5 + x[i]
        return acc


class RecurrentLayersOverSequence(torch.nn.Module):
    """``nn.LSTM`` then ``nn.GRU`` over a dynamic sequence: a loop over time inside torch's
    operators."""

    _inputs = [I(T(2, 5, 4)), I(T(3, 8, 4))]
    _dynamic = ({0: B, 1: "seq"},)

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 6, batch_first=True, bidirectional=True)
        self.gru = torch.nn.GRU(12, 3, batch_first=True)

    def forward(self, x):
        y, (h, _) = self.lstm(x)
        z, _ = self.gru(y)
        return z, h


class PackedSequenceThroughLSTM(torch.nn.Module):
    """Padded sequences of different lengths packed, through ``nn.LSTM``, padded again: sizes from the
    lengths."""

    # the second set's longest sequence is shorter than its padding: the output is cut at 5
    _inputs = [I(T(3, 6, 4), torch.tensor([6, 2, 4])), I(T(4, 7, 4), torch.tensor([1, 5, 3, 2]))]
    _dynamic = ({0: B, 1: "seq"}, {0: B})

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 5, batch_first=True, bidirectional=True)

    def forward(self, x, lengths):
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            x, lengths, batch_first=True, enforce_sorted=False
        )
        y, (h, _) = self.lstm(packed)
        padded, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True)
        return padded, h


class ForLoopConstant(torch.nn.Module):
    """A Python loop of constant length: unrolled, exact for every shape."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        for i in range(3):
            x = x * 0.5 + i
        return x


class ListComprehensionSplit(torch.nn.Module):
    """A loop over the chunks of a tensor split along a static dimension."""

    _inputs = [I(T(3, 6)), I(T(5, 6))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return torch.cat([c.relu() * (i + 1) for i, c in enumerate(x.split(2, dim=1))], dim=1)


class ScanCumulativeSum(torch.nn.Module):
    """``scan``: a cumulative sum along the first dimension, carry and per-step output."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        def combine(carry, row):
            carry = carry + row
            return carry, carry.clone()

        last, all_ = scan(combine, torch.zeros_like(x[0]), x)
        return last, all_


class ScanTwoCarries(torch.nn.Module):
    """``scan`` with two carried tensors (a running sum and a running max)."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        def combine(carry, row):
            total, best = carry
            total = total + row
            best = torch.maximum(best, row)
            return (total, best), total * best

        (total, best), ys = scan(combine, (torch.zeros_like(x[0]), torch.full_like(x[0], -1e9)), x)
        return total, best, ys


class WhileLoopCounter(torch.nn.Module):
    """``torch.while_loop`` running a number of iterations read from a tensor."""

    _inputs = [I(torch.tensor(3), T(3, 4)), I(torch.tensor(5), T(5, 4))]
    _dynamic = (None, {0: B})

    def forward(self, n, x):
        def cond_fn(i, acc):
            return i < n

        def body_fn(i, acc):
            return i + 1, acc * 0.5 + 1

        _, out = torch.while_loop(cond_fn, body_fn, (torch.zeros_like(n), x))
        return out


class WhileLoopUntilSmall(torch.nn.Module):
    """``torch.while_loop`` stopping on a condition on the values."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        def cond_fn(x):
            return x.abs().sum() > 1

        def body_fn(x):
            return (x * 0.5,)

        return torch.while_loop(cond_fn, body_fn, (x,))[0]


class MapRows(torch.nn.Module):
    """``map``: a function applied to each row, with an extra argument."""

    _inputs = [I(T(3, 4), T(4)), I(T(5, 4), T(4))]
    _dynamic = ({0: B}, None)

    def forward(self, x, y):
        return torch_map(lambda row, y: row * y + row.sum(), x, y)


class ShapeArithmetic(torch.nn.Module):
    """Reshape computed from dynamic dimensions (products and divisions)."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x.reshape(x.shape[0] * 2, x.shape[1] // 2)


class CreationFromShape(torch.nn.Module):
    """New tensors whose shapes come from dynamic dimensions."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        ones = torch.ones((x.shape[0], 2), dtype=x.dtype)
        pos = torch.arange(x.shape[0], dtype=x.dtype).unsqueeze(1)
        return torch.cat([x, ones + pos], dim=1)


class ExpandToShape(torch.nn.Module):
    """``expand`` a vector to the dynamic shape of another input."""

    _inputs = [I(T(3, 4), T(1, 4)), I(T(5, 4), T(1, 4))]
    _dynamic = ({0: B}, None)

    def forward(self, x, y):
        return y.expand(x.shape[0], -1) * x
