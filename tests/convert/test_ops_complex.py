"""Complex tensors carried as real pairs (trailing dimension 2) and FFTs through ONNX DFT, against eager."""

from __future__ import annotations

import math

import onnx
import pytest
import torch
from helpers import check_export, make, sweep

import fx2onnx
from fx2onnx.validation import run_onnx, validate

DTYPES = [torch.float32, torch.float64]
#: the sweeps over every case run float32 in the fast tier, float64 in the slow tier too
FAST_DTYPES = {torch.float32}


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _c(t):
    return torch.view_as_complex(t)


def _r(t):
    return torch.view_as_real(t)


PAIR_CASES = {
    "polar_abs_angle": lambda a, b: torch.polar(a.abs() + 0.1, b).abs() + torch.angle(torch.polar(a.abs() + 0.1, b * 0.5)),
    "mul_pairs": lambda a, b: _r(_c(torch.stack([a, b], -1)) * _c(torch.stack([b, a], -1))),
    "add_sub_real": lambda a, b: _r(_c(torch.stack([a, b], -1)) + a - 2 * _c(torch.stack([b, a], -1))),
    "mul_real_and_scalar": lambda a, b: _r(_c(torch.stack([a, b], -1)) * b * (1 - 2j)),
    "div": lambda a, b: _r(_c(torch.stack([a, b], -1)) / _c(torch.stack([b.abs() + 1, a], -1)) + a / _c(torch.stack([b.abs() + 1, a], -1))),
    "div_real": lambda a, b: _r(_c(torch.stack([a, b], -1)) / (b.abs() + 1)),
    "conj_neg_real_imag": lambda a, b: (-_c(torch.stack([a, b], -1)).conj()).imag + torch.complex(a, b).real,
    "complex_broadcast": lambda a, b: _r(torch.complex(a, b[:1])),
    "sum_mean": lambda a, b: _r(_c(torch.stack([a, b], -1)).sum(0, keepdim=True) + _c(torch.stack([a, b], -1)).mean(-1, keepdim=True)),
    "exp_log": lambda a, b: _r(torch.exp(_c(torch.stack([a, b], -1))) + torch.log(_c(torch.stack([b.abs() + 0.5, a], -1)))),
    "matmul": lambda a, b: _r(_c(torch.stack([a, b], -1)) @ _c(torch.stack([b, a], -1)).transpose(0, 1)),
    "to_complex": lambda a, b: _r(a.to(torch.complex64 if a.dtype == torch.float32 else torch.complex128) * b),
}


@pytest.mark.parametrize("dtype", sweep(DTYPES, FAST_DTYPES), ids=str)
@pytest.mark.parametrize("name", list(PAIR_CASES))
def test_complex_arithmetic(name, dtype):
    a, b = _randn(3, 4, dtype=dtype), _randn(3, 4, dtype=dtype, seed=1)
    a2, b2 = _randn(5, 6, dtype=dtype, seed=2), _randn(5, 6, dtype=dtype, seed=3)
    ds = ({0: "n", 1: "m"}, {0: "n", 1: "m"})
    if name == "sum_mean":  # torch.export specializes the reduced dimension
        ds, a2, b2 = ({0: "n"}, {0: "n"}), a2[:, :4], b2[:, :4]
    check_export(make(PAIR_CASES[name], (a, b)), (a, b), dynamic_shapes=ds, inputs2=((a2, b2), None))


def test_complex_batched_matmul_and_vector():
    x, y = _randn(2, 3, 4, 2), _randn(2, 4, 5, 2, seed=1)
    model = make(lambda p, q: (_r(torch.bmm(_c(p), _c(q))), _r(_c(p) @ _c(q[0, :, 0]))), (x, y))
    check_export(model, (x, y), dynamic_shapes=({0: "b"}, {0: "b"}), inputs2=((_randn(3, 3, 4, 2), _randn(3, 4, 5, 2)), None))


def test_view_as_real_of_a_product_with_a_pair_input():
    model = make(lambda x, y: _r(_c(x) * y), (0, 0))
    x, y = _randn(2, 3, 2), _randn(2, 3)
    onx = check_export(model, (x, y), dynamic_shapes=({0: "b"}, {0: "b"}), inputs2=((_randn(4, 3, 2), _randn(4, 3)), None))
    assert not any(i.type.tensor_type.elem_type == onnx.TensorProto.COMPLEX64 for i in onx.graph.input)


class _RotaryUnderNoGrad(torch.nn.Module):
    """DeepSeek V2's rotary embedding: complex frequencies computed in a no_grad block (a wrap_with_set_grad_enabled
    node producing a complex tensor, then an item of its outputs)."""

    @torch.no_grad()
    def frequencies(self, x):
        return torch.polar(torch.ones_like(x), x) * 0.5, x.abs()

    def forward(self, x, y):
        freqs, _ = self.frequencies(x)
        return _r(_c(y) * freqs)


def test_complex_values_of_a_no_grad_block():
    x, y = _randn(2, 3), _randn(2, 3, 2, seed=1)
    with torch.enable_grad():  # the block is a node of the graph only while gradients are enabled
        check_export(_RotaryUnderNoGrad(), (x, y), dynamic_shapes=({0: "b"}, {0: "b"}),
                     inputs2=((_randn(4, 3), _randn(4, 3, 2, seed=2)), None))


def test_angle_of_real_values_keeps_nan():
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, float("nan"), float("-inf")])
    check_export(make(torch.angle, (x,)), (x,))


def test_angle_of_complex_zero_and_axes():
    x = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, -1.0], [-1.0, 0.0], [-1.0, -1e-3], [2.0, -3.0]])
    check_export(make(lambda t: torch.angle(_c(t)), (x,)), (x,))


def test_complex_model_input_and_output_are_pairs():
    """A complex input is fed as torch.view_as_real(x); a complex output comes back as a pair."""
    model = make(lambda z: z * 2 + 1j, (0,))
    z = torch.randn(3, 4, dtype=torch.complex64)
    onx = fx2onnx.to_onnx(model, (z,), dynamic_shapes=({0: "batch"},))
    dims = [d.dim_param or d.dim_value for d in onx.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 4, 2] and onx.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    (got,) = run_onnx(onx, (torch.view_as_real(z),))
    torch.testing.assert_close(torch.from_numpy(got), torch.view_as_real(z * 2 + 1j))
    z2 = torch.randn(6, 4, dtype=torch.complex64)
    report = validate(onx, model, (z2,))
    assert report.ok, report


def _fft_cases():
    return {
        "rfft": (lambda t: _r(torch.fft.rfft(t)), False),
        "rfft_ortho_n": (lambda t: _r(torch.fft.rfft(t, n=10, norm="ortho")), False),
        "fft_of_real_forward": (lambda t: _r(torch.fft.fft(t, norm="forward")), False),
        "irfft": (lambda t: torch.fft.irfft(_c(t)), True),
        "irfft_n_ortho": (lambda t: torch.fft.irfft(_c(t), n=7, norm="ortho"), True),
        "irfft_n_padded": (lambda t: torch.fft.irfft(_c(t), n=20), True),
        "fft_n_trimmed_padded": (lambda t: _r(torch.fft.fft(_c(t), n=5) + torch.fft.fft(_c(t), n=5, dim=0)[:3, :, :5]), True),
        "fft": (lambda t: _r(torch.fft.fft(_c(t))), True),
        "ifft_ortho": (lambda t: _r(torch.fft.ifft(_c(t), norm="ortho")), True),
        "ifft_forward": (lambda t: _r(torch.fft.ifft(_c(t), dim=0, norm="forward")), True),
        "fft2": (lambda t: _r(torch.fft.fft2(_c(t))), True),
        "rfftn": (lambda t: _r(torch.fft.rfftn(t, norm="ortho")), False),
        "rfft2_irfft2": (lambda t: torch.fft.irfft2(torch.fft.rfft2(t), s=t.shape[-2:]), False),
    }


@pytest.mark.parametrize("dtype", sweep(DTYPES, FAST_DTYPES), ids=str)
@pytest.mark.parametrize("name", list(_fft_cases()))
def test_fft(name, dtype):
    fn, pair = _fft_cases()[name]
    x = _randn(3, 6, 8, *([2] if pair else []), dtype=dtype)
    atol = 1e-4 if dtype == torch.float32 else 1e-9
    check_export(make(fn, (x,)), (x,), atol=atol, rtol=1e-4)


@pytest.mark.parametrize("name", sweep(["rfft", "irfft", "fft", "fft2", "rfftn"], {"rfft", "irfft"}))
@pytest.mark.slow
def test_fft_dynamic_dims(name):
    fn, pair = _fft_cases()[name]
    x = _randn(3, 6, 8, *([2] if pair else []))
    x2 = _randn(5, 4, 10, *([2] if pair else []), seed=1)
    ds = ({0: "batch", 1: "rows", 2: "cols"},)
    onx = check_export(make(fn, (x,)), (x,), dynamic_shapes=ds, inputs2=((x2,), None))
    assert "DFT" in {n.op_type for n in onx.graph.node}


def test_fft_at_opset_20_takes_the_axis_as_an_input():
    x = _randn(3, 8)
    onx = check_export(make(lambda t: _r(torch.fft.fft(t)), (x,)), (x,), target_opset=20)
    dft = next(n for n in onx.graph.node if n.op_type == "DFT")
    assert len(dft.input) == 3 and not any(a.name == "axis" for a in dft.attribute)


def test_spectral_filter_round_trip():
    """A low-pass filter: rfft, multiply by a real mask, irfft."""
    mask = (torch.arange(5) < 3).float()
    model = make(lambda t: torch.fft.irfft(torch.fft.rfft(t) * mask, n=t.shape[-1]), (0,))
    x = torch.sin(torch.linspace(0, 6 * math.pi, 8)).repeat(2, 1) + _randn(2, 8) * 0.1
    check_export(model, (x,))


class ComplexRotary(torch.nn.Module):
    """Rotary embedding written with complex numbers (Meta's original Llama): a complex buffer."""

    def __init__(self, dim: int = 8, max_seq: int = 16):
        super().__init__()
        freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(max_seq).float(), freqs)
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles))

    def forward(self, x):  # x: batch, seq, heads, dim
        seq = x.shape[1]
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        freqs = self.freqs_cis[:seq].view(1, seq, 1, xc.shape[-1])
        out = torch.view_as_real(xc * freqs).flatten(3)
        return out.transpose(1, 2)


def test_complex_rotary_with_a_complex_buffer():
    x, x2 = _randn(2, 5, 3, 8), _randn(3, 7, 3, 8, seed=1)
    check_export(ComplexRotary(), (x,), dynamic_shapes=({0: "batch", 1: "seq"},), inputs2=((x2,), None))


def test_complex_permute_transpose_expand_unsqueeze():
    def fn(t):
        z = _c(t)
        return _r(z.permute(1, 0, 2).transpose(0, -1).unsqueeze(1).expand(-1, 3, -1, -1).squeeze(-1) * 2)

    x, x2 = _randn(2, 4, 1, 2), _randn(3, 5, 1, 2, seed=1)
    check_export(make(fn, (x,)), (x,), dynamic_shapes=({0: "a", 1: "b"},), inputs2=((x2,), None))


def test_unconverted_complex_op_is_a_clear_error():
    model = make(lambda t: torch.view_as_real(torch.tanh(torch.view_as_complex(t))), (0,))
    with pytest.raises(fx2onnx.ConversionError, match="no converter handles complex values") as info:
        fx2onnx.to_onnx(model, (_randn(3, 2),))
    assert "aten::tanh" in str(info.value) and "real pairs" in str(info.value)
