"""Activation functions: gelu, silu, softplus, elu family, hard* functions, prelu, glu, thresholds.

Simple unary activations (relu, sigmoid, tanh, mish) are in the
table of :mod:`.elementwise`.
"""

from __future__ import annotations

import math

import torch

from ..registry import converter
from ._math import M, erf_value, where
from .precise import expm1

aten = torch.ops.aten


@converter(aten.silu.default)
def convert_silu(ctx, node, x):
    return ctx.op.Mul(x, ctx.op.Sigmoid(x))


@converter(aten.gelu.default)
def convert_gelu(ctx, node, x, approximate="none"):
    dtype = ctx.out_dtype()
    if ctx.opset >= 20 and dtype != torch.float64:
        # onnxruntime expands Gelu into Erf, which has no double kernel
        return ctx.op.Gelu(x, approximate=approximate)
    half = ctx.const(0.5, dtype)
    one = ctx.const(1.0, dtype)
    if approximate == "tanh":
        inner = ctx.op.Mul(
            ctx.const(math.sqrt(2 / math.pi), dtype),
            ctx.op.Add(x, ctx.op.Mul(ctx.const(0.044715, dtype), ctx.op.Mul(x, ctx.op.Mul(x, x)))),
        )
        return ctx.op.Mul(ctx.op.Mul(half, x), ctx.op.Add(one, ctx.op.Tanh(inner)))
    scaled = ctx.op.Div(x, ctx.const(math.sqrt(2.0), dtype))
    # x already has dtype: no Cast before Erf (the optimizer's GELU fusion matches Div, Erf, Add, Mul)
    erf = ctx.op.Erf(scaled) if dtype != torch.float64 else erf_value(ctx, scaled, dtype)
    return ctx.op.Mul(ctx.op.Mul(half, x), ctx.op.Add(one, erf))


@converter(aten.softplus.default)
def convert_softplus(ctx, node, x, beta=1, threshold=20):
    if beta == 1 and threshold >= 20:
        return ctx.op.Softplus(x)
    # torch: x where beta * x > threshold, else log(1 + exp(beta * x)) / beta
    dtype = ctx.out_dtype()
    scaled = ctx.op.Mul(x, ctx.const(float(beta), dtype))
    soft = ctx.op.Div(ctx.op.Softplus(scaled), ctx.const(float(beta), dtype))
    return ctx.op.Where(ctx.op.Greater(scaled, ctx.const(float(threshold), dtype)), x, soft)


@converter(aten.log_sigmoid.default)
def convert_log_sigmoid(ctx, node, x):
    # stable form: min(x, 0) - log(1 + exp(-|x|))
    dtype = ctx.out_dtype()
    one = ctx.const(1.0, dtype)
    tail = ctx.op.Log(ctx.op.Add(one, ctx.op.Exp(ctx.op.Neg(ctx.op.Abs(x)))))
    return ctx.op.Sub(ctx.op.Min(x, ctx.const(0.0, dtype)), tail)


@converter(aten.threshold.default)
def convert_threshold(ctx, node, x, threshold, value):
    dtype = ctx.out_dtype()
    return ctx.op.Where(ctx.op.Greater(x, ctx.as_value(threshold, dtype)), x, ctx.as_value(value, dtype))


@converter(aten.rrelu.default)
def convert_rrelu(ctx, node, x, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    if training:
        raise ctx.error("rrelu in training mode is random and cannot be exported: call model.eval() before exporting.")
    return _leaky_relu(ctx, x, (float(lower) + float(upper)) / 2)


def _leaky_relu(ctx, x, slope: float):
    if ctx.out_dtype() == torch.float64:  # ONNX float attributes are float32: the formula in float64
        v = M.of(ctx, x)
        return where(v > 0.0, v, v * slope).to(torch.float64)
    return ctx.op.LeakyRelu(x, alpha=slope)


def _elu_formula(ctx, x, alpha: float, scale: float, input_scale: float):
    """torch's elu in float64: x * scale for x > 0, else expm1(x * input_scale) * alpha * scale."""
    v = M.of(ctx, x)
    return where(v > 0.0, v * float(scale), expm1(v * float(input_scale)) * (float(alpha) * float(scale))).to(ctx.out_dtype())


@converter(aten.glu.default)
def convert_glu(ctx, node, x, dim=-1):
    first, second = ctx.op.Split(x, axis=int(dim), num_outputs=2, _outputs=2)
    return ctx.op.Mul(first, ctx.op.Sigmoid(second))


@converter(aten.leaky_relu.default)
def convert_leaky_relu(ctx, node, x, negative_slope=0.01):
    return _leaky_relu(ctx, x, float(negative_slope))


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


@converter(aten.elu.default)
def convert_elu(ctx, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    """ONNX Elu / Selu where they say it; otherwise (float64: their float attributes are float32;
    other scales) torch's formula."""
    if ctx.out_dtype() != torch.float64:
        if scale == 1.0 and input_scale == 1.0:
            return ctx.op.Elu(x, alpha=float(alpha))
        if alpha == _SELU_ALPHA and scale == _SELU_SCALE and input_scale == 1.0:
            return ctx.op.Selu(x, alpha=float(alpha), gamma=float(scale))
    return _elu_formula(ctx, x, alpha, scale, input_scale)


@converter(aten.celu.default)
def convert_celu(ctx, node, x, alpha=1.0):
    """ONNX Celu takes float32 only: other dtypes use max(0, x) + min(0, alpha expm1(x / alpha))."""
    dtype = ctx.out_dtype()
    if dtype == torch.float32:
        return ctx.op.Celu(x, alpha=float(alpha))
    v = M.of(ctx, x)
    return (v.maximum(0.0) + (expm1(v / float(alpha)) * float(alpha)).minimum(0.0)).to(dtype)


@converter(aten.selu.default)
def convert_selu(ctx, node, x):
    if ctx.out_dtype() == torch.float64:
        return _elu_formula(ctx, x, _SELU_ALPHA, _SELU_SCALE, 1.0)
    return ctx.op.Selu(x)


@converter(aten.hardsigmoid.default)
def convert_hardsigmoid(ctx, node, x):
    if ctx.out_dtype() == torch.float64:  # torch: min(max(x + 3, 0), 6) / 6, with float64 constants
        return (((M.of(ctx, x) + 3.0).maximum(0.0).minimum(6.0)) / 6.0).to(torch.float64)
    return ctx.op.HardSigmoid(x, alpha=1.0 / 6, beta=0.5)


@converter(aten.hardswish.default)
def convert_hardswish(ctx, node, x):
    if ctx.out_dtype() == torch.float64:  # torch: x * min(max(x + 3, 0), 6) / 6
        v = M.of(ctx, x)
        return (v * (v + 3.0).maximum(0.0).minimum(6.0) / 6.0).to(torch.float64)
    return ctx.op.HardSwish(x)


@converter(aten.hardtanh.default)
def convert_hardtanh(ctx, node, x, min_val=-1.0, max_val=1.0):
    dtype = ctx.out_dtype()
    return ctx.op.Clip(x, ctx.const(min_val, dtype), ctx.const(max_val, dtype))


@converter(aten.relu6.default)
def convert_relu6(ctx, node, x):
    return convert_hardtanh(ctx, node, x, 0.0, 6.0)


@converter(aten.prelu.default)
def convert_prelu(ctx, node, x, weight):
    # weight has one value per channel (axis 1)
    rank = node.args[0].meta["val"].dim()
    if rank >= 2:
        weight = ctx.op.Reshape(weight, ctx.const([-1] + [1] * (rank - 2), torch.int64))
    elif rank == 0:  # a 0-d input keeps its rank: the single weight as a scalar (PRelu broadcasts)
        weight = ctx.op.Reshape(weight, ctx.const([], torch.int64))
    return ctx.op.PRelu(x, weight)
