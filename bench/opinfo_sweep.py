"""Every torch operator with an OpInfo, on its sample inputs, through ``to_onnx`` and onnxruntime.

torch's test suite describes ~700 operators (``op_db``) with sample inputs of every
shape it cares about: 0-d, empty, size-1, broadcast, keyword options. This script
wraps each sample into a module, exports it with :func:`fx2onnx.to_onnx` (static
shapes, or with ``--dynamic`` every dimension ``Dim.AUTO``: symbolic unless the
operator fixes it), runs it with onnxruntime on the same sample and compares outputs
and dtypes with eager. It prints one line per failure and a table
of counts; it measures, it does not fail (it is not a test).

    python bench/opinfo_sweep.py                          # float32, int64, bool
    python bench/opinfo_sweep.py --ops "^(max|cumsum)$" --dtypes float32 --dynamic
    python bench/opinfo_sweep.py --address tcp://host:8786   # on a running cluster (design/runner.rst)

Every operator and dtype is a task of :func:`fx2onnx.runner.run_tasks` (2 workers of a local
cluster by default, ``--workers 0`` in this process): a sample that crashes the interpreter or
hangs fails its operator (``crash``, ``timeout``) and the sweep goes on.

Half-precision samples are compared with eager within a half-precision tolerance, or,
where torch's kernels round differently (blocked sums), with float64 arithmetic: the
model is right when it is no further from it than eager.

Statuses: ``ok``; ``capture`` (torch.export fails, nothing fx2onnx converts);
``conversion`` (fx2onnx raises, with a message); ``onnxruntime`` (the model does not
load or run); ``ties`` (values right, the indices of equal values in another order,
which torch leaves unspecified); ``rounding`` (integer results within 1 of eager and
closer to exact arithmetic: torch's uint8 interpolation uses fixed-point weights); ``dtype`` and ``mismatch`` (a wrong model). Random operators, linear
algebra (unless ``--linalg``) and sparse or complex samples are left out.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import re
import signal
import warnings
from typing import Any

import numpy as np
import torch

import fx2onnx
from fx2onnx.runner import label_export_step, run_tasks
from fx2onnx.validation import compare_outputs, flatten_outputs, make_session, run_onnx, to_numpy

LEFT_OUT = re.compile(
    r"rand|normal|bernoulli|dropout|multinomial|uniform|empty|poisson|exponential|geometric|cauchy|"
    r"log_normal|_refs|resize|item|tolist|equal$|allclose|isclose|sparse|jiterator"
)
#: linear algebra, left out unless ``--linalg``: eigenvectors and singular vectors are unique up to
#: sign only, so their samples can differ from eager on a right model
LINALG = re.compile(
    r"linalg|cholesky|\blu|svd|eig|qr|lstsq|inverse|det|solve|pinv|matrix_exp|triangular|ormqr|geqrf|householder"
)


class _Sample(torch.nn.Module):
    """Calls ``fn`` with the sample's arguments, its tensors taken from the inputs."""

    def __init__(self, fn: Any, sample: Any):
        super().__init__()
        self.fn, self.sample = fn, sample

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)

        def fill(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return next(it)
            if isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
                return type(v)(fill(x) for x in v)
            return v

        return self.fn(fill(self.sample.input), *fill(list(self.sample.args)), **{k: fill(v) for k, v in self.sample.kwargs.items()})


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


# half-precision kernels round each step: a few units in the last place of their 10 (7) bits
_TOLERANCE = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)}


class _Timeout(Exception):
    pass


def _raise_timeout(*_: Any) -> None:
    raise _Timeout()


def _closer_than_eager(
    model: Any, tensors: list[torch.Tensor], expected: list, got: list, atol: float, rtol: float, upcast: bool = False
) -> bool:
    """Half precision: torch's own kernels round differently (per block, per step); the model is
    right when, against float64 arithmetic, no value is further than eager's largest error
    (rounding of a sum depends on its largest terms, not on the value)."""
    widened = {t.dtype for t in tensors if t.dtype in _TOLERANCE or (upcast and t.dtype != torch.bool)}
    if not widened:
        return False
    try:
        with torch.no_grad():
            exact = flatten_outputs(model(*[t.double() if t.dtype in widened else t.clone() for t in tensors]))
    except Exception:  # noqa: BLE001
        return False
    for e, g, x in zip(expected, got, exact):
        x = x.double()
        eager_error = (e.double() - x).abs()
        onnx_error = (torch.from_numpy(np.asarray(g).astype(np.float64)) - x).abs()
        if onnx_error.shape != eager_error.shape or (x.numel() and not bool((onnx_error <= eager_error.max() + atol + rtol * x.abs()).all())):
            return False
    return True


def _same_sorted_values(sample: Any, expected: list, got: list) -> bool:
    """argsort: the indices returned order the input the same way (ties in another order)."""
    x = sample.input
    if len(expected) != 1 or expected[0].dtype != torch.int64 or not isinstance(x, torch.Tensor) or x.shape != expected[0].shape or not x.ndim:
        return False
    dim = sample.kwargs.get("dim", sample.args[0] if sample.args else -1)
    ours = torch.from_numpy(np.asarray(got[0]))
    return torch.equal(x.take_along_dim(expected[0], dim), x.take_along_dim(ours, dim)) and bool((ours.sort(dim).values == torch.arange(x.shape[dim]).reshape([-1] + [1] * (x.ndim - 1 - dim % x.ndim))).all())


def check_sample(fn: Any, sample: Any, dynamic: bool, timeout: int = 60) -> tuple[str, str] | None:
    """``(status, message)`` for one sample, None when eager itself cannot run it."""
    tensors = _tensors([sample.input, list(sample.args), dict(sample.kwargs)])
    if any(t.is_complex() or t.layout != torch.strided for t in tensors):
        return None
    model = _Sample(fn, sample)
    try:
        with torch.no_grad():
            expected = flatten_outputs(model(*[t.clone() for t in tensors]))
    except Exception:  # noqa: BLE001 - a sample eager refuses is no test
        return None
    if not expected or any(e.is_complex() for e in expected):
        return None
    # forward(*tensors): one entry for the variadic argument, a tuple of per-tensor specs
    shapes = (tuple({i: torch.export.Dim.AUTO for i in range(t.ndim)} for t in tensors),) if dynamic and tensors else None
    signal.signal(signal.SIGALRM, _raise_timeout)
    signal.alarm(timeout)
    step = "capture"
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), label_export_step("capture"):
            onx = fx2onnx.to_onnx(model, tuple(t.clone() for t in tensors), dynamic_shapes=shapes)
        step = "onnxruntime"
        got = run_onnx(make_session(onx), tuple(t.clone() for t in tensors))
    except _Timeout:
        return step, "timeout"
    except Exception as e:  # noqa: BLE001 - every failure is a result
        step = getattr(e, "step", step)
        return step, f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:2000]}"
    finally:
        signal.alarm(0)
    for e, g in zip(expected, got):
        if to_numpy(e.reshape(-1)[:0]).dtype != np.asarray(g).dtype:
            return "dtype", f"{e.dtype} expected, {np.asarray(g).dtype} returned"
    atol, rtol = max((_TOLERANCE.get(e.dtype, (1e-4, 1e-3)) for e in expected), key=lambda t: t[0])
    report = compare_outputs(expected, got, atol=atol, rtol=rtol)
    if report.ok or _closer_than_eager(model, tensors, expected, got, atol, rtol):
        return "ok", ""
    if report.max_abs <= 1 and all(not e.is_floating_point() for e in expected) and _closer_than_eager(model, tensors, expected, got, 0.0, 0.0, upcast=True):
        # integer images interpolated: torch's uint8 kernels use fixed-point weights, the model rounds exactly
        return "rounding", str(report)
    if _same_sorted_values(sample, expected, got):
        return "ties", str(report)
    if len(expected) == 2 and expected[1].dtype == torch.int64 and compare_outputs(expected[:1], got[:1]).ok:
        # values right, indices of equal values in another order: torch does not specify it
        return "ties", str(report)
    return "mismatch", str(report)


_OPS: dict[str, Any] = {}


def _ops() -> dict[str, Any]:
    """OpInfo name (with its variant) -> OpInfo."""
    if not _OPS:
        from torch.testing._internal.common_methods_invocations import op_db

        for op in op_db:
            _OPS[op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")] = op
    return _OPS


def run_op(task: tuple[str, str, int, bool]) -> dict[str, Any]:
    """The rows of the samples of one operator and dtype, ``task = (name, dtype, samples, dynamic)``:
    a task of :func:`fx2onnx.runner.run_tasks` (the rows under ``rows``)."""
    name, dtype_name, samples, dynamic = task
    op, dtype = _ops()[name], getattr(torch, dtype_name)
    rows: list[dict[str, Any]] = []
    try:
        inputs = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:samples]
    except Exception:  # noqa: BLE001 - a sample torch cannot build is no test
        inputs = []
    for index, sample in enumerate(inputs):
        record(rows, "op", name, dtype, index, check_sample(op.op, sample, dynamic), echo=False)
    return dict(op=name, dtype=dtype_name, rows=rows, success=all(r["status"] == "ok" for r in rows), error=None)


def failed_task(task: tuple, step: str, error: str, elapsed: float) -> dict[str, Any]:
    """The row of an operator whose process hung or died: one sample row with status ``timeout`` / ``crash``."""
    row = {"op": task[0], "dtype": task[1], "sample": -1, "status": step, "message": error}
    return dict(op=task[0], dtype=task[1], rows=[row], success=False, error=error)


def echo_failures(task_row: dict[str, Any]) -> None:
    """Prints the samples of a task which are not ok (``on_row`` of the sweep)."""
    for row in task_row["rows"]:
        if row["status"] != "ok":
            key = "op" if "op" in row else "module"
            print(f"{row[key]:40s} {row['dtype']:8s} #{row['sample']} {row['status']:12s} {row['message'][:150]}",
                  flush=True)


def sweep(ops: str | None, dtypes: list[torch.dtype], samples: int, dynamic: bool, linalg: bool = False,
          workers: int = 2, timeout: float = 600.0) -> list[dict[str, Any]]:
    """Every operator x dtype as a task of :func:`fx2onnx.runner.run_tasks` (``workers=0``: in this process):
    a sample that crashes the interpreter or hangs past ``timeout`` fails that operator, the sweep goes on."""
    pattern = re.compile(ops) if ops else None
    tasks = []
    for name, op in _ops().items():
        if LEFT_OUT.search(name) or (not linalg and LINALG.search(name)) or (pattern and not pattern.search(name)):
            continue
        for dtype in dtypes:
            if dtype in op.supported_dtypes("cpu"):
                tasks.append((name, str(dtype).replace("torch.", ""), samples, dynamic))
    task_rows = run_tasks(tasks, run_op, failed_task, workers=workers, timeout=timeout, on_row=echo_failures,
                          description="opinfo")
    return [row for task_row in task_rows for row in task_row["rows"]]


STATUSES = ("ok", "ties", "rounding", "capture", "conversion", "onnxruntime", "dtype", "mismatch", "timeout",
            "crash")


def record(rows: list[dict[str, Any]], key: str, name: str, dtype: torch.dtype, index: int, result: tuple[str, str] | None,
           echo: bool = True) -> None:
    """Appends the row of one sample (``key``: what the sweep runs, ``op`` or ``module``), printed unless ok
    (``echo=False``: not printed, the sweep's process prints it)."""
    if result is None:
        return
    status, message = result
    rows.append({key: name, "dtype": str(dtype).replace("torch.", ""), "sample": index, "status": status, "message": message})
    if status != "ok" and echo:
        print(f"{name:40s} {rows[-1]['dtype']:8s} #{index} {status:12s} {message[:150]}", flush=True)


def print_summary(rows: list[dict[str, Any]], key: str, plural: str) -> None:
    """The counts of samples by status, and how many of the swept ``plural`` are right on every sample."""
    counts = collections.Counter(r["status"] for r in rows)
    right = {r[key] for r in rows} - {r[key] for r in rows if r["status"] != "ok"}
    print(f"\n{len(rows)} samples of {len({r[key] for r in rows})} {plural}, {len(right)} {plural} right on every sample")
    for status in STATUSES:
        print(f"  {status:12s} {counts.get(status, 0)}")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="regular expression on the OpInfo names")
    parser.add_argument("--dtypes", default="float32,int64,bool")
    parser.add_argument("--samples", type=int, default=3, help="samples per operator and dtype")
    parser.add_argument("--dynamic", action="store_true", help="every dimension Dim.AUTO (symbolic shapes in the converters)")
    parser.add_argument("--linalg", action="store_true", help="include the linear algebra operators")
    parser.add_argument("--workers", type=int, default=2, help="workers of the local cluster (0: in this process)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the samples of one operator")
    parser.add_argument("--address", default=None, help="a running dask cluster (tcp://host:8786), 'local' or 'pool'; "
                        "default: the environment variable FX2ONNX_CLUSTER, else a local cluster")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.address:  # read by fx2onnx.runner.run_tasks
        os.environ["FX2ONNX_CLUSTER"] = args.address
    rows = sweep(args.ops, [getattr(torch, d) for d in args.dtypes.split(",")], args.samples, args.dynamic, args.linalg,
                 args.workers, args.timeout)
    print_summary(rows, "op", "operators")
    return rows


if __name__ == "__main__":
    # the workers receive the functions of the module ``opinfo_sweep`` by name, not this script's by value
    # (their globals hold the OpInfos, which do not pickle): a remote worker needs bench/ in its PYTHONPATH
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import opinfo_sweep

    opinfo_sweep.main()
