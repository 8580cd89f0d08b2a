"""Run an ONNX model with onnxruntime and compare it with eager PyTorch.

Every model exported in tests, examples and scenarios goes through
:func:`validate`, so that no wrong model passes silently.

.. code-block:: python

    import torch, fx2onnx

    model = torch.nn.Linear(4, 2).eval()
    x = torch.randn(3, 4)
    onx = torch.onnx.export(model, (x,), dynamo=True).model_proto
    report = fx2onnx.validate(onx, model, (torch.randn(5, 4),))
    assert report.ok, report
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import numpy as np
import onnx
import torch

from .flatten import cache_flattening, flatten_inputs, flatten_outputs  # noqa: F401 (public here too)
from .frozen import check_frozen_inputs, read_frozen_inputs
from .ort_values import ort_value_to_numpy as _ort_value_to_numpy  # noqa: F401 (the old private name)


def to_numpy(value: Any) -> np.ndarray:
    """Converts a tensor or a Python scalar into a numpy array (bfloat16 -> ml_dtypes)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            import ml_dtypes

            return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return value.numpy()
    if isinstance(value, bool):
        return np.array(value, dtype=np.bool_)
    if isinstance(value, int):
        return np.array(value, dtype=np.int64)
    if isinstance(value, float):
        return np.array(value, dtype=np.float32)
    return np.asarray(value)


def make_session(onnx_model: onnx.ModelProto | str | os.PathLike, providers: Sequence[str] | None = None):
    """Creates an onnxruntime InferenceSession from a ModelProto or a path."""
    import onnxruntime

    if isinstance(onnx_model, (str, os.PathLike)):
        if not os.path.exists(onnx_model):
            raise FileNotFoundError(f"ONNX model {str(onnx_model)!r} does not exist.")
        source: Any = str(onnx_model)
    else:
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in onnx_model.graph.initializer):
            raise ValueError(
                "The ModelProto refers to weights in an external data file (to_onnx returns it so when it "
                "saved the weights apart): give the path of the saved .onnx file instead."
            )
        source = onnx_model.SerializeToString()
    opts = onnxruntime.SessionOptions()
    opts.log_severity_level = 3
    return onnxruntime.InferenceSession(
        source, opts, providers=list(providers or ["CPUExecutionProvider"])
    )


def make_feeds(sess_or_model: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Maps flattened inputs to the input names of an ONNX model or session.

    Raises a ValueError naming both lists when the counts do not match.
    """
    if isinstance(sess_or_model, onnx.ModelProto):
        names = [i.name for i in sess_or_model.graph.input]
    else:
        names = [i.name for i in sess_or_model.get_inputs()]
    flat = flatten_inputs(args, kwargs)
    if len(flat) != len(names):
        # exporters drop inputs turned into constants (Python scalars): keep tensors only
        tensors = [v for v in flat if isinstance(v, torch.Tensor)]
        if len(tensors) == len(names):
            flat = tensors
        else:
            raise ValueError(
                f"The ONNX model expects {len(names)} inputs {names} but the given args/kwargs "
                f"flatten into {len(flat)} values ({len(tensors)} tensors). Check the order and "
                f"structure of the inputs (None values are dropped)."
            )
    # a complex input is exported as a real pair (trailing dimension 2) unless the model says otherwise
    if isinstance(sess_or_model, onnx.ModelProto):
        complex_types = (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128)
        complex_names = {i.name for i in sess_or_model.graph.input if i.type.tensor_type.elem_type in complex_types}
    else:
        complex_names = {i.name for i in sess_or_model.get_inputs() if "complex" in str(i.type)}
    return {name: to_numpy(_as_pair(v) if name not in complex_names else v) for name, v in zip(names, flat)}


def _as_pair(value: Any) -> Any:
    """A complex tensor as its real pair (``torch.view_as_real``), how fx2onnx exports it."""
    if isinstance(value, torch.Tensor) and value.is_complex():
        return torch.view_as_real(value.resolve_conj().resolve_neg())
    return value


def run_onnx(
    onnx_model: Any,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    providers: Sequence[str] | None = None,
) -> list[np.ndarray]:
    """Runs an ONNX model (ModelProto, path or session) on inputs given like the torch model's."""
    sess = onnx_model if hasattr(onnx_model, "get_inputs") else make_session(onnx_model, providers)
    return run_session(sess, make_feeds(sess, args, kwargs))


def run_session(sess: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``sess.run(None, feeds)``, also when inputs or outputs are bfloat16.

    onnxruntime's numpy bridge knows no bfloat16: such models go through OrtValues
    (the inputs tagged with their ONNX type, the outputs copied out as ``ml_dtypes.bfloat16``).
    """
    if not any("bfloat16" in a.type for a in [*sess.get_inputs(), *sess.get_outputs()]):
        return sess.run(None, feeds)
    import onnxruntime

    values = {
        name: onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(
            np.require(a, requirements="C").view(np.uint16), onnx.TensorProto.BFLOAT16
        )
        if a.dtype.name == "bfloat16"
        else onnxruntime.OrtValue.ortvalue_from_numpy(np.require(a, requirements="C"))
        for name, a in feeds.items()
    }
    return [_ort_value_to_numpy(v) for v in sess.run_with_ort_values(None, values)]


@dataclasses.dataclass
class ValidationReport:
    """What :func:`validate` found: discrepancies per output and overall."""

    #: the largest absolute difference over every output
    max_abs: float
    #: the largest relative difference over every output (divided by ``|expected| + 1e-7``)
    max_rel: float
    #: the number of outputs compared
    n_outputs: int
    #: the absolute tolerance
    atol: float
    #: the relative tolerance
    rtol: float
    #: one dictionary per output with the keys ``index``, ``shape``, ``expected_shape``, ``abs``, ``rel``, ``ok``
    #: and a ``reason`` when the shapes differ
    details: list[dict[str, Any]]

    @property
    def ok(self) -> bool:
        """Whether every output is within ``atol + rtol * |expected|`` (equal for integers and booleans)."""
        return all(d["ok"] for d in self.details)

    def __str__(self) -> str:
        status = "OK" if self.ok else "MISMATCH"
        return (
            f"{status}: {self.n_outputs} output(s), max abs diff {self.max_abs:.3g}, "
            f"max rel diff {self.max_rel:.3g} (atol={self.atol}, rtol={self.rtol})"
        )


def compare_outputs(
    expected: Sequence[torch.Tensor], got: Sequence[np.ndarray], atol: float = 1e-4, rtol: float = 1e-3
) -> ValidationReport:
    """Compares eager tensors with onnxruntime arrays, output by output."""
    if len(expected) != len(got):
        raise ValueError(
            f"Eager model returns {len(expected)} tensors, the ONNX model {len(got)} outputs."
        )
    details = []
    max_abs = max_rel = 0.0
    for i, (e, g) in enumerate(zip(expected, got)):
        g_np = np.asarray(g)
        e_np = to_numpy(e if np.iscomplexobj(g_np) else _as_pair(e))
        d: dict[str, Any] = {"index": i, "expected_shape": e_np.shape, "shape": g_np.shape}
        if e_np.shape != g_np.shape:
            d.update(ok=False, abs=np.inf, rel=np.inf, reason="shape mismatch")
        elif e_np.size == 0:
            d.update(ok=True, abs=0.0, rel=0.0)
        else:
            ef = e_np.astype(np.float64)
            gf = g_np.astype(np.float64)
            same_nan = np.isnan(ef) & np.isnan(gf)
            same_inf = np.isinf(ef) & (ef == gf)
            with np.errstate(invalid="ignore"):  # inf - inf: a nan, counted as an infinite difference below
                diff = np.where(same_nan | same_inf, 0.0, np.abs(ef - gf))
            diff = np.where(np.isnan(diff), np.inf, diff)
            rel = diff / (np.abs(ef) + 1e-7)
            a, r = float(diff.max()), float(rel.max())
            d.update(abs=a, rel=r, ok=bool(np.all(diff <= atol + rtol * np.abs(np.nan_to_num(ef)))))
            if e_np.dtype == np.bool_ or np.issubdtype(e_np.dtype, np.integer):
                d["ok"] = bool(np.array_equal(e_np, g_np))
        max_abs = max(max_abs, d["abs"])
        max_rel = max(max_rel, d["rel"])
        details.append(d)
    return ValidationReport(max_abs, max_rel, len(expected), atol, rtol, details)


def validate(
    onnx_model: onnx.ModelProto | str | os.PathLike,
    model: torch.nn.Module | Any,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    raise_on_mismatch: bool = False,
    providers: Sequence[str] | None = None,
) -> ValidationReport:
    """Runs ``onnx_model`` with onnxruntime and ``model`` in eager on the same inputs.

    :param onnx_model: ModelProto, a path, or an onnxruntime session
    :param model: the torch module (or any callable) the ONNX model was exported from
    :param args: positional inputs, like the module takes them
    :param kwargs: keyword inputs
    :param atol: absolute tolerance (float32: 1e-4 by default)
    :param rtol: relative tolerance
    :param raise_on_mismatch: raise an AssertionError instead of returning a failing report
    :return: a :class:`ValidationReport` (``report.ok``, ``report.max_abs``...)
    :raises fx2onnx.frozen.FrozenInputError: an input differs from what the export
        froze (recorded by :func:`fx2onnx.to_onnx` in the model's metadata: a scalar's
        value, a list's length)
    """
    import copy

    # an input which differs from what the export froze gives wrong numbers: refuse it
    frozen = read_frozen_inputs(onnx_model)
    if frozen:
        check_frozen_inputs(frozen, model, args, kwargs)
    # eager may modify its inputs in place: run it on a copy
    eager_args, eager_kwargs = copy.deepcopy((tuple(args), dict(kwargs or {})))
    with torch.no_grad():
        expected = flatten_outputs(model(*eager_args, **eager_kwargs))
    got = run_onnx(onnx_model, args, kwargs, providers=providers)
    report = compare_outputs(expected, got, atol=atol, rtol=rtol)
    if raise_on_mismatch and not report.ok:
        raise AssertionError(f"ONNX model does not match eager: {report}\n{report.details}")
    return report
