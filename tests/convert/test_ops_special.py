"""Special functions (ops/special.py, ops/gamma.py): values, non-finite values, dtypes, shapes, and the
discovery of every ``special_*`` operator torch.ops.aten has."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import Fn, Fn2, check_export

from fx2onnx.convert import registry

aten = torch.ops.aten
F64 = torch.float64
DYN = {"x": {0: "n"}}


def grid(lo, hi, n=401, extra=()):
    return torch.cat([torch.linspace(lo, hi, n, dtype=F64), torch.tensor(list(extra), dtype=F64)])


NONFINITE = (float("inf"), float("-inf"), float("nan"))

# function, input grid, absolute tolerance, relative tolerance (float64)
UNARY = {
    "erfcx": (torch.special.erfcx, grid(-20, 30, extra=(0.0, 1e-9, 1e300) + NONFINITE), 1e-300, 1e-11),
    "erfinv": (torch.erfinv, grid(-1, 1, extra=(1 - 1e-12, -1 + 1e-15, 1.5, -2.0) + NONFINITE), 1e-12, 1e-11),
    "ndtri": (torch.special.ndtri, grid(0, 1, extra=(1e-300, 1e-20, 1e-8, 1 - 1e-12, -0.5, 1.5, float("nan"))), 1e-12, 1e-11),
    "log_ndtr": (torch.special.log_ndtr, grid(-40, 40, extra=(0.0,) + NONFINITE), 1e-12, 1e-11),
    "entr": (torch.special.entr, grid(-2, 50, extra=(0.0, 1e-300) + NONFINITE), 1e-12, 1e-12),
    "spherical_bessel_j0": (torch.special.spherical_bessel_j0, grid(-50, 50, extra=(0.0, 1e-9) + NONFINITE), 1e-12, 1e-11),
    "i0": (torch.special.i0, grid(-200, 200, extra=(0.0,) + NONFINITE), 1e-300, 1e-11),
    "i0e": (torch.special.i0e, grid(-200, 200, extra=(0.0,) + NONFINITE), 1e-14, 1e-11),
    "i1": (torch.special.i1, grid(-200, 200, extra=(0.0,) + NONFINITE), 1e-300, 1e-11),
    "i1e": (torch.special.i1e, grid(-200, 200, extra=(0.0,) + NONFINITE), 1e-14, 1e-11),
    "modified_bessel_i0": (torch.special.modified_bessel_i0, grid(-50, 50), 1e-300, 1e-11),
    "modified_bessel_i1": (torch.special.modified_bessel_i1, grid(-50, 50), 1e-300, 1e-11),
    # torch's own J/Y are off by up to 8e-7 near x = 5 (mpmath as reference); ours by 2e-12
    "bessel_j0": (torch.special.bessel_j0, grid(-60, 60, extra=(0.0,) + NONFINITE), 2e-6, 1e-6),
    "bessel_j1": (torch.special.bessel_j1, grid(-60, 60, extra=(0.0,) + NONFINITE), 2e-6, 1e-6),
    "bessel_y0": (torch.special.bessel_y0, grid(0.01, 60, extra=(0.0, -1.0) + NONFINITE), 2e-6, 1e-6),
    "bessel_y1": (torch.special.bessel_y1, grid(0.01, 60, extra=(0.0, -1.0) + NONFINITE), 2e-6, 1e-6),
    "lgamma": (torch.lgamma, grid(-19.77, 30.3, extra=(0.0, -1.0, -2.0, 1.0, 2.0, 1e-8, 1e5) + NONFINITE), 1e-12, 1e-12),
    "digamma": (torch.digamma, grid(-19.77, 30.3, extra=(0.0, -1.0, -3.0, 1.0, 1e-8, 1e5, float("inf"), float("nan"))), 1e-11, 1e-11),
    "polygamma1": (lambda t: torch.polygamma(1, t), grid(-7.9, 30.3), 1e-9, 1e-9),
    "polygamma2": (lambda t: torch.polygamma(2, t), grid(-7.9, 30.3), 1e-9, 1e-9),
    "polygamma0": (lambda t: torch.polygamma(0, t), grid(0.1, 30.3), 1e-11, 1e-11),
    "mvlgamma": (lambda t: torch.mvlgamma(t, 3), grid(1.01, 40), 1e-11, 1e-12),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_special_unary_float64(name):
    fn, x, atol, rtol = UNARY[name]
    check_export(Fn(fn), (x,), atol=atol, rtol=rtol)


# the converters whose graphs take seconds to build and run (each has its float64 test in the fast
# tier): their lower precision cases are in the slow tier
SLOW_LOWER_PRECISION = {"erfinv", "ndtri", "log_ndtr"}


def _slow_if(names, cases):
    """The cases (tuples) as parameters, marked slow when their first item is in ``names``."""
    return [pytest.param(*case, marks=pytest.mark.slow) if case[0] in names else case for case in cases]


# torch has no float16 kernel for erfcx, ndtri, log_ndtr, bessel_j0 on CPU
@pytest.mark.parametrize(
    "name,dtype",
    _slow_if(
        SLOW_LOWER_PRECISION,
        [(n, torch.float32) for n in ["erfcx", "erfinv", "ndtri", "log_ndtr", "i0e", "i1", "lgamma", "digamma", "bessel_j0"]]
        + [(n, torch.float16) for n in ["erfinv", "i0e", "i1", "lgamma", "digamma"]],
    ),
)
def test_special_unary_lower_precision_dynamic(name, dtype):
    fn, x, _, _ = UNARY[name]
    # inside the float32 range of the results (torch overflows in float32 where float64 would not)
    x = x[torch.isfinite(x) & (x.abs() < 9)].to(dtype)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3}[dtype]
    check_export(Fn(fn), (x[:200],), dynamic_shapes=DYN, inputs2=((x[200:],), None), atol=tol, rtol=tol)


@pytest.mark.parametrize("name", ["lgamma", "digamma", pytest.param("erfinv", marks=pytest.mark.slow), "i0"])
def test_special_integer_inputs_and_shapes(name):
    # integers promote to float32; 0-d and empty tensors keep their shape
    fn = UNARY[name][0]
    check_export(Fn(fn), (torch.arange(1, 7).reshape(2, 3) if name != "erfinv" else torch.tensor([[0, 1], [-1, 0]]),), atol=1e-5)
    check_export(Fn(fn), (torch.tensor(0.5),), atol=1e-6)
    check_export(Fn(fn), (torch.zeros(0, 3),))


@pytest.mark.slow
def test_zeta_and_incomplete_gamma():
    s = torch.linspace(1.01, 10, 40, dtype=F64).repeat(15)
    q = torch.linspace(0.05, 20, 15, dtype=F64).repeat_interleave(40)
    check_export(Fn2(torch.special.zeta), (s, q), atol=1e-12, rtol=1e-11)
    check_export(Fn2(torch.special.zeta), (torch.tensor([0.5, 1.0, 2.0], dtype=F64), torch.tensor([1.0, 1.0, 1.0], dtype=F64)))
    a = torch.cat([torch.linspace(0.05, 100, 40, dtype=F64).repeat(40), torch.tensor([1.0, 2.0, -1.0, 1.0], dtype=F64)])
    x = torch.cat([torch.linspace(0, 150, 40, dtype=F64).repeat_interleave(40), torch.tensor([float("inf"), 0.0, 1.0, -1.0], dtype=F64)])
    check_export(Fn2(torch.igamma), (a, x), atol=1e-9, rtol=1e-9)
    check_export(Fn2(torch.igammac), (a, x), atol=1e-9, rtol=1e-9)
    check_export(Fn2(torch.igamma), (a[:50].float(), x[:50].float()), atol=1e-5, rtol=1e-5)


POLYNOMIALS = [
    "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
    "legendre_polynomial_p",
]  # fmt: skip


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_orthogonal_polynomials_of_a_tensor_degree(name):
    # every degree from -1 (gives 0) to 11 at every point of [-1.2, 1.2]; torch's own shifted U is off
    # by 2e-8 at x = 5.6e-17 (exact rational arithmetic as reference), the recurrence is not
    fn = getattr(torch.special, name)
    x = torch.linspace(-1.2, 1.2, 49, dtype=F64).repeat(13)
    n = torch.arange(-1, 12, dtype=F64).repeat_interleave(49)
    # degree 0 at an infinite x is 1; degree 1 is infinite
    x2 = torch.tensor([0.3, -0.7, 1.0, -1.0, 0.0, math.inf, -math.inf, math.inf], dtype=F64)
    n2 = torch.tensor([3.0, 2.9, 7.0, 8.0, 0.0, 0.0, 0.0, 1.0], dtype=F64)
    dyn = {"x": {0: "n"}, "y": {0: "n"}}
    check_export(Fn2(fn), (x, n), dynamic_shapes=dyn, inputs2=((x2, n2), None), atol=1e-7, rtol=1e-7)


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "legendre_polynomial_p", "hermite_polynomial_he"])
def test_orthogonal_polynomials_dtypes_broadcast_and_scalars(name):
    fn = getattr(torch.special, name)
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    check_export(Fn2(fn), (x, torch.tensor([0, 1, 5, 9])), atol=1e-5, rtol=1e-5)  # float32, int64 degrees broadcast
    check_export(Fn(lambda t: fn(t, 6)), (x,), atol=1e-5, rtol=1e-5)  # a Python degree (n_scalar)
    check_export(Fn(lambda t: fn(0.25, t)), (torch.arange(0, 8),), atol=1e-5, rtol=1e-5)  # a Python x (x_scalar)
    check_export(Fn2(fn), (torch.zeros(0, 4), torch.tensor([1, 2, 3, 4])))  # empty


def test_chebyshev_of_high_degree_matches_torch_trigonometric_formula():
    # torch switches to cos(n acos x) above degree 6 inside (-1, 1): the recurrence agrees
    x = torch.linspace(-0.999, 0.999, 101, dtype=F64)
    for name in ("chebyshev_polynomial_t", "chebyshev_polynomial_u"):
        check_export(Fn(lambda t, f=getattr(torch.special, name): f(t, 100)), (x,), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize(
    "name", ["modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1"]
)
def test_modified_bessel_k(name):
    # the three regions (series below 2, integral up to 25, asymptotic above) and their borders
    fn = getattr(torch.special, name)
    x = torch.cat([torch.logspace(-12, 2.9, 300, dtype=F64), torch.linspace(0.01, 40, 300, dtype=F64),
                   torch.tensor([0.0, 2.0, 25.0, 1e4, -1.0] + list(NONFINITE), dtype=F64)])  # fmt: skip
    check_export(Fn(fn), (x,), dynamic_shapes=DYN, inputs2=((x[::7],), None), atol=1e-300, rtol=1e-12)
    check_export(Fn(fn), (x[:300].float(),), atol=1e-30, rtol=1e-5)


def test_airy_ai_series_and_both_asymptotic_expansions():
    # the series on [-7, 5], the decaying expansion above, the oscillating one below; torch's float64 kernel
    # is itself 3e-6 off near -2.09, hence the absolute tolerance
    x = torch.cat([torch.linspace(-200, 60, 2601, dtype=F64), torch.tensor([0.0, 5.0, -7.0, 4.999, -7.001] + list(NONFINITE), dtype=F64)])
    check_export(Fn(torch.special.airy_ai), (x,), dynamic_shapes=DYN, inputs2=((x[::7],), None), atol=5e-6, rtol=1e-5)
    check_export(Fn(torch.special.airy_ai), (torch.linspace(-30, 30, 301),), atol=1e-5, rtol=1e-4)


# every special_* operator of torch.ops.aten has a converter or a reason
SPECIAL_EXEMPTIONS: dict[str, str] = {}


def special_overloads() -> list[torch._ops.OpOverload]:
    ops = []
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::special_") and "out" not in (schema.overload_name or ""):
            packet = getattr(aten, schema.name[len("aten::") :])
            ops.append(getattr(packet, schema.overload_name or "default"))
    return ops


def test_special_ops_discovered_have_a_converter():
    ops = special_overloads()
    assert len(ops) > 30, "the special_* enumeration is broken"
    missing = sorted({op._opname for op in ops if registry.lookup(op) is None} - set(SPECIAL_EXEMPTIONS))
    assert not missing, f"special operators without a converter or a documented reason: {missing}"
    stale = sorted(name for name in SPECIAL_EXEMPTIONS if all(registry.lookup(op) is not None for op in ops if op._opname == name))
    assert not stale, f"exempted special operators now converted (remove them): {stale}"


@pytest.mark.parametrize(
    "fn",
    [torch.special.xlogy, torch.special.xlog1py, torch.special.entr, torch.special.sinc, torch.special.expit,
     lambda t: torch.special.logit(t.sigmoid())],  # fmt: skip
)
def test_special_aliases_export(fn):
    x = torch.linspace(-3, 3, 31)
    if fn in (torch.special.xlogy, torch.special.xlog1py):
        check_export(Fn2(fn), (x.abs(), x + 3.5), atol=1e-5)
    else:
        check_export(Fn(fn), (x,), atol=1e-5)


def test_pi_constant_accuracy_sanity():
    # lgamma(1/2) = log(sqrt(pi)) through the converter
    check_export(Fn(torch.lgamma), (torch.tensor([0.5, 1.5], dtype=F64),), atol=1e-14, rtol=1e-14)
    assert math.isclose(math.lgamma(0.5), math.log(math.sqrt(math.pi)))


@pytest.mark.parametrize(
    "fn",
    [torch.erf, torch.erfc, torch.special.ndtr, torch.nn.functional.gelu, lambda t: torch.ops.aten.gelu_backward.default(t * 0 + 1, t)],
)
def test_erf_family_float64(fn):
    # onnxruntime has no float64 Erf kernel: these go through the float64 formulas
    x = grid(-12, 12, extra=(0.0,) + NONFINITE)
    check_export(Fn(fn), (x,), atol=1e-13, rtol=1e-12)


def test_erfc_and_ndtr_tails_float32():
    # 1 - erf(x) is 0 in float32 beyond x ~ 4; torch keeps the tail
    x = torch.linspace(-9, 9, 181)
    check_export(Fn(torch.erfc), (x,), atol=1e-30, rtol=1e-5)
    # torch's ndtr is 1 + erf: 0 below -5.8 in float32, 6.1e-16 instead of 6.2e-16 at -8 in float64;
    # ours is compared with erfc(-x / sqrt(2)) / 2 in float64
    onx = check_export(Fn(torch.special.ndtr), (x,), atol=1e-6)
    import onnxruntime

    sess = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    got = torch.from_numpy(sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0])
    expected = (torch.erfc(-x.double() / math.sqrt(2.0)) / 2).float()
    torch.testing.assert_close(got, expected, atol=1e-30, rtol=1e-5)
    check_export(Fn(torch.erf), (x,), atol=1e-6)
