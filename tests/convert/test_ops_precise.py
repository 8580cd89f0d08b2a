"""log1p / expm1 accurate near 0, trigonometric and hyperbolic functions in float64 (ops/precise.py)."""

from __future__ import annotations

import pytest
import torch
from helpers import Fn, check_export

F64 = torch.float64
NONFINITE = [float("inf"), float("-inf"), float("nan")]


def _grid(*parts, extra=()):
    return torch.cat([*parts, torch.tensor(list(extra), dtype=F64)])


TINY = torch.tensor([1e-300, -1e-300, 1e-30, -1e-30, 1e-10, -1e-10, 1e-5, 0.0], dtype=F64)
CASES = {
    "tan": (torch.tan, _grid(torch.linspace(-1.5, 1.5, 301, dtype=F64), TINY, extra=[10.0, -100.0, float("nan")])),
    "asin": (torch.asin, _grid(torch.linspace(-1, 1, 301, dtype=F64), TINY, extra=[1 - 1e-12, 1.5, float("nan")])),
    "acos": (torch.acos, _grid(torch.linspace(-1, 1, 301, dtype=F64), TINY, extra=[1 - 1e-12, -1.5, float("nan")])),
    "atan": (torch.atan, _grid(torch.linspace(-50, 50, 301, dtype=F64), TINY, extra=[1e300, *NONFINITE])),
    "sinh": (torch.sinh, _grid(torch.linspace(-20, 20, 301, dtype=F64), TINY, extra=[0.999, 1.0, *NONFINITE])),
    "cosh": (torch.cosh, _grid(torch.linspace(-20, 20, 301, dtype=F64), TINY, extra=NONFINITE)),
    "asinh": (torch.asinh, _grid(torch.linspace(-50, 50, 301, dtype=F64), TINY, extra=[1e200, -1e200, *NONFINITE])),
    "acosh": (torch.acosh, _grid(torch.linspace(1, 50, 301, dtype=F64), extra=[1 + 1e-12, 1e200, 0.5, float("inf"), float("nan")])),
    "atanh": (torch.atanh, _grid(torch.linspace(-1, 1, 301, dtype=F64), TINY, extra=[1 - 1e-12, 1.5, float("nan")])),
    "log1p": (torch.log1p, _grid(torch.linspace(-1, 50, 301, dtype=F64), TINY, extra=[-2.0, 1e300, *NONFINITE])),
    "expm1": (torch.expm1, _grid(torch.linspace(-50, 50, 301, dtype=F64), TINY, extra=[700.0, *NONFINITE])),
}


@pytest.mark.parametrize("name", list(CASES))
def test_float64(name):
    fn, x = CASES[name]
    check_export(Fn(fn), (x,), dynamic_shapes={"x": {0: "n"}}, inputs2=((x[::3],), None), atol=1e-300, rtol=1e-13)


@pytest.mark.parametrize("name", list(CASES))
def test_float32_keeps_the_onnx_operator_or_is_accurate(name):
    fn, x = CASES[name]
    x = x[torch.isfinite(x) & (x.abs() < 40)].float()
    check_export(Fn(fn), (x,), atol=1e-37, rtol=2e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_log1p_expm1_of_tiny_values(dtype):
    # log(1 + x) and exp(x) - 1 gave 0 for these
    x = torch.tensor([1e-10, -1e-10, 1e-6, -3e-5, 0.0], dtype=torch.float32).to(dtype)
    for fn in (torch.log1p, torch.expm1):
        check_export(Fn(fn), (x,), atol=0, rtol=1e-3 if dtype == torch.float16 else 1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.float16], ids=str)
def test_celu_every_float_dtype(dtype):
    x = torch.cat([torch.linspace(-5, 5, 41), torch.tensor([-1e-8, 1e-8])]).to(dtype)
    check_export(Fn(lambda t: torch.nn.functional.celu(t, alpha=0.7)), (x,), atol=1e-3 if dtype == torch.float16 else 1e-7)
