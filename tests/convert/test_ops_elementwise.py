"""Converters of elementwise operators: activations, arithmetic, comparisons, logic."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import Fn, Fn2, check_export, seeded_randn
from torch import nn

import fx2onnx


def _x(*shape, scale=3.0, seed=0):
    return seeded_randn(*shape, seed=seed) * scale


ACTIVATIONS = {
    "relu": nn.ReLU(),
    "relu_inplace": nn.ReLU(inplace=True),
    "leaky_relu": nn.LeakyReLU(0.2),
    "prelu": nn.PReLU(4, init=0.3),
    "prelu_single": nn.PReLU(),
    "elu": nn.ELU(0.7),
    "selu": nn.SELU(),
    "celu": nn.CELU(0.5),
    "gelu": nn.GELU(),
    "gelu_tanh": nn.GELU("tanh"),
    "silu": nn.SiLU(),
    "mish": nn.Mish(),
    "softplus": nn.Softplus(),
    "softplus_beta_threshold": nn.Softplus(beta=2.0, threshold=3.0),
    "softsign": nn.Softsign(),
    "hardswish": nn.Hardswish(),
    "hardsigmoid": nn.Hardsigmoid(),
    "hardtanh": nn.Hardtanh(-2.0, 1.5),
    "relu6": nn.ReLU6(),
    "sigmoid": nn.Sigmoid(),
    "tanh": nn.Tanh(),
    "logsigmoid": nn.LogSigmoid(),
    "softmax": nn.Softmax(dim=1),
    "softmax_last": nn.Softmax(dim=-1),
    "logsoftmax": nn.LogSoftmax(dim=1),
    "softmin": nn.Softmin(dim=1),
    "threshold": nn.Threshold(0.5, -2.0),
    "tanhshrink": nn.Tanhshrink(),
    "softshrink": nn.Softshrink(0.7),
    "hardshrink": nn.Hardshrink(0.7),
    "glu": nn.GLU(dim=1),
    "glu_last": nn.GLU(),
    "rrelu_eval": nn.RReLU(0.1, 0.3),
    "dropout_eval": nn.Dropout(0.5),
    "dropout2d_eval": nn.Dropout2d(0.5),
    "alpha_dropout_eval": nn.AlphaDropout(0.5),
    "identity": nn.Identity(),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations(name):
    model = ACTIVATIONS[name]
    x, x2 = _x(2, 4, 6), _x(5, 4, 6, seed=1)
    check_export(model, (x,), dynamic_shapes=({0: "batch"},), inputs2=((x2,), None))


def test_gelu_opset20():
    x = _x(3, 8)
    check_export(Fn(lambda x: F.gelu(x) + F.gelu(x, approximate="tanh")), (x,), target_opset=20)


def test_activations_float16():
    x = _x(3, 8).half()
    model = Fn(lambda x: F.gelu(x) + F.silu(x) + torch.sigmoid(x) + F.softmax(x, -1) + F.hardswish(x))
    check_export(model, (x,), atol=1e-2, rtol=1e-2)


def test_softmax_dtype_argument():
    check_export(
        Fn(lambda x: F.softmax(x, -1, dtype=torch.float64) + F.log_softmax(x, 0, dtype=torch.float64)), (_x(3, 5),)
    )


def _pos(*shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) + 0.1


def _ints(*shape, low=-9, high=10, seed=0, dtype=torch.int64):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


FLOAT_BINARY = {
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5) + (a + 1.5),
    "sub_alpha_rsub": lambda a, b: torch.sub(a, b, alpha=0.5) + (2.0 - a),
    "mul_div": lambda a, b: a * b / (b.abs() + 1) * 3,
    "div_modes": lambda a, b: torch.div(a, b, rounding_mode="floor") + torch.div(a, b, rounding_mode="trunc"),
    "floor_divide": lambda a, b: torch.floor_divide(a, b) + a // 0.7,
    "remainder_fmod": lambda a, b: torch.remainder(a, b) + torch.fmod(a, b) + a % 1.3,
    "pow": lambda a, b: a.abs() ** b + a**2 + a.abs() ** 0.5 + a**3 + 2**a,
    "min_max": lambda a, b: torch.minimum(a, b) + torch.maximum(a, b) * 2,
    "atan2": lambda a, b: torch.atan2(a, b),
    "lerp": lambda a, b: torch.lerp(a, b, 0.3) + torch.lerp(a, b, b.sigmoid()),
    "addcmul_addcdiv": lambda a, b: torch.addcmul(a, a, b, value=0.5) + torch.addcdiv(a, a, b.abs() + 1, value=2),
    "where_clamp": lambda a, b: torch.where(a > b, a, b * 2).clamp(-1, 1) + a.clamp(min=b) + a.clamp(max=0.5),
    "clamp_tensor": lambda a, b: torch.clamp(a, min=b - 1, max=b + 1)
    + torch.clamp_min(a, 0.1)
    + torch.clamp_max(a, -0.1),
}


@pytest.mark.parametrize("name", list(FLOAT_BINARY))
def test_float_binary(name):
    a, b = _x(2, 3, 4), _x(2, 3, 4, seed=1) + 0.05
    a2, b2 = _x(4, 3, 4, seed=2), _x(4, 3, 4, seed=3) + 0.05
    ds = ({0: "batch"}, {0: "batch"})
    check_export(Fn2(FLOAT_BINARY[name]), (a, b), dynamic_shapes=ds, inputs2=((a2, b2), None))


UNARY = {
    "exp_log": lambda x: torch.exp(x) + torch.log(x) + torch.log2(x) + torch.log10(x) + torch.log1p(x) + torch.expm1(x),
    "sqrt_rsqrt_reciprocal": lambda x: torch.sqrt(x) + torch.rsqrt(x) + torch.reciprocal(x) + torch.exp2(x),
    "trig": lambda x: torch.sin(x)
    + torch.cos(x)
    + torch.tan(x)
    + torch.asin(x - 0.5)
    + torch.acos(x - 0.5)
    + torch.atan(x),
    "hyperbolic": lambda x: torch.sinh(x)
    + torch.cosh(x)
    + torch.tanh(x)
    + torch.asinh(x)
    + torch.acosh(x + 1)
    + torch.atanh(x - 0.55),
    "rounding": lambda x: torch.floor(x * 5)
    + torch.ceil(x * 5)
    + torch.round(x * 5)
    + torch.trunc(x * 5 - 3)
    + torch.round(x, decimals=2),
    "sign_abs_neg": lambda x: torch.sign(x - 0.5) + torch.abs(x - 0.5) - torch.neg(x) + torch.erf(x),
    "logit": lambda x: torch.logit(x - 0.05) + torch.logit(x, eps=0.2),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_float_unary(name):
    x, x2 = _pos(2, 5) * 0.9, _pos(3, 5, seed=1) * 0.9
    check_export(Fn(UNARY[name]), (x,), dynamic_shapes=({0: "batch"},), inputs2=((x2,), None))


def test_special_values():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, 1.5, -80.0, 80.0])
    model = Fn(lambda x: (torch.isnan(x), torch.isinf(x), torch.isfinite(x), F.logsigmoid(x), F.softplus(x)))
    check_export(model, (x,))


INT_OPS = {
    "arith": lambda a, b: a + b * 3 - a * b + torch.add(a, b, alpha=2),
    "floor_div_negative": lambda a, b: torch.div(a, b, rounding_mode="floor")
    + a // 3
    + torch.div(a, b, rounding_mode="trunc"),
    "true_div": lambda a, b: a / b,
    "remainder_fmod": lambda a, b: a % b + torch.fmod(a, b) + a % 4,
    "min_max_abs_neg": lambda a, b: torch.minimum(a, b) + torch.maximum(a, b) + a.abs() - b.neg() + a.sign(),
    "compare": lambda a, b: (a < b, a <= 2, a > b, a >= b, a == b, a != 3),
    "bitwise": lambda a, b: (a & b) + (a | b) + (a ^ b) + torch.bitwise_not(a) + (a & 3),
    "clamp_where": lambda a, b: torch.where(a > 0, a, -b).clamp(-3, 4),
    "int_to_float_unary": lambda a, b: torch.sqrt(a.abs()) + torch.exp(a * 0.1) + torch.sigmoid(b),
    "pow_int": lambda a, b: a**2 + b.abs() ** 3,
}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("name", list(INT_OPS))
def test_integer_ops(name, dtype):
    a = _ints(2, 6, dtype=dtype)
    b = _ints(2, 6, low=1, high=6, seed=1, dtype=dtype) * torch.tensor([1, -1, 1, -1, 1, -1], dtype=dtype)
    check_export(Fn2(INT_OPS[name]), (a, b))


BOOL_OPS = {
    "logical": lambda a, b: (
        a & b,
        a | b,
        a ^ b,
        ~a,
        torch.logical_and(a, b),
        torch.logical_or(a, b),
        torch.logical_xor(a, b),
        torch.logical_not(a),
    ),
    "add_mul": lambda a, b: (a + b, a * b),
    "where": lambda a, b: torch.where(a, 1.0, 0.0) + torch.where(b, 2, 3),
    "compare": lambda a, b: (a == b, a != b),
}


@pytest.mark.parametrize("name", list(BOOL_OPS))
def test_bool_ops(name):
    gen = torch.Generator().manual_seed(0)
    a, b = torch.rand(3, 4, generator=gen) > 0.5, torch.rand(3, 4, generator=gen) > 0.5
    check_export(Fn2(BOOL_OPS[name]), (a, b))


PROMOTIONS = {
    "int_plus_float_scalar": (lambda a, b: a + 1.5, torch.int64, torch.int64),
    "int32_plus_int64": (lambda a, b: a + b, torch.int32, torch.int64),
    "half_plus_float": (lambda a, b: a + b, torch.float16, torch.float32),
    "int_times_float": (lambda a, b: a * b, torch.int64, torch.float32),
    "bool_plus_int": (lambda a, b: (a > 0) + b, torch.int64, torch.int64),
    "compare_int_float": (lambda a, b: a < b, torch.int64, torch.float32),
}


@pytest.mark.parametrize("name", list(PROMOTIONS))
def test_type_promotion(name):
    fn, da, db = PROMOTIONS[name]
    a = _x(2, 3).to(da)
    b = _x(2, 3, seed=1).to(db)
    check_export(Fn2(fn), (a, b))


MORE_OPS = {
    "square_true_divide": lambda a, b: (a.square(), torch.true_divide(a, b), torch.max(a, b), torch.min(a, b)),
    "erfc_expit_frac_sgn": lambda a, b: (torch.special.erfc(a), torch.special.expit(a), a.frac(), a.sgn()),
    "signbit_copysign": lambda a, b: (a.signbit(), torch.copysign(a, b), torch.copysign(a, -0.0)),
    "heaviside": lambda a, b: torch.heaviside(a.round(), b),
    "xlogy": lambda a, b: torch.xlogy(a.round(), b.abs()),
    "sinc_deg_rad": lambda a, b: (torch.sinc(a.round()), torch.sinc(a), torch.deg2rad(a), torch.rad2deg(a)),
    "hypot_logaddexp": lambda a, b: (torch.hypot(a, b), torch.logaddexp(a, b * 30), torch.logaddexp2(a, b)),
    "nan_to_num": lambda a, b: (
        torch.nan_to_num(a.log()),
        torch.nan_to_num(a / a.round(), nan=1.0, posinf=2.0, neginf=-2.0),
    ),
    "float_power_isclose": lambda a, b: (
        torch.float_power(a.abs(), 2),
        torch.isclose(a, a + b * 1e-6),
        torch.isclose(a, b, atol=0.5),
    ),
    "isin": lambda a, b: (torch.isin(a.round(), b.round()), torch.isin(a.round(), b.round(), invert=True)),
}


@pytest.mark.parametrize("name", list(MORE_OPS))
def test_more_float_ops(name):
    a, b = _x(2, 3, 4), _x(2, 3, 4, seed=1)
    a[0, 0, :2] = torch.tensor([0.0, -0.0])
    a2, b2 = _x(4, 3, 4, seed=2), _x(4, 3, 4, seed=3)
    ds = ({0: "batch"}, {0: "batch"})
    check_export(Fn2(MORE_OPS[name]), (a, b), dynamic_shapes=ds, inputs2=((a2, b2), None))


def test_shifts():
    a = _ints(3, 4, low=-50, high=50)
    check_export(Fn(lambda a: (a << 2, a >> 1, torch.bitwise_left_shift(a, 3), a >> 3)), (a,))
    u = torch.randint(0, 255, (3, 4), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    check_export(Fn(lambda u: (u << 1, u >> 2)), (u,))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8])
def test_shifts_by_the_width_and_beyond_float_precision(dtype):
    # two's complement bits as torch: a shift by the width or more gives 0 (left) or the sign (right),
    # a left shift wraps, and int64 values above 2**53 stay exact (no float detour)
    bits = torch.iinfo(dtype).bits
    big = [2**60 + 12345, -(2**60) - 7] if dtype == torch.int64 else []
    values = [v for v in [-128, -9, -1, 0, 1, 7, 100, 127, 255] + big if torch.iinfo(dtype).min <= v <= torch.iinfo(dtype).max]
    x = torch.tensor(values, dtype=dtype).reshape(-1, 1)
    n = torch.tensor([0, 1, 3, bits - 1, bits, bits + 5], dtype=dtype)
    check_export(Fn2(lambda a, s: (a >> s, a << s)), (x, n))


def test_unsupported_op_error_names_the_op():
    # hash_tensor has no converter (ONNX has no bit cast below opset 26): the error says which op and how to add one
    model = Fn(lambda x: torch.hash_tensor(x) + 1)
    with pytest.raises(fx2onnx.UnsupportedOpError, match="aten::hash_tensor") as info:
        fx2onnx.to_onnx(model, (_pos(3, 4),))
    assert "Dispatcher" in str(info.value)
    assert "hash_tensor" in str(info.value).split("FX node:")[1]


def test_nan_propagation():
    nan = float("nan")
    a = torch.tensor([[1.0, nan, 3.0, nan], [0.5, -1.0, nan, 2.0]])
    b = torch.tensor([[nan, 2.0, 1.0, nan], [1.5, -2.0, 4.0, nan]])
    model = Fn2(
        lambda a, b: (
            torch.maximum(a, b),
            torch.minimum(a, b),
            torch.fmax(a, b),
            torch.fmin(a, b),
            a.clamp(0, 1),
            torch.max(a, b),
        )
    )
    check_export(model, (a, b))


def test_nan_in_reductions():
    a = torch.tensor([[1.0, float("nan"), 3.0], [0.5, -1.0, 2.0]])
    check_export(Fn(lambda a: (a.amax(1), a.amin(1), a.max(), a.sum(1), a.argmax(1), a.max(1)[0])), (a,))


def test_broadcast_tensors_dynamic():
    a, b = _x(2, 1, 4), _x(3, 1, seed=1)
    a2, b2 = _x(5, 1, 4, seed=2), _x(6, 1, seed=3)
    model = Fn2(lambda a, b: torch.broadcast_tensors(a, b))
    check_export(model, (a, b), dynamic_shapes=({0: "n"}, {0: "m"}), inputs2=((a2, b2), None))
    check_export(model, (a, b))


COMPOSITE_OPS = {
    "special_logit_fix": lambda a, b: (
        torch.special.logit(a.sigmoid()),
        torch.fix(a * 3),
        torch.special.logit(a.sigmoid(), eps=0.1),
    ),
    "ldexp": lambda a, b: torch.ldexp(a, b.round()),
    "ndtr": lambda a, b: torch.special.ndtr(a * 2),
    "xlog1py": lambda a, b: torch.special.xlog1py(a.round(), b.abs()),
}


@pytest.mark.parametrize("name", list(COMPOSITE_OPS))
def test_composite_ops(name):
    a, b = _x(2, 3, 4), _x(2, 3, 4, seed=1)
    check_export(Fn2(COMPOSITE_OPS[name]), (a, b))


def _integer_divisions(a, b):
    out = []
    for dtype in (torch.int64, torch.int32, torch.int16, torch.int8):
        x, y = a.to(dtype), b.to(dtype)
        out += [torch.div(x, y, rounding_mode="floor"), torch.div(x, y, rounding_mode="trunc"), x // -3]
    return tuple(out)


def test_integer_division_stays_in_integers():
    # floor and trunc division of integers of every sign, in each integer type, with no float64
    # anywhere in the graph (onnxruntime-web has no Cast to double)
    a = torch.tensor([-7, -6, -5, -1, 0, 1, 5, 6, 7, 100, -100, 9])
    b = torch.tensor([2, -2, 3, -3, 4, -4, 5, -5, 7, -7, 3, -1])
    onx = check_export(Fn2(_integer_divisions), (a, b), inputs2=((a.flip(0), b), None))
    casts = {att.i for n in onx.graph.node if n.op_type == "Cast" for att in n.attribute}
    assert 11 not in casts  # onnx.TensorProto.DOUBLE
    assert {n.op_type for n in onx.graph.node} >= {"Mod", "Div"}
