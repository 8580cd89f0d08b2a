"""Random operators: rand, randn, randint, randperm, their ``*_like`` variants, bernoulli, normal, uniform, exponential.

They map to ONNX's ``RandomUniformLike`` and ``RandomNormalLike``
(no seed: onnxruntime draws new numbers at every run). The values differ from
torch's generator; shapes, dtypes and the distribution are the same. A
``generator`` argument is ignored (ONNX has no generator state).
"""

from __future__ import annotations

import onnx_ir as ir
import torch

from ..builder import onnx_dtype
from ..registry import converter

aten = torch.ops.aten
_I64 = torch.int64
# the dtypes onnxruntime draws in; the others are drawn in float32 and cast (an integer Bernoulli draw too: 0 or 1)
_RANDOM_DTYPES = {torch.float32, torch.float64}  # onnxruntime has no float16 kernel


def _zeros(ctx, shape, dtype: torch.dtype):
    """A zero tensor of ``shape`` (list of ints / values or a shape value) used as a template."""
    shape = ctx.shape_value(shape) if not isinstance(shape, ir.Value) else shape
    return ctx.op.ConstantOfShape(shape, value=ir.tensor(torch.zeros(1, dtype=dtype).numpy()))


def _draw_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype in _RANDOM_DTYPES:
        return dtype
    return torch.float32


def _uniform(ctx, template, dtype: torch.dtype, low: float = 0.0, high: float = 1.0):
    draw = _draw_dtype(dtype)
    u = ctx.op.RandomUniformLike(template, dtype=onnx_dtype(draw), low=float(low), high=float(high))
    return u, draw


def _normal(ctx, template, dtype: torch.dtype, mean: float = 0.0, scale: float = 1.0):
    draw = _draw_dtype(dtype)
    return ctx.op.RandomNormalLike(template, dtype=onnx_dtype(draw), mean=float(mean), scale=float(scale)), draw


@converter(aten.rand.default, aten.rand.generator)
def convert_rand(ctx, node, size, **kwargs):
    dtype = ctx.out_dtype()
    u, _ = _uniform(ctx, _zeros(ctx, list(size), torch.float32), dtype)
    return ctx.cast(u, dtype)


@converter(aten.randn.default, aten.randn.generator)
def convert_randn(ctx, node, size, **kwargs):
    dtype = ctx.out_dtype()
    n, _ = _normal(ctx, _zeros(ctx, list(size), torch.float32), dtype)
    return ctx.cast(n, dtype)


@converter(aten.rand_like.default, aten.rand_like.generator)
def convert_rand_like(ctx, node, x, **kwargs):
    dtype = ctx.out_dtype()
    u, _ = _uniform(ctx, x, dtype)
    return ctx.cast(u, dtype)


@converter(aten.randn_like.default, aten.randn_like.generator)
def convert_randn_like(ctx, node, x, **kwargs):
    dtype = ctx.out_dtype()
    n, _ = _normal(ctx, x, dtype)
    return ctx.cast(n, dtype)


#: the bound of the integers a float32 draw reaches exactly (its 24 bits of mantissa)
_FLOAT32_EXACT = 2 ** 24


def _randint(ctx, template, low, high):
    """Integers uniform in [low, high): floor(low + u * (high - low)), drawn in float32 when both bounds are
    integers known at export within 2**24 (exact there; onnxruntime-web has no float64), in float64 otherwise."""
    dtype = ctx.out_dtype()
    small = all(isinstance(b, int) and abs(b) <= _FLOAT32_EXACT for b in (low, high))
    draw = torch.float32 if small else torch.float64
    u = ctx.op.RandomUniformLike(template, dtype=onnx_dtype(draw), low=0.0, high=1.0)
    lo, hi = ctx.as_value(low, draw), ctx.as_value(high, draw)
    drawn = ctx.op.Floor(ctx.op.Add(lo, ctx.op.Mul(u, ctx.op.Sub(hi, lo))))
    drawn = ctx.op.Min(drawn, ctx.op.Sub(hi, ctx.const(1.0, draw)))  # u close to 1 must not reach high
    return ctx.cast(drawn, dtype)


@converter(aten.randint.default, aten.randint.generator)
def convert_randint(ctx, node, high, size, **kwargs):
    return _randint(ctx, _zeros(ctx, list(size), torch.float32), 0, high)


@converter(aten.randint.low, aten.randint.low_generator)
def convert_randint_low(ctx, node, low, high, size, **kwargs):
    return _randint(ctx, _zeros(ctx, list(size), torch.float32), low, high)


@converter(aten.randint_like.default, aten.randint_like.generator, aten.randint_like.Tensor, aten.randint_like.Tensor_generator)
def convert_randint_like(ctx, node, x, high, **kwargs):
    return _randint(ctx, x, 0, high)


@converter(aten.randint_like.low_dtype, aten.randint_like.low_generator_dtype)
def convert_randint_like_low(ctx, node, x, low, high, **kwargs):
    return _randint(ctx, x, low, high)


@converter(aten.randperm.default, aten.randperm.generator)
def convert_randperm(ctx, node, n, **kwargs):
    """The order that sorts n uniform numbers: a uniformly random permutation."""
    count = ctx.scalar_1d(n)
    u = ctx.op.RandomUniformLike(_zeros(ctx, count, torch.float32), dtype=onnx_dtype(torch.float32))
    _, order = ctx.op.TopK(u, count, axis=0, largest=1, sorted=1, _outputs=2)
    return ctx.cast(order, ctx.out_dtype())


def _bernoulli(ctx, probs):
    """1 where a uniform draw falls below p (onnxruntime's Bernoulli kernel draws 1 with probability 1 - p)."""
    dtype = ctx.out_dtype()
    draw = _draw_dtype(dtype)
    probs = ctx.cast(probs, draw)
    u = ctx.op.RandomUniformLike(probs, dtype=onnx_dtype(draw), low=0.0, high=1.0)
    return ctx.cast(ctx.op.Less(u, probs), dtype)


@converter(aten.bernoulli.default)
def convert_bernoulli(ctx, node, p, generator=None):
    return _bernoulli(ctx, p)


@converter(aten.bernoulli.p, aten.bernoulli.Tensor)
def convert_bernoulli_p(ctx, node, x, p, generator=None):
    draw = _draw_dtype(ctx.out_dtype())
    return _bernoulli(ctx, ctx.op.Expand(ctx.as_value(p, draw), ctx.op.Shape(x)))


@converter(aten.uniform.default)
def convert_uniform(ctx, node, x, low=0.0, high=1.0, generator=None):
    dtype = ctx.out_dtype()
    u, _ = _uniform(ctx, x, dtype, low, high)
    return ctx.cast(u, dtype)


def _shifted_normal(ctx, template, mean, std):
    dtype = ctx.out_dtype()
    draw = _draw_dtype(dtype)
    n, _ = _normal(ctx, template, dtype)
    y = ctx.op.Add(ctx.op.Mul(n, ctx.as_value(std, draw)), ctx.as_value(mean, draw))
    return ctx.cast(y, dtype)


@converter(aten.normal.Tensor_float, aten.normal.Tensor_Tensor)
def convert_normal_tensor(ctx, node, mean, std=1.0, generator=None):
    dtype = _draw_dtype(ctx.out_dtype())
    template = mean if not isinstance(std, ir.Value) else ctx.op.Add(ctx.cast(mean, dtype), ctx.cast(std, dtype))
    return _shifted_normal(ctx, ctx.op.Expand(ctx.const(0.0, dtype), ctx.op.Shape(template)), ctx.cast(mean, dtype), std)


@converter(aten.normal.float_Tensor)
def convert_normal_float_tensor(ctx, node, mean, std, generator=None):
    return _shifted_normal(ctx, std, mean, ctx.cast(std, _draw_dtype(ctx.out_dtype())))


@converter(aten.normal.float_float)
def convert_normal_float_float(ctx, node, mean, std, size, **kwargs):
    return _shifted_normal(ctx, _zeros(ctx, list(size), torch.float32), mean, std)


@converter(aten.exponential.default)
def convert_exponential(ctx, node, x, lambd=1.0, generator=None):
    """``-log(1 - u) / lambd``: exponential draws of rate ``lambd`` from uniform ones (inverse transform)."""
    dtype = ctx.out_dtype()
    u, draw = _uniform(ctx, x, dtype)
    y = ctx.op.Div(ctx.op.Neg(ctx.op.Log(ctx.op.Sub(ctx.const(1.0, draw), u))), ctx.const(float(lambd), draw))
    return ctx.cast(y, dtype)
