"""Cases about dtypes, weights (parameters, buffers, constants), submodules and custom ops."""

from __future__ import annotations

import torch
from onnxscript import opset18 as op

from .case import I, T

B = "batch"


@torch.library.custom_op("fx2onnx_zoo::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """A custom op: ``x + alpha * y``."""
    return x + alpha * y


@scaled_add.register_fake
def _scaled_add_fake(x, y, alpha):
    return torch.empty_like(x)


@torch.library.custom_op("fx2onnx_zoo::min_max", mutates_args=())
def min_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A custom op with two outputs: the min and the max of each row."""
    return x.min(dim=1).values, x.max(dim=1).values


@min_max.register_fake
def _min_max_fake(x):
    return x.new_empty(x.shape[:1]), x.new_empty(x.shape[:1])


class Int64Arithmetic(torch.nn.Module):
    """int64 tensors: product, floor division and remainder."""

    _inputs = [
        I(T(3, 4, dtype=torch.int64), T(3, 4, dtype=torch.int64, low=1)),
        I(T(5, 4, dtype=torch.int64), T(5, 4, dtype=torch.int64, low=1)),
    ]
    _dynamic = ({0: B}, {0: B})

    def forward(self, x, y):
        return x * y + x // y - x % y


class BoolLogic(torch.nn.Module):
    """bool tensors: and, or, not, xor."""

    _inputs = [
        I(T(3, 4, dtype=torch.bool), T(3, 4, dtype=torch.bool)),
        I(T(5, 4, dtype=torch.bool), T(5, 4, dtype=torch.bool)),
    ]
    _dynamic = ({0: B}, {0: B})

    def forward(self, x, y):
        return (x & ~y) | (x ^ y)


class CastIntFloat(torch.nn.Module):
    """Casts: float -> int64 -> float, and a comparison to bool."""

    _inputs = [I(T(3, 4) * 10), I(T(5, 4) * 10)]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x.to(torch.int64).to(torch.float32), x > 0


class Float16Matmul(torch.nn.Module):
    """float16 inputs and weights (tolerance 1e-2)."""

    _inputs = [I(T(3, 4, dtype=torch.float16)), I(T(5, 4, dtype=torch.float16))]
    _dynamic = ({0: B},)
    _atol = 1e-2

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3).to(torch.float16)

    def forward(self, x):
        return self.linear(x).relu()


class BFloat16Add(torch.nn.Module):
    """bfloat16 inputs (tolerance 1e-2)."""

    _inputs = [
        I(T(3, 4, dtype=torch.bfloat16), T(3, 4, dtype=torch.bfloat16)),
        I(T(5, 4, dtype=torch.bfloat16), T(5, 4, dtype=torch.bfloat16)),
    ]
    _dynamic = ({0: B}, {0: B})
    _atol = 1e-2

    def forward(self, x, y):
        return x + y * 2


class MixedPrecision(torch.nn.Module):
    """A float16 input upcast to float32 before a reduction."""

    _inputs = [I(T(3, 4, dtype=torch.float16)), I(T(5, 4, dtype=torch.float16))]
    _dynamic = ({0: B},)
    _atol = 1e-3

    def forward(self, x):
        return x.float().softmax(dim=1)


class ComplexInput(torch.nn.Module):
    """A complex64 input reduced to its modulus."""

    _inputs = [I(T(3, 4, dtype=torch.complex64)), I(T(5, 4, dtype=torch.complex64))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x.abs()


class ComplexIntermediate(torch.nn.Module):
    """Complex numbers inside the graph only (polar form, real part out)."""

    _inputs = [I(T(3, 4), T(3, 4)), I(T(5, 4), T(5, 4))]
    _dynamic = ({0: B}, {0: B})

    def forward(self, r, theta):
        z = torch.polar(r.abs(), theta)
        return (z * z).real


class Buffer(torch.nn.Module):
    """A persistent buffer used as a constant."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.arange(4, dtype=torch.float32))

    def forward(self, x):
        return x * self.scale


class NonPersistentBuffer(torch.nn.Module):
    """A non-persistent buffer (not in the state dict)."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.full((4,), 0.5), persistent=False)

    def forward(self, x):
        return x - self.offset


class TensorAttribute(torch.nn.Module):
    """A plain tensor attribute (neither parameter nor buffer): a lifted constant."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def __init__(self):
        super().__init__()
        self.table = torch.tensor([1.0, -1.0, 2.0, -2.0])

    def forward(self, x):
        return x * self.table


class TensorCreatedInForward(torch.nn.Module):
    """A constant tensor created in ``forward`` with ``torch.tensor``."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return x + torch.tensor([0.1, 0.2, 0.3, 0.4])


class Submodules(torch.nn.Module):
    """A sequence of submodules: linear, layer norm, GELU, linear."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.GELU(), torch.nn.Linear(8, 2)
        )

    def forward(self, x):
        return self.net(x)


class SharedSubmodule(torch.nn.Module):
    """The same submodule called twice."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(self.linear(x).tanh())


class ModuleListLoop(torch.nn.Module):
    """A loop over a ModuleList of layers with residual connections."""

    _inputs = [I(T(2, 3, 4)), I(T(4, 5, 4))]
    _dynamic = ({0: B, 1: "seq"},)

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x).relu()
        return x


class DropoutEval(torch.nn.Module):
    """Dropout in eval mode: the identity, no random op left."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def __init__(self):
        super().__init__()
        self.dropout = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.dropout(x) * 2


class RReLUEval(torch.nn.Module):
    """RReLU in eval mode: a random op which becomes a fixed leaky relu."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        return torch.nn.functional.rrelu(x, training=False)


class RandomShapeOnly(torch.nn.Module):
    """A random tensor whose values do not reach the output (only its shape)."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        noise = torch.rand_like(x)
        return x + noise.shape[1]


class BatchNormEval(torch.nn.Module):
    """BatchNorm in eval mode with its running statistics."""

    _inputs = [I(T(2, 3, 5, 5)), I(T(4, 3, 6, 6))]
    _dynamic = ({0: B, 2: "h", 3: "w"},)

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.bn.running_mean.uniform_(-1, 1)
        self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return self.bn(self.conv(x)).relu()


class EmbeddingIds(torch.nn.Module):
    """int64 ids through an embedding, then a mean over the sequence."""

    _inputs = [I(T(2, 3, dtype=torch.int64, high=10)), I(T(4, 7, dtype=torch.int64, high=10))]
    _dynamic = ({0: B, 1: "seq"},)

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        return self.embedding(ids).mean(dim=1)


class Attention(torch.nn.Module):
    """``scaled_dot_product_attention`` with a causal mask."""

    _inputs = [
        I(T(2, 2, 3, 8), T(2, 2, 3, 8), T(2, 2, 3, 8)),
        I(T(3, 2, 5, 8), T(3, 2, 5, 8), T(3, 2, 5, 8)),
    ]
    _dynamic = ({0: B, 2: "seq"}, {0: B, 2: "seq"}, {0: B, 2: "seq"})

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


class CustomOp(torch.nn.Module):
    """A custom op (``torch.library.custom_op``) with a fake implementation: exporters need a
    converter."""

    _inputs = [I(T(3, 4), T(3, 4)), I(T(5, 4), T(5, 4))]
    _dynamic = ({0: B}, {0: B})

    def forward(self, x, y):
        return scaled_add(x, y, 0.5)


def _convert_scaled_add(ctx, node, x, y, alpha):
    """fx2onnx converter of ``fx2onnx_zoo::scaled_add``."""
    return ctx.op.Add(x, ctx.op.Mul(y, ctx.const(alpha, ctx.dtype(y))))


def _onnxscript_scaled_add(x, y, alpha: float = 1.0):
    """torch.onnx translation of ``fx2onnx_zoo::scaled_add`` (onnxscript ops)."""
    return op.Add(x, op.Mul(y, op.CastLike(alpha, y)))


class CustomOpWithConverters(torch.nn.Module):
    """The same custom op, this time with a converter given to each ONNX exporter."""

    _inputs = [I(T(3, 4), T(3, 4)), I(T(5, 4), T(5, 4))]
    _dynamic = ({0: B}, {0: B})
    _converters = {"fx2onnx_zoo::scaled_add": _convert_scaled_add}
    _translations = {torch.ops.fx2onnx_zoo.scaled_add.default: _onnxscript_scaled_add}

    def forward(self, x, y):
        return scaled_add(x, y, 0.5)


class CustomOpTwoOutputs(torch.nn.Module):
    """A custom op returning two tensors."""

    _inputs = [I(T(3, 4)), I(T(5, 4))]
    _dynamic = ({0: B},)

    def forward(self, x):
        low, high = min_max(x)
        return high - low
