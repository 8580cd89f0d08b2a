"""Exports a model piece by piece: every submodule on its own, one report row each.

When a model does not export, the error often comes from one submodule deep
inside it. :func:`export_report` runs the model once in eager mode with hooks
recording the inputs and outputs of every submodule, then exports each
submodule alone with these inputs (capture with :func:`torch.export.export`,
conversion into ONNX, comparison of onnxruntime's results with the recorded
outputs). The rows say which pieces work and where it starts failing.

.. code-block:: python

    import pandas
    from fx2onnx import export_report
    from fx2onnx.zoo import get_tiny_model

    tiny = get_tiny_model("phi3", num_hidden_layers=1)
    rows = export_report(tiny.model, (), tiny.inputs, patches=True)
    print(pandas.DataFrame(rows)[["path", "class", "status", "max_abs"]])
"""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import os
import time
from typing import Any, Iterator, Sequence

import torch

from ..convert.api import convert_exported_program, optimize_model
from ..convert.capture import capture
from ..patches import torch_export_patches
from ..validation import compare_outputs, flatten_outputs, run_onnx

#: the exporters :func:`export_report` knows
EXPORTERS = ("to_onnx", "torch.export")

#: the columns of a report row, in order
COLUMNS = (
    "path",
    "class",
    "depth",
    "calls",
    "status",
    "capture",
    "conversion",
    "validation",
    "capture_s",
    "conversion_s",
    "validation_s",
    "max_abs",
    "error",
)


@dataclasses.dataclass
class RecordedCall:
    """The inputs and outputs of the first call of a submodule, and how many calls it got."""

    #: the positional inputs of the first call
    args: tuple
    #: the keyword inputs of the first call
    kwargs: dict[str, Any]
    #: what the first call returned
    outputs: Any = None
    #: how many times the submodule was called during the eager run
    calls: int = 0


def record_calls(
    model: torch.nn.Module, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, max_depth: int | None = None
) -> tuple[dict[str, RecordedCall], Any]:
    """Runs ``model`` once with hooks recording each submodule's first call.

    Inputs are copied before the call (a cache is modified in place by the
    model), outputs after. Submodules never called (``ModuleList``) get no entry.

    :return: ``{path: RecordedCall}`` in the order of ``named_modules`` (the
        model itself is ``""``) and the model's outputs
    """
    calls: dict[str, RecordedCall] = {}
    handles = []

    def pre_hook(path: str):
        def hook(module: torch.nn.Module, a: tuple, kw: dict) -> None:
            if path in calls:
                calls[path].calls += 1
            else:
                calls[path] = RecordedCall(copy.deepcopy(a), copy.deepcopy(kw), calls=1)

        return hook

    def post_hook(path: str):
        def hook(module: torch.nn.Module, a: tuple, kw: dict, output: Any) -> None:
            if calls[path].calls == 1 and calls[path].outputs is None:
                calls[path].outputs = copy.deepcopy(output)

        return hook

    for path, module in model.named_modules():
        if max_depth is not None and _depth(path) > max_depth:
            continue
        handles.append(module.register_forward_pre_hook(pre_hook(path), with_kwargs=True))
        handles.append(module.register_forward_hook(post_hook(path), with_kwargs=True))
    try:
        with torch.no_grad():
            outputs = model(*copy.deepcopy(tuple(args)), **copy.deepcopy(dict(kwargs or {})))
    finally:
        for handle in handles:
            handle.remove()
    order = [path for path, _ in model.named_modules() if path in calls]
    return {path: calls[path] for path in order}, outputs


def _depth(path: str) -> int:
    return 0 if path == "" else path.count(".") + 1


def _error_line(e: BaseException, limit: int = 200) -> str:
    """``Type: first line`` of the deepest cause (fx2onnx's errors wrap torch's)."""
    while e.__cause__ is not None:
        e = e.__cause__
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = f"{type(e).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextlib.contextmanager
def _patched(patches: bool | dict[str, Any]) -> Iterator[None]:
    if not patches:
        yield
        return

    options = dict(patch_transformers=True) if patches is True else dict(patches)
    with torch_export_patches(**options):
        yield


def _export_one(
    module: torch.nn.Module,
    call: RecordedCall,
    *,
    exporter: str,
    dynamic_shapes: Any,
    strict: bool,
    dispatcher: Any,
    atol: float,
    rtol: float,
) -> dict[str, Any]:
    """Captures, converts and validates one submodule; fills the status columns of its row."""

    row: dict[str, Any] = dict(capture="-", conversion="-", validation="-", status="OK", error="")
    step = "capture"
    try:
        begin = time.perf_counter()
        ep, dim_names = capture(module, call.args, call.kwargs, dynamic_shapes, strict, dispatcher=dispatcher)
        row.update(capture="OK", capture_s=time.perf_counter() - begin)
        if exporter == "torch.export":
            return row
        step = "conversion"
        begin = time.perf_counter()
        import onnx_ir as ir

        model = convert_exported_program(ep, dim_names, dispatcher=dispatcher)
        proto = ir.to_proto(optimize_model(model))
        row.update(conversion="OK", conversion_s=time.perf_counter() - begin)
        step = "validation"
        begin = time.perf_counter()
        got = run_onnx(proto, call.args, call.kwargs)
        report = compare_outputs(flatten_outputs(call.outputs), got, atol=atol, rtol=rtol)
        row.update(validation_s=time.perf_counter() - begin, max_abs=report.max_abs)
        row["validation"] = "OK" if report.ok else "FAIL"
        if not report.ok:
            row.update(status="FAIL validation", error=f"discrepancies: {report}")
    except Exception as e:
        row.update({step: "FAIL", "status": f"FAIL {step}", "error": _error_line(e)})
    return row


def export_report(
    model: torch.nn.Module,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    exporter: str = "to_onnx",
    strict: bool = False,
    patches: bool | dict[str, Any] = False,
    dispatcher: Any = None,
    max_depth: int | None = None,
    skip_classes: tuple[type, ...] = (),
    atol: float = 1e-4,
    rtol: float = 1e-3,
    progress: bool = False,
    as_frame: bool = False,
) -> Any:
    """Exports every submodule of ``model`` on its own and reports the status of each.

    One eager run records the inputs and outputs of the first call of every
    submodule (forward hooks); each one is then captured by
    :func:`torch.export.export`, converted by fx2onnx's converter and run with
    onnxruntime, its results compared with the recorded outputs.

    :param model: the model
    :param args: positional inputs
    :param kwargs: named inputs
    :param dynamic_shapes: dynamic shapes of the model's inputs (as for
        :func:`fx2onnx.to_onnx`); they only apply to the model itself, the
        submodules are exported with the shapes they received
    :param exporter: ``"to_onnx"`` (capture, conversion, validation) or
        ``"torch.export"`` (capture only)
    :param strict: strict mode of :func:`torch.export.export`
    :param patches: True exports inside
        ``fx2onnx.torch_export_patches(patch_transformers=True)``, a dict gives
        the options of :func:`fx2onnx.torch_export_patches`
    :param dispatcher: a :class:`fx2onnx.Dispatcher` with converters for custom ops
    :param max_depth: only the submodules up to this depth (the model is 0,
        ``model.layers.0`` is 3)
    :param skip_classes: submodules of these classes are not exported on their
        own (``torch.nn.Linear``, ``torch.nn.Dropout``... save time)
    :param atol: absolute tolerance of the validation
    :param rtol: relative tolerance of the validation
    :param progress: shows a progress bar (tqdm)
    :param as_frame: returns a :class:`pandas.DataFrame` instead of a list of dicts
    :return: one row per called submodule with the columns :data:`COLUMNS`:
        ``status`` is ``OK`` or ``FAIL <step>``, each step is ``OK``,
        ``FAIL`` or ``-`` (not run), ``error`` the first line of the error
    """
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}.")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"export_report expects a torch.nn.Module, got {type(model).__name__}.")
    calls, _ = record_calls(model, args, kwargs, max_depth=max_depth)
    modules = dict(model.named_modules())
    items: Any = [(p, c) for p, c in calls.items() if p == "" or not isinstance(modules[p], skip_classes)]
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc="export_report", unit="module")
    rows = []
    with _patched(patches):
        for path, call in items:
            if progress:
                items.set_postfix_str(path or type(model).__name__)
            module = modules[path]
            row = {"path": path, "class": type(module).__name__, "depth": _depth(path), "calls": call.calls}
            row.update(
                _export_one(
                    module,
                    call,
                    exporter=exporter,
                    dynamic_shapes=dynamic_shapes if path == "" else None,
                    strict=strict,
                    dispatcher=dispatcher,
                    atol=atol,
                    rtol=rtol,
                )
            )
            rows.append({c: row.get(c) for c in COLUMNS})
    if as_frame:
        import pandas

        return pandas.DataFrame(rows, columns=list(COLUMNS))
    return rows


def report_to_markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    """A markdown table of the rows (floats with 3 significant digits, the error last)."""

    def cell(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return f"{value:.3g}"
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines.extend("| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows)
    return "\n".join(lines) + "\n"


def save_report(rows: Sequence[dict[str, Any]], filename: str | os.PathLike) -> None:
    """Writes the rows as CSV, or as a markdown table when the name ends with ``.md``."""
    if str(filename).endswith(".md"):
        with open(filename, "w", encoding="utf-8") as f:
            f.write(report_to_markdown(rows))
        return
    with open(filename, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows([{c: row.get(c) for c in COLUMNS} for row in rows])


def deepest_failures(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The failing submodules none of whose failing submodules fail: where to look first.

    A submodule failing makes every module containing it fail too; the paths
    returned are the innermost ones (``""`` is the model itself).
    """
    failing = [row["path"] for row in rows if row["status"] != "OK"]
    return [
        path
        for path in failing
        if not any(other != path and (path == "" or other.startswith(path + ".")) for other in failing)
    ]
