"""Cases about in-place operations, data-dependent shapes and dimensions of size 0 or 1."""

from __future__ import annotations

import torch

from .case import I, T

B = "batch"


class SetItemLastAxis(torch.nn.Module):
    """``x[..., 0] = y``: assignment of a slice along the last axis."""

    _inputs = [I(T(3, 4), T(3)), I(T(5, 4), T(5))]
    _dynamic = ({0: B}, {0: B})

    def forward(self, x, y):
        x = x.clone()
        x[..., 0] = y
        return x


class SetItemIndexTensor(torch.nn.Module):
    """``x[:, idx] = y``: assignment of columns given by an index tensor."""

    _inputs = [
        I(T(3, 4), torch.tensor([0, 2]), T(3, 2)),
        I(T(5, 4), torch.tensor([1, 3]), T(5, 2)),
    ]
    _dynamic = ({0: B}, None, {0: B})

    def forward(self, x, idx, y):
        x = x.clone()
        x[:, idx] = y
        return x


class SetItemSliceConstant(torch.nn.Module):
    """``x[:, 1:3] = 0``: a slice set to a constant."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        x = x.clone()
        x[:, 1:3] = 0
        return x


class AddInplace(torch.nn.Module):
    """``add_`` on an intermediate result."""

    _inputs = [I(T(3, 4), T(3, 4)), I(T(5, 4), T(5, 4))]
    _dynamic = ({0: B}, {0: B})

    def forward(self, x, y):
        z = x * 2
        z.add_(y)
        return z


class AddInplaceOnInput(torch.nn.Module):
    """``add_`` on a user input, which is returned: ONNX has no in-place state."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        x.add_(1)
        return x * 2


class InplaceOnView(torch.nn.Module):
    """``mul_`` on a view: the base tensor sees the change."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        x = x.clone()
        x[:, :2].mul_(10)
        return x


class CopyInplace(torch.nn.Module):
    """``copy_`` into a slice of a new tensor."""

    _inputs = [I(T(3, 4), T(3, 2)), I(T(5, 4), T(5, 2))]
    _dynamic = ({0: B}, {0: B})

    def forward(self, x, y):
        out = torch.zeros_like(x)
        out[:, 2:].copy_(y)
        return out + x


class MaskedFillInplace(torch.nn.Module):
    """``masked_fill_`` with a mask computed from the values."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        x = x.clone()
        x.masked_fill_(x < 0, 0.0)
        return x


class MaskedAssign(torch.nn.Module):
    """``x[x > 0] = 0``: assignment through a boolean mask."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        x = x.clone()
        x[x > 0] = 0
        return x


class IndexPutAccumulate(torch.nn.Module):
    """``index_put_`` with accumulation and repeated indices."""

    _inputs = [
        I(T(4, 3), torch.tensor([0, 1, 1]), T(3, 3)),
        I(T(6, 3), torch.tensor([2, 2, 0, 5]), T(4, 3)),
    ]
    _dynamic = ({0: B}, {0: "n"}, {0: "n"})

    def forward(self, x, idx, values):
        x = x.clone()
        x.index_put_((idx,), values, accumulate=True)
        return x


class ScatterAdd(torch.nn.Module):
    """``scatter_add`` along the first axis."""

    _inputs = [
        I(T(4, 3), torch.tensor([[0, 1, 2], [3, 0, 1]]), T(2, 3)),
        I(T(6, 3), torch.tensor([[5, 1, 2], [3, 0, 1], [0, 0, 0]]), T(3, 3)),
    ]
    _dynamic = ({0: B}, {0: "n"}, {0: "n"})

    def forward(self, x, idx, src):
        return x.scatter_add(0, idx, src)


class BufferMutation(torch.nn.Module):
    """A buffer updated in the forward (a running counter), its new value used."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x):
        self.total.add_(x.sum(dim=0))
        return x + self.total


class Nonzero(torch.nn.Module):
    """``nonzero``: an output whose first dimension depends on the values."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return torch.nonzero(x > 0)


class NonzeroThenGather(torch.nn.Module):
    """Indices from ``nonzero`` used to select rows."""

    _inputs = [I(T(6, 4)), I(T(8, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        rows = torch.nonzero(x[:, 0] > 0)[:, 0]
        return x[rows] * 2


class Unique(torch.nn.Module):
    """``unique`` (sorted) of integer values."""

    _inputs = [I(T(3, 4, dtype=torch.int64)), I(T(5, 4, dtype=torch.int64))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return torch.unique(x)


class BooleanMaskSelect(torch.nn.Module):
    """``x[mask]``: selection through a boolean mask, a 1-D output of unknown length."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x[x > 0]


class MaskedSelectReduced(torch.nn.Module):
    """A masked selection reduced right away: the output shape is known again."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x[x > 0].sum() + x.mean()


class ItemAsFloat(torch.nn.Module):
    """``item()`` of a 0-d float tensor used as a Python number."""

    _inputs = [I(T(3, 4), torch.tensor(2.0)), I(T(5, 4), torch.tensor(3.0))]
    _dynamic = ({0: B}, None)

    def forward(self, x, scale):
        return x * scale.item()


class ItemAsSize(torch.nn.Module):
    """``item()`` of an int tensor used as the size of a new tensor."""

    _inputs = [I(T(3, 4), torch.tensor(2)), I(T(5, 4), torch.tensor(3))]
    _dynamic = ({0: B}, None)

    def forward(self, x, n):
        size = n.item()
        torch._check_is_size(size)
        torch._check(size <= x.shape[1])
        return x[:, :size] + 1


class TopKFromShape(torch.nn.Module):
    """``topk`` with ``k`` depending on a dynamic dimension."""

    _inputs = [I(T(4, 6)), I(T(6, 6))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return torch.topk(x, k=x.shape[0] // 2, dim=1).values


class DynamicDimOfSizeZero(torch.nn.Module):
    """A dimension marked dynamic whose example size is 0 (torch specializes 0 and 1)."""

    _inputs = [I(T(0, 4)), I(T(3, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x * 2


class DynamicDimOfSizeOne(torch.nn.Module):
    """A dimension marked dynamic whose example size is 1 (torch specializes 0 and 1)."""

    _inputs = [I(T(1, 4)), I(T(3, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x * 2


class SecondInputEmpty(torch.nn.Module):
    """Exported with a non-empty batch, run on an empty one (size 0)."""

    _inputs = [I(T(3, 4)), I(T(0, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x.softmax(dim=1) + x.sum(dim=0)


class BroadcastStaticOne(torch.nn.Module):
    """A static dimension of size 1 broadcast against a dynamic one."""

    _inputs = [I(T(3, 4), T(1, 4)), I(T(5, 4), T(1, 4))]
    _dynamic = ({0: B}, None)

    def forward(self, x, y):
        return x + y
