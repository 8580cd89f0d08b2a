"""Runs the zoo: every case x exporter x static/dynamic, one task each, in worker processes.

A static run exports without dynamic shapes and checks the model on the first
input set (the shapes it was exported with). A dynamic run exports with the
case's dynamic shapes and checks the model on the second input set, whose shapes
differ. ONNX models run on onnxruntime; exported programs run with
``ep.module()``; both are compared with eager PyTorch, and a difference above
the case's tolerance is a failure at step ``discrepancy``.

.. code-block:: python

    from fx2onnx.scenarios import run

    rows = run(["OneTensor", "IfOnValue"], exporters=["export-nostrict", "custom"], workers=0)
    print([(r["case"], r["exporter"], r["dynamic"], r["success"]) for r in rows])
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Sequence

import torch

from ..convert.api import to_onnx
from ..convert.dispatcher import Dispatcher
from ..runner import dynamo_export, first_line, label_export_step, run_tasks
from ..scenario_exporters import EXPORTERS
from ..validation import (
    compare_outputs,
    flatten_outputs,
    make_session,
    run_onnx,
    to_numpy,
)
from .cases import get_case, get_cases
from .text import fx_short_text, onnx_short_text

#: exporters producing an ExportedProgram (the others produce ONNX)
PROGRAM_EXPORTERS = ("export-strict", "export-nostrict", "export-nostrict-decall")
ONNX_EXPORTERS = ("dynamo", "custom", "custom-strict")
#: the steps a task can fail at
STEPS = ("export", "conversion", "run", "onnxruntime", "discrepancy", "timeout", "crash")
#: lines kept from a graph printed in a row
MAX_GRAPH_LINES = 60


def _eager(case, index: int) -> list[torch.Tensor]:
    args, kwargs = case.input_set(index)
    with torch.no_grad():
        return flatten_outputs(case.make_model()(*args, **kwargs))


def _export_program(case, exporter: str, dynamic: bool) -> torch.export.ExportedProgram:
    args, kwargs = case.input_set(0)
    ep = torch.export.export(
        case.make_model(),
        args,
        kwargs=kwargs,
        dynamic_shapes=case.torch_dynamic_shapes() if dynamic else None,
        strict=exporter == "export-strict",
    )
    if exporter == "export-nostrict-decall":
        ep = ep.run_decompositions()
    return ep


def _export_onnx(case, exporter: str, dynamic: bool):
    """Returns the model proto; raises with the step reached in ``exc.step``."""
    args, kwargs = case.input_set(0)
    model = case.make_model()
    with label_export_step("export"):
        if exporter == "dynamo":
            return dynamo_export(
                model, args, kwargs, case.torch_dynamic_shapes() if dynamic else None,
                translations=case.translations,
            )

        return to_onnx(
            model,
            args,
            kwargs,
            dynamic_shapes=case.dynamic_shapes if dynamic else None,
            strict=exporter == "custom-strict",
            dispatcher=Dispatcher(case.converters) if case.converters else None,
        )


def run_task(case_name: str, exporter: str, dynamic: bool) -> dict[str, Any]:
    """Exports one case with one exporter, runs it and compares it with eager: one row."""
    if exporter not in EXPORTERS:
        raise ValueError(f"Unknown exporter {exporter!r}, expected one of {list(EXPORTERS)}.")
    case = get_case(case_name)
    row: dict[str, Any] = dict(
        case=case_name, family=case.family, exporter=exporter, dynamic=dynamic,
        success=False, step=None, error=None, max_abs=None, time=None, graph=None,
    )
    if dynamic and not case.has_dynamic:
        raise ValueError(f"Case {case_name!r} has no dynamic shapes: run it static only.")
    index = 1 if dynamic else 0
    begin = time.perf_counter()
    step = "export"
    try:
        if exporter in PROGRAM_EXPORTERS:
            ep = _export_program(case, exporter, dynamic)
            row["graph"] = fx_short_text(ep.graph, MAX_GRAPH_LINES)
            step = "run"
            args, kwargs = case.input_set(index)
            with torch.no_grad():
                got = [to_numpy(t) for t in flatten_outputs(ep.module()(*args, **kwargs))]
        else:
            try:
                onx = _export_onnx(case, exporter, dynamic)
            except Exception as e:
                step = getattr(e, "step", "conversion")
                raise
            row["graph"] = onnx_short_text(onx, MAX_GRAPH_LINES)
            step = "onnxruntime"
            args, kwargs = case.input_set(index)
            got = run_onnx(make_session(onx), args, kwargs)
        step = "discrepancy"
        report = compare_outputs(_eager(case, index), got, atol=case.atol)
        row["max_abs"] = float(report.max_abs)
        if report.ok:
            row["success"] = True
            step = None
        else:
            row["error"] = f"{report} on input set {index}"
    except Exception as e:  # noqa: BLE001 - every failure is a result
        row["error"] = first_line(e)
    row["step"] = step
    row["time"] = time.perf_counter() - begin
    if exporter == "export-strict" or exporter == "custom-strict":
        torch._dynamo.reset()
    return row


def make_tasks(cases: Iterable[str], exporters: Sequence[str], dynamic: Sequence[bool]) -> list[tuple[str, str, bool]]:
    """The list of ``(case, exporter, dynamic)``: dynamic runs only for cases with dynamic shapes."""
    tasks = []
    for name in cases:
        case = get_case(name)
        for exporter in exporters:
            for dyn in dynamic:
                if dyn and not case.has_dynamic:
                    continue
                tasks.append((name, exporter, bool(dyn)))
    return tasks


def _run_task(task: tuple[str, str, bool]) -> dict[str, Any]:
    return run_task(*task)


def _failed_row(task: tuple[str, str, bool], step: str, error: str, elapsed: float) -> dict[str, Any]:
    case = get_case(task[0])
    return dict(
        case=task[0], family=case.family, exporter=task[1], dynamic=task[2], success=False,
        step=step, error=error, max_abs=None, time=elapsed, graph=None,
    )


def run(
    cases: Iterable[str] | None = None,
    exporters: Sequence[str] | None = None,
    dynamic: Sequence[bool] = (False, True),
    workers: int = 2,
    timeout: float = 180.0,
    progress: bool | None = None,
    max_tasks_per_worker: int = 400,
    mp_context: str | None = None,
) -> list[dict[str, Any]]:
    """Runs cases x exporters x static/dynamic and returns one row (a dict) per task.

    :param cases: case names (default: every case of :func:`fx2onnx.scenarios.cases.get_cases`)
    :param exporters: exporter names, keys of :data:`EXPORTERS` (default: all)
    :param dynamic: which runs, ``False`` static and ``True`` dynamic
    :param workers: number of worker processes; 0 runs every task in this process
        (no protection against hangs then)
    :param timeout: seconds after which a task is killed (its row says ``timeout``)
    :param progress: show a tqdm progress bar (default: when stderr is a terminal)
    :param max_tasks_per_worker: a worker is replaced after that many tasks
    :param mp_context: ``fork`` or ``spawn`` (default: fork on Linux)
    :return: rows with keys ``case, family, exporter, dynamic, success, step, error,
        max_abs, time, graph``; ``step`` is the step which failed (None on success)
    """
    names = list(cases) if cases is not None else list(get_cases())
    exporters = list(exporters or EXPORTERS)
    unknown = [e for e in exporters if e not in EXPORTERS]
    if unknown:
        raise ValueError(f"Unknown exporters {unknown}, expected some of {list(EXPORTERS)}.")
    tasks = make_tasks(names, exporters, dynamic)
    return run_tasks(tasks, _run_task, _failed_row, workers=workers, timeout=timeout, progress=progress,
                     max_tasks_per_worker=max_tasks_per_worker, mp_context=mp_context, description="scenarios")
