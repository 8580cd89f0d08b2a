"""Elementwise operators: arithmetic, comparisons, logic, activations."""

from __future__ import annotations

import math

import torch

from ..registry import converter
from ._common import cast_all, input_rank, integer_floor_div, result_dtype
from ._math import atan2_value, erf_value, erfc_value

aten = torch.ops.aten


def _binary(ctx, op_type: str, a, b):
    dtype = ctx.out_dtype()
    x, y = cast_all(ctx, [a, b], dtype)
    return getattr(ctx.op, op_type)(x, y)


@converter(aten.add.Tensor, aten.add.Scalar)
def convert_add(ctx, node, a, b, alpha=1):
    if alpha != 1:
        b = ctx.op.Mul(ctx.as_value(b, ctx.out_dtype()), ctx.as_value(alpha, ctx.out_dtype()))
    if ctx.out_dtype() == torch.bool:
        return ctx.op.Or(*cast_all(ctx, [a, b], torch.bool))
    return _binary(ctx, "Add", a, b)


@converter(aten.sub.Tensor, aten.sub.Scalar)
def convert_sub(ctx, node, a, b, alpha=1):
    if alpha != 1:
        b = ctx.op.Mul(ctx.as_value(b, ctx.out_dtype()), ctx.as_value(alpha, ctx.out_dtype()))
    return _binary(ctx, "Sub", a, b)


@converter(aten.rsub.Scalar, aten.rsub.Tensor)
def convert_rsub(ctx, node, a, b, alpha=1):
    return convert_sub(ctx, node, b, a, alpha)


@converter(aten.mul.Tensor, aten.mul.Scalar)
def convert_mul(ctx, node, a, b):
    if ctx.out_dtype() == torch.bool:
        return ctx.op.And(*cast_all(ctx, [a, b], torch.bool))
    return _binary(ctx, "Mul", a, b)


@converter(
    aten.div.Tensor,
    aten.div.Scalar,
    aten.div.Tensor_mode,
    aten.div.Scalar_mode,
    aten.true_divide.Tensor,
    aten.true_divide.Scalar,
)
def convert_div(ctx, node, a, b, rounding_mode=None):
    dtype = ctx.out_dtype()
    if rounding_mode is None:
        return _binary(ctx, "Div", a, b)
    if dtype.is_floating_point:
        q = _binary(ctx, "Div", a, b)
        return ctx.op.Floor(q) if rounding_mode == "floor" else _trunc(ctx, q)
    # onnxruntime's integer Div and Mod run on int32 and int64: narrower types go through int32
    wide = dtype if dtype in (torch.int32, torch.int64) else torch.int32
    x, y = cast_all(ctx, [a, b], wide)
    q = integer_floor_div(ctx, x, y) if rounding_mode == "floor" else ctx.op.Div(x, y)
    return ctx.cast(q, dtype)



def _trunc(ctx, x):
    # trunc(x) = sign(x) * floor(|x|)
    return ctx.op.Mul(ctx.op.Sign(x), ctx.op.Floor(ctx.op.Abs(x)))


def _is_integral(ctx) -> bool:
    """The node's result is an integer or bool tensor (floor, round... of an integer: itself)."""
    dtype = ctx.out_dtype()
    return not dtype.is_floating_point and not dtype.is_complex


@converter(aten.trunc.default, aten.fix.default)
def convert_trunc(ctx, node, x):
    if _is_integral(ctx):
        return ctx.op.Identity(x)
    return _trunc(ctx, x)


@converter(aten.floor_divide.default, aten.floor_divide.Scalar)
def convert_floor_divide(ctx, node, a, b):
    return convert_div(ctx, node, a, b, rounding_mode="floor")


@converter(aten.remainder.Tensor, aten.remainder.Scalar)
def convert_remainder(ctx, node, a, b):
    dtype = ctx.out_dtype()
    x, y = cast_all(ctx, [a, b], dtype)
    if dtype.is_floating_point:
        # python-style modulo: x - floor(x / y) * y
        return ctx.op.Sub(x, ctx.op.Mul(ctx.op.Floor(ctx.op.Div(x, y)), y))
    return ctx.op.Mod(x, y, fmod=0)


def _any_nonzero(ctx, value, zero):
    """A 0-d bool: some element of ``value`` is not 0 (False for an empty tensor)."""
    i64 = torch.int64
    flags = ctx.op.Reshape(ctx.cast(ctx.op.Not(ctx.op.Equal(value, zero)), i64), ctx.const([-1], i64))
    return ctx.cast(ctx.op.ReduceMax(ctx.op.Concat(flags, ctx.const([0], i64), axis=0), keepdims=0), torch.bool)


def _gcd(ctx, node, a, b):
    """Euclid's algorithm on every pair at once: a Loop of (a, b) -> (b, a mod b) while some b != 0."""
    dtype = ctx.out_dtype()
    a, b = (ctx.op.Abs(v) for v in cast_all(ctx, [a, b], dtype))
    a, b = ctx.op.Expand(a, ctx.op.Shape(b)), ctx.op.Expand(b, ctx.op.Shape(a))  # one shape for both
    zero, one = ctx.const(0, dtype), ctx.const(1, dtype)
    sub = ctx.builder.subgraph(f"{node.name}_euclid")
    sub.add_input(f"{node.name}_iter", torch.int64, [])
    sub.add_input(f"{node.name}_cond", torch.bool, [])
    x, y = sub.add_input(f"{node.name}_a", dtype, None), sub.add_input(f"{node.name}_b", dtype, None)
    body = type(ctx)(sub, ctx.interpreter, node)
    nonzero = body.op.Not(body.op.Equal(y, zero))
    rest = body.op.Where(nonzero, body.op.Mod(x, body.op.Where(nonzero, y, one), fmod=0), zero)
    new_x = body.op.Where(nonzero, y, x)
    for value in (new_x, rest):
        value.dtype = x.dtype
    for value in (_any_nonzero(body, rest, zero), new_x, rest):
        sub.add_output(value)
    result, _ = ctx.op.Loop(None, _any_nonzero(ctx, b, zero), a, b, body=sub.to_graph(), _outputs=2)
    return result


@converter(aten.gcd.default)
def convert_gcd(ctx, node, a, b):
    return _gcd(ctx, node, a, b)


@converter(aten.lcm.default)
def convert_lcm(ctx, node, a, b):
    """|a * b| / gcd(a, b), 0 when one of them is 0 (as torch)."""
    dtype = ctx.out_dtype()
    x, y = (ctx.op.Abs(v) for v in cast_all(ctx, [a, b], dtype))
    g = _gcd(ctx, node, a, b)
    zero = ctx.const(0, dtype)
    safe = ctx.op.Where(ctx.op.Equal(g, zero), ctx.const(1, dtype), g)
    return ctx.op.Where(ctx.op.Equal(g, zero), zero, ctx.op.Mul(ctx.op.Div(x, safe), y))


@converter(aten.fmod.Tensor, aten.fmod.Scalar)
def convert_fmod(ctx, node, a, b):
    return ctx.op.Mod(*cast_all(ctx, [a, b], ctx.out_dtype()), fmod=1)


@converter(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def convert_pow(ctx, node, a, b):
    dtype = ctx.out_dtype()
    if isinstance(b, (int, float)) and b in (1, 2, 3, -1, -2) and dtype.is_floating_point:
        # torch's own products for these exponents (onnxruntime's Pow calls std::pow per element:
        # 9% of a Llama's backward, where pow(x, 2)'s gradient is 2 * pow(x, 1.0))
        x = ctx.as_value(a, dtype)
        if b == 1:
            return ctx.op.Identity(x)
        if b == -1:
            return ctx.op.Reciprocal(x)
        square = ctx.op.Mul(x, x)
        return ctx.op.Mul(square, x) if b == 3 else (square if b == 2 else ctx.op.Reciprocal(square))
    if isinstance(b, (int, float)) and b == 0.5:
        return ctx.op.Sqrt(ctx.as_value(a, dtype))
    return _binary(ctx, "Pow", a, b)


@converter(aten.minimum.default, aten.min.other)
def convert_minimum(ctx, node, a, b):
    return _binary(ctx, "Min", a, b)


@converter(aten.maximum.default, aten.max.other)
def convert_maximum(ctx, node, a, b):
    return _binary(ctx, "Max", a, b)


def _nan_ignoring(op_type: str):
    def convert_nan_ignoring(ctx, node, a, b):
        # fmax / fmin: the other value where one is NaN (Max / Min propagate NaN)
        dtype = ctx.out_dtype()
        x, y = cast_all(ctx, [a, b], dtype)
        out = getattr(ctx.op, op_type)(x, y)
        if not dtype.is_floating_point:
            return out
        return ctx.op.Where(ctx.op.IsNaN(x), y, ctx.op.Where(ctx.op.IsNaN(y), x, out))

    return convert_nan_ignoring


converter(aten.fmax.default)(_nan_ignoring("Max"))
converter(aten.fmin.default)(_nan_ignoring("Min"))


_UNARY = {
    aten.neg.default: "Neg",
    aten.abs.default: "Abs",
    aten.exp.default: "Exp",
    aten.log.default: "Log",
    aten.sqrt.default: "Sqrt",
    aten.sin.default: "Sin",
    aten.cos.default: "Cos",
    aten.tanh.default: "Tanh",
    aten.sigmoid.default: "Sigmoid",
    aten.relu.default: "Relu",
    aten.floor.default: "Floor",
    aten.ceil.default: "Ceil",
    aten.sign.default: "Sign",
    aten.reciprocal.default: "Reciprocal",
    aten.bitwise_not.default: "Not",
    aten.logical_not.default: "Not",
    aten.isnan.default: "IsNaN",
    aten.mish.default: "Mish",
}


def _make_unary(op_type: str):
    def convert_unary(ctx, node, x, *args):
        dtype = ctx.out_dtype()
        if op_type == "Not":
            if dtype != torch.bool:
                return ctx.op.BitwiseNot(x)
            return ctx.op.Not(ctx.cast(x, torch.bool))
        if op_type in ("IsNaN",):
            return ctx.op.IsNaN(x)
        if op_type in ("Floor", "Ceil") and _is_integral(ctx):
            return ctx.op.Identity(x)  # exact for every int64 (no float64 detour)
        if op_type in ("Sign", "Abs", "Neg", "Relu") or dtype.is_floating_point:
            return getattr(ctx.op, op_type)(ctx.cast(x, dtype) if op_type not in ("Sign",) else x)
        # float ops on integer inputs (torch promotes to float)
        return getattr(ctx.op, op_type)(ctx.cast(x, dtype))

    convert_unary.__name__ = f"convert_{op_type.lower()}"
    return convert_unary


for _target, _op in _UNARY.items():
    converter(_target)(_make_unary(_op))


@converter(aten.rsqrt.default)
def convert_rsqrt(ctx, node, x):
    return ctx.op.Reciprocal(ctx.op.Sqrt(ctx.cast(x, ctx.out_dtype())))


def _log_base(base: int):
    def convert_log_base(ctx, node, x):
        x = ctx.cast(x, ctx.out_dtype())
        return ctx.op.Div(ctx.op.Log(x), ctx.const(math.log(base), ctx.out_dtype()))

    return convert_log_base


converter(aten.log2.default)(_log_base(2))
converter(aten.log10.default)(_log_base(10))


@converter(aten.exp2.default)
def convert_exp2(ctx, node, x):
    x = ctx.cast(x, ctx.out_dtype())
    return ctx.op.Pow(ctx.const(2.0, ctx.out_dtype()), x)


@converter(aten.round.default)
def convert_round(ctx, node, x):
    if _is_integral(ctx):
        return ctx.op.Identity(x)
    return ctx.op.Round(x)


@converter(aten.round.decimals)
def convert_round_decimals(ctx, node, x, decimals=0):
    scale = ctx.const(10.0**decimals, ctx.out_dtype())
    return ctx.op.Div(ctx.op.Round(ctx.op.Mul(x, scale)), scale)


@converter(aten.isinf.default)
def convert_isinf(ctx, node, x):
    return ctx.op.IsInf(x)


@converter(aten.isfinite.default)
def convert_isfinite(ctx, node, x):
    return ctx.op.Not(ctx.op.Or(ctx.op.IsInf(x), ctx.op.IsNaN(x)))


@converter(aten.logit.default, aten.special_logit.default)
def convert_logit(ctx, node, x, eps=None):
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)
    if eps is not None:
        x = ctx.op.Clip(x, ctx.const(eps, dtype), ctx.const(1 - eps, dtype))
    return ctx.op.Log(ctx.op.Div(x, ctx.op.Sub(ctx.const(1.0, dtype), x)))


@converter(aten.clamp.default, aten.clamp.Tensor, aten.clip.default, aten.clip.Tensor)
def convert_clamp(ctx, node, x, min=None, max=None):
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)

    def scalar(v):
        return v is None or isinstance(v, (int, float))

    if scalar(min) and scalar(max):
        lo = None if min is None else ctx.const(min, dtype)
        hi = None if max is None else ctx.const(max, dtype)
        return ctx.op.Clip(x, lo, hi)
    # tensor bounds broadcast: Max / Min
    if min is not None:
        x = ctx.op.Max(x, ctx.as_value(min, dtype))
    if max is not None:
        x = ctx.op.Min(x, ctx.as_value(max, dtype))
    return x


@converter(aten.clamp_min.default, aten.clamp_min.Tensor)
def convert_clamp_min(ctx, node, x, min):
    return convert_clamp(ctx, node, x, min=min)


@converter(aten.clamp_max.default, aten.clamp_max.Tensor)
def convert_clamp_max(ctx, node, x, max):
    return convert_clamp(ctx, node, x, max=max)


def _compare(op_type: str, negate: bool = False):
    def convert_compare(ctx, node, a, b):
        dtype = result_dtype(*node.args[:2])
        x, y = cast_all(ctx, [a, b], dtype)
        out = getattr(ctx.op, op_type)(x, y)
        return ctx.op.Not(out) if negate else out

    convert_compare.__name__ = f"convert_{op_type.lower()}{'_not' if negate else ''}"
    return convert_compare


converter(aten.eq.Tensor, aten.eq.Scalar)(_compare("Equal"))
converter(aten.ne.Tensor, aten.ne.Scalar)(_compare("Equal", negate=True))
converter(aten.lt.Tensor, aten.lt.Scalar)(_compare("Less"))
converter(aten.le.Tensor, aten.le.Scalar)(_compare("LessOrEqual"))
converter(aten.gt.Tensor, aten.gt.Scalar)(_compare("Greater"))
converter(aten.ge.Tensor, aten.ge.Scalar)(_compare("GreaterOrEqual"))


def _logical(op_type: str):
    def convert_logical(ctx, node, a, b):
        return getattr(ctx.op, op_type)(*cast_all(ctx, [a, b], torch.bool))

    return convert_logical


converter(aten.logical_and.default)(_logical("And"))
converter(aten.logical_or.default)(_logical("Or"))
converter(aten.logical_xor.default)(_logical("Xor"))


def _bitwise(bool_op: str, int_op: str):
    def convert_bitwise(ctx, node, a, b):
        dtype = ctx.out_dtype()
        x, y = cast_all(ctx, [a, b], dtype)
        return getattr(ctx.op, bool_op if dtype == torch.bool else int_op)(x, y)

    return convert_bitwise


converter(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)(_bitwise("And", "BitwiseAnd"))
converter(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)(_bitwise("Or", "BitwiseOr"))
converter(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)(_bitwise("Xor", "BitwiseXor"))


@converter(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def convert_where(ctx, node, cond, a, b):
    dtype = ctx.out_dtype()
    x, y = cast_all(ctx, [a, b], dtype)
    return ctx.op.Where(ctx.cast(ctx.as_value(cond), torch.bool), x, y)


@converter(aten.atan2.default)
def convert_atan2(ctx, node, y, x):
    dtype = ctx.out_dtype()
    y, x = cast_all(ctx, [y, x], dtype)
    return atan2_value(ctx, y, x, dtype)


@converter(aten.lerp.Scalar, aten.lerp.Tensor)
def convert_lerp(ctx, node, start, end, weight):
    dtype = ctx.out_dtype()
    s, e, w = cast_all(ctx, [start, end, weight], dtype)
    return ctx.op.Add(s, ctx.op.Mul(w, ctx.op.Sub(e, s)))


def _add_scaled(ctx, x, term, value):
    """x + value * term (addcmul, addcdiv)."""
    if value != 1:
        term = ctx.op.Mul(term, ctx.const(value, ctx.out_dtype()))
    return ctx.op.Add(x, term)


@converter(aten.addcmul.default)
def convert_addcmul(ctx, node, x, t1, t2, value=1):
    return _add_scaled(ctx, x, ctx.op.Mul(t1, t2), value)


@converter(aten.addcdiv.default)
def convert_addcdiv(ctx, node, x, t1, t2, value=1):
    return _add_scaled(ctx, x, ctx.op.Div(t1, t2), value)


converter(aten.__and__.Tensor, aten.__and__.Scalar)(_bitwise("And", "BitwiseAnd"))
converter(aten.__or__.Tensor, aten.__or__.Scalar)(_bitwise("Or", "BitwiseOr"))
converter(aten.__xor__.Tensor, aten.__xor__.Scalar)(_bitwise("Xor", "BitwiseXor"))


@converter(aten.square.default)
def convert_square(ctx, node, x):
    x = ctx.cast(x, ctx.out_dtype())
    return ctx.op.Mul(x, x)


@converter(aten.special_expit.default)
def convert_expit(ctx, node, x):
    return ctx.op.Sigmoid(ctx.cast(x, ctx.out_dtype()))


@converter(aten.erf.default)
def convert_erf(ctx, node, x):
    return erf_value(ctx, x, ctx.out_dtype())


@converter(aten.erfc.default, aten.special_erfc.default)
def convert_erfc(ctx, node, x):
    """erfc computed in float64 (1 - erf would lose every digit of the tail)."""
    return erfc_value(ctx, x, ctx.out_dtype())


@converter(aten.frac.default)
def convert_frac(ctx, node, x):
    return ctx.op.Sub(x, _trunc(ctx, x))


@converter(aten.sgn.default)
def convert_sgn(ctx, node, x):
    return ctx.op.Sign(x)


@converter(aten.signbit.default)
def convert_signbit(ctx, node, x):
    # negative numbers and -0.0: 1 / -0.0 = -inf
    dtype = result_dtype(node.args[0])
    if not dtype.is_floating_point:
        return ctx.op.Less(x, ctx.const(0, dtype))
    return _is_negative(ctx, x, dtype)


@converter(aten.heaviside.default)
def convert_heaviside(ctx, node, x, values):
    dtype = ctx.out_dtype()
    x, values = cast_all(ctx, [x, values], dtype)
    zero = ctx.const(0, dtype)
    step = ctx.cast(ctx.op.Greater(x, zero), dtype)
    return ctx.op.Where(ctx.op.Equal(x, zero), values, step)


@converter(aten.copysign.Tensor, aten.copysign.Scalar)
def convert_copysign(ctx, node, a, b):
    dtype = ctx.out_dtype()
    a, b = cast_all(ctx, [a, b], dtype)
    negative = _is_negative(ctx, b, dtype)
    magnitude = ctx.op.Abs(a)
    return ctx.op.Where(negative, ctx.op.Neg(magnitude), magnitude)


def _is_negative(ctx, x, dtype):
    zero = ctx.const(0.0, dtype)
    return ctx.op.Or(ctx.op.Less(x, zero), ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Less(ctx.op.Reciprocal(x), zero)))


@converter(aten.xlogy.Tensor, aten.xlogy.Scalar_Other, aten.xlogy.Scalar_Self)
def convert_xlogy(ctx, node, x, y):
    dtype = ctx.out_dtype()
    x, y = cast_all(ctx, [x, y], dtype)
    product = ctx.op.Mul(x, ctx.op.Log(y))
    zero = ctx.const(0.0, dtype)
    # 0 * log(y) = 0 unless y is NaN
    return ctx.op.Where(ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Not(ctx.op.IsNaN(y))), zero, product)


@converter(aten.sinc.default)
def convert_sinc(ctx, node, x):
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)
    pix = ctx.op.Mul(x, ctx.const(math.pi, dtype))
    zero = ctx.const(0.0, dtype)
    safe = ctx.op.Where(ctx.op.Equal(pix, zero), ctx.const(1.0, dtype), pix)
    return ctx.op.Where(ctx.op.Equal(pix, zero), ctx.const(1.0, dtype), ctx.op.Div(ctx.op.Sin(safe), safe))


@converter(aten.deg2rad.default)
def convert_deg2rad(ctx, node, x):
    dtype = ctx.out_dtype()
    return ctx.op.Mul(ctx.cast(x, dtype), ctx.const(math.pi / 180.0, dtype))


@converter(aten.rad2deg.default)
def convert_rad2deg(ctx, node, x):
    dtype = ctx.out_dtype()
    return ctx.op.Mul(ctx.cast(x, dtype), ctx.const(180.0 / math.pi, dtype))


@converter(aten.hypot.default)
def convert_hypot(ctx, node, a, b):
    dtype = ctx.out_dtype()
    a, b = cast_all(ctx, [a, b], dtype)
    return ctx.op.Sqrt(ctx.op.Add(ctx.op.Mul(a, a), ctx.op.Mul(b, b)))


@converter(aten.logaddexp.default, aten.logaddexp2.default)
def convert_logaddexp(ctx, node, a, b):
    # max + log(1 + exp(-|a - b|)), in base 2 for logaddexp2
    dtype = ctx.out_dtype()
    a, b = cast_all(ctx, [a, b], dtype)
    base2 = node.target is aten.logaddexp2.default
    if base2:
        ln2 = ctx.const(math.log(2.0), dtype)
        a, b = ctx.op.Mul(a, ln2), ctx.op.Mul(b, ln2)
    top = ctx.op.Max(a, b)
    gap = ctx.op.Neg(ctx.op.Abs(ctx.op.Sub(a, b)))
    out = ctx.op.Add(top, ctx.op.Log(ctx.op.Add(ctx.const(1.0, dtype), ctx.op.Exp(gap))))
    # both -inf (or equal infinities): the gap is NaN, the answer is the max
    out = ctx.op.Where(ctx.op.Equal(a, b), ctx.op.Add(a, ctx.const(math.log(2.0), dtype)), out)
    out = ctx.op.Where(ctx.op.IsInf(top), top, out)
    return ctx.op.Div(out, ln2) if base2 else out


@converter(aten.nan_to_num.default)
def convert_nan_to_num(ctx, node, x, nan=None, posinf=None, neginf=None):
    dtype = ctx.out_dtype()
    if not dtype.is_floating_point:
        return ctx.op.Identity(x)
    info = torch.finfo(dtype)
    x = ctx.op.Where(ctx.op.IsNaN(x), ctx.const(0.0 if nan is None else float(nan), dtype), x)
    x = ctx.op.Where(
        ctx.op.IsInf(x, detect_negative=0), ctx.const(info.max if posinf is None else float(posinf), dtype), x
    )
    return ctx.op.Where(
        ctx.op.IsInf(x, detect_positive=0), ctx.const(info.min if neginf is None else float(neginf), dtype), x
    )


@converter(aten.float_power.Tensor_Scalar, aten.float_power.Tensor_Tensor, aten.float_power.Scalar)
def convert_float_power(ctx, node, a, b):
    return _binary(ctx, "Pow", a, b)


@converter(aten.isclose.default)
def convert_isclose(ctx, node, a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    dtype = result_dtype(*node.args[:2])
    a, b = cast_all(ctx, [a, b], dtype)
    if not dtype.is_floating_point:
        return ctx.op.Equal(a, b)
    gap = ctx.op.Abs(ctx.op.Sub(a, b))
    bound = ctx.op.Add(ctx.const(float(atol), dtype), ctx.op.Mul(ctx.const(float(rtol), dtype), ctx.op.Abs(b)))
    close = ctx.op.Or(ctx.op.Equal(a, b), ctx.op.LessOrEqual(gap, bound))
    if equal_nan:
        close = ctx.op.Or(close, ctx.op.And(ctx.op.IsNaN(a), ctx.op.IsNaN(b)))
    return close


def _shift(left: bool):
    def convert_shift(ctx, node, x, n):
        """Shifts on the two's complement bits as torch does: through uint64 (ONNX's BitShift is
        for unsigned types), a shift by the width or more gives 0 (left) or the sign (right)."""
        dtype = ctx.out_dtype()
        x, n = cast_all(ctx, [x, n], dtype)
        bits = torch.iinfo(dtype).bits
        u64 = torch.uint64
        count = ctx.cast(ctx.op.Min(ctx.op.Max(ctx.cast(n, torch.int64), ctx.const(0, torch.int64)), ctx.const(63, torch.int64)), u64)
        if left:
            shifted = ctx.cast(ctx.op.BitShift(ctx.cast(x, u64), count, direction="LEFT"), dtype)
            too_far = ctx.op.GreaterOrEqual(ctx.cast(n, torch.int64), ctx.const(bits, torch.int64))
            return ctx.op.Where(too_far, ctx.const(0, dtype), shifted)
        if not dtype.is_signed:
            return ctx.cast(ctx.op.BitShift(ctx.cast(x, u64), count, direction="RIGHT"), dtype)
        # arithmetic shift: a negative x is ~((~x) >> n), and ~x = -x - 1 is not negative
        negative = ctx.op.Less(x, ctx.const(0, dtype))
        flipped = ctx.op.Where(negative, ctx.op.Sub(ctx.const(-1, dtype), x), x)
        shifted = ctx.cast(ctx.op.BitShift(ctx.cast(flipped, u64), count, direction="RIGHT"), dtype)
        return ctx.op.Where(negative, ctx.op.Sub(ctx.const(-1, dtype), shifted), shifted)

    return convert_shift


converter(
    aten.__lshift__.Scalar,
    aten.__lshift__.Tensor,
    aten.bitwise_left_shift.Tensor,
    aten.bitwise_left_shift.Tensor_Scalar,
)(_shift(True))
converter(
    aten.__rshift__.Scalar,
    aten.__rshift__.Tensor,
    aten.bitwise_right_shift.Tensor,
    aten.bitwise_right_shift.Tensor_Scalar,
)(_shift(False))


@converter(aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar, aten.isin.Scalar_Tensor)
def convert_isin(ctx, node, elements, test_elements, assume_unique=False, invert=False):
    dtype = result_dtype(*node.args[:2])
    elements, test_elements = cast_all(ctx, [elements, test_elements], dtype)
    flat = ctx.op.Reshape(test_elements, ctx.const([-1], torch.int64))
    hits = ctx.op.Equal(ctx.op.Unsqueeze(elements, ctx.const([-1], torch.int64)), flat)
    # a positive axis: onnxruntime does not reduce an empty tensor along a negative one
    rank = input_rank(ctx)
    # a sum, not a max: the max of no value is not 0 (an empty test set finds nothing)
    found = ctx.cast(
        ctx.op.ReduceSum(ctx.cast(hits, torch.int64), ctx.const([rank], torch.int64), keepdims=0), torch.bool
    )
    return ctx.op.Not(found) if invert else found


@converter(aten.broadcast_tensors.default)
def convert_broadcast_tensors(ctx, node, tensors):
    fakes = [t.meta["val"] for t in node.args[0]]
    rank = max(f.dim() for f in fakes)
    target = list(ctx.val(0).shape)
    if all(isinstance(d, int) for d in target):
        shape = ctx.const([int(d) for d in target], torch.int64)
    else:
        # ranks aligned on the right, then the largest size of every axis (sizes are 1 or equal)
        shapes = []
        for t, f in zip(tensors, fakes):
            s = ctx.op.Shape(t)
            if f.dim() < rank:
                s = ctx.op.Concat(ctx.const([1] * (rank - f.dim()), torch.int64), s, axis=0)
            shapes.append(s)
        shape = shapes[0] if len(shapes) == 1 else ctx.op.Max(*shapes)
    return [ctx.op.Expand(t, shape) for t in tensors]


@converter(aten.linalg_cross.default, aten.cross.default)
def convert_cross(ctx, node, a, b, dim=None):
    # (a1 b2 - a2 b1, a2 b0 - a0 b2, a0 b1 - a1 b0) along the axis of size 3
    dtype = ctx.out_dtype()
    a, b = cast_all(ctx, [a, b], dtype)
    shape = list(ctx.val().shape)
    if dim is None:  # linalg_cross: the last axis, cross: the first axis of size 3
        dim = -1 if node.target is aten.linalg_cross.default else next(i for i, d in enumerate(shape) if d == 3)
    axis = dim + len(shape) if dim < 0 else dim
    a_parts = ctx.op.Split(a, axis=axis, num_outputs=3, _outputs=3)
    b_parts = ctx.op.Split(b, axis=axis, num_outputs=3, _outputs=3)

    def term(i, j):
        return ctx.op.Sub(ctx.op.Mul(a_parts[i], b_parts[j]), ctx.op.Mul(a_parts[j], b_parts[i]))

    return ctx.op.Concat(term(1, 2), term(2, 0), term(0, 1), axis=axis)


@converter(aten.ldexp.Tensor)
def convert_ldexp(ctx, node, x, other):
    dtype = ctx.out_dtype()
    x, other = cast_all(ctx, [x, other], dtype)
    return ctx.op.Mul(x, ctx.op.Pow(ctx.const(2.0, dtype), other))


def _scale2(ctx, v, e):
    """v * 2**e in float64 in two halves: 2**e alone overflows (or underflows) at the ends of the range."""
    f64 = torch.float64
    half = ctx.op.Floor(ctx.op.Div(e, ctx.const(2.0, f64)))
    two = ctx.const(2.0, f64)
    return ctx.op.Mul(ctx.op.Mul(v, ctx.op.Pow(two, half)), ctx.op.Pow(two, ctx.op.Sub(e, half)))


def _binary_exponent(ctx, size):
    """e (float64) with size = m * 2**e, 0.5 <= m < 1, for positive finite float64 values: from the
    logarithm, then one correction where it rounded."""
    f64 = torch.float64
    e = ctx.op.Add(ctx.op.Floor(ctx.op.Div(ctx.op.Log(size), ctx.const(math.log(2.0), f64))), ctx.const(1.0, f64))
    m = _scale2(ctx, size, ctx.op.Neg(e))
    return ctx.op.Add(e, ctx.op.Sub(ctx.cast(ctx.op.GreaterOrEqual(m, ctx.const(1.0, f64)), f64), ctx.cast(ctx.op.Less(m, ctx.const(0.5, f64)), f64)))


@converter(aten.frexp.Tensor)
def convert_frexp(ctx, node, x):
    """x = mantissa * 2**exponent with 0.5 <= |mantissa| < 1 (0, inf and NaN: (x, 0)), in float64."""
    f64, i32 = torch.float64, torch.int32
    v = ctx.cast(x, f64)
    size = ctx.op.Abs(v)
    regular = ctx.op.And(ctx.op.Greater(size, ctx.const(0.0, f64)), ctx.op.Not(ctx.op.IsInf(size)))
    safe = ctx.op.Where(regular, size, ctx.const(1.0, f64))
    e = _binary_exponent(ctx, safe)
    m = _scale2(ctx, safe, ctx.op.Neg(e))
    mantissa = ctx.op.Where(regular, ctx.op.Mul(m, ctx.op.Sign(v)), v)
    exponent = ctx.op.Where(regular, e, ctx.const(0.0, f64))
    return ctx.cast(mantissa, ctx.out_dtype(0)), ctx.cast(exponent, i32)


# (significand bits, exponent of the smallest subnormal) of each floating type
_FLOAT_BITS = {torch.float64: (53, -1074), torch.float32: (24, -149), torch.float16: (11, -24), torch.bfloat16: (8, -133)}


@converter(aten.nextafter.default)
def convert_nextafter(ctx, node, x, y):
    """The next representable value after x towards y, computed in float64 where every step of
    the narrower types is exact: x +- 2**(exponent - bits), half that below a power of two,
    the smallest subnormal around 0, the largest finite value after an infinity."""
    dtype = ctx.out_dtype()
    bits, tiny = _FLOAT_BITS[dtype]
    f64 = torch.float64
    xv, yv = ctx.cast(ctx.cast(x, dtype), f64), ctx.cast(ctx.cast(y, dtype), f64)
    size = ctx.op.Abs(xv)
    regular = ctx.op.And(ctx.op.Greater(size, ctx.const(0.0, f64)), ctx.op.Not(ctx.op.IsInf(size)))
    safe = ctx.op.Where(regular, size, ctx.const(1.0, f64))
    e = _binary_exponent(ctx, safe)  # safe = m * 2**e
    up = ctx.op.Greater(yv, xv)
    growing = ctx.op.Equal(up, ctx.op.Greater(xv, ctx.const(0.0, f64)))
    power_of_two = ctx.op.Equal(_scale2(ctx, safe, ctx.op.Neg(e)), ctx.const(0.5, f64))
    exponent = ctx.op.Sub(e, ctx.const(float(bits), f64))
    exponent = ctx.op.Sub(exponent, ctx.cast(ctx.op.And(power_of_two, ctx.op.Not(growing)), f64))
    step = _scale2(ctx, ctx.const(1.0, f64), ctx.op.Max(exponent, ctx.const(float(tiny), f64)))
    signed = ctx.op.Where(up, step, ctx.op.Neg(step))
    out = ctx.op.Add(xv, signed)
    smallest = _scale2(ctx, ctx.const(1.0, f64), ctx.const(float(tiny), f64))
    out = ctx.op.Where(ctx.op.Equal(xv, ctx.const(0.0, f64)), ctx.op.Where(up, smallest, ctx.op.Neg(smallest)), out)
    largest = ctx.const(float(torch.finfo(dtype).max), f64)
    out = ctx.op.Where(ctx.op.IsInf(xv), ctx.op.Mul(ctx.op.Sign(xv), largest), out)
    out = ctx.op.Where(ctx.op.Equal(xv, yv), yv, out)
    out = ctx.op.Where(ctx.op.Or(ctx.op.IsNaN(xv), ctx.op.IsNaN(yv)), ctx.op.Add(xv, yv), out)
    return ctx.cast(out, dtype)


@converter(aten.special_ndtr.default)
def convert_ndtr(ctx, node, x):
    # standard normal CDF: erfc(-x / sqrt(2)) / 2, in float64 (both tails keep their digits)
    scaled = ctx.op.Mul(ctx.cast(x, torch.float64), ctx.const(-1.0 / math.sqrt(2.0), torch.float64))
    return ctx.cast(ctx.op.Mul(erfc_value(ctx, scaled, torch.float64), ctx.const(0.5, torch.float64)), ctx.out_dtype())


@converter(aten.special_xlog1py.default, aten.special_xlog1py.self_scalar, aten.special_xlog1py.other_scalar)
def convert_xlog1py(ctx, node, x, y):
    dtype = ctx.out_dtype()
    x, y = cast_all(ctx, [x, y], dtype)
    product = ctx.op.Mul(x, ctx.op.Log(ctx.op.Add(y, ctx.const(1.0, dtype))))
    zero = ctx.const(0.0, dtype)
    return ctx.op.Where(ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Not(ctx.op.IsNaN(y))), zero, product)
