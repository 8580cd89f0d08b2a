"""The timm and diffusers sections of the supported-models page: rows like the transformers zoo.

One row per library x model x exporter x shapes: ``shapes="batch"`` exports with a dynamic batch
and checks another batch; ``shapes="image"`` makes the image (or latent) height and width dynamic
too and checks another size. The steps are those of :data:`fx2onnx.zoo.architectures.STEPS`; a model
whose eager forward rejects the second size (a fixed window, fixed position embeddings) fails at
step ``model``: the row says the model does not allow it, not that an exporter failed.

.. code-block:: python

    from fx2onnx.zoo.library_zoo import build_library_rows

    rows, meta = build_library_rows("_doc/models/rows_timm.json", "timm", only="^resnet$")

or ``python -m fx2onnx.zoo.library_zoo timm --only '^resnet$'``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..convert.api import to_onnx
from ..frozen import check_frozen_inputs, read_frozen_inputs
from ..patches import torch_export_patches
from ..runner import (
    dynamo_export,
    first_line,
    label_export_step,
    run_tasks,
    sources_hash,
)
from ..ties import describe_ties, record_ties
from ..validation import compare_outputs, flatten_outputs, make_session, run_onnx
from .architectures import ATOL, EXPORTERS, RTOL, load_rows, save_rows
from .checkable import spread_degenerate_weights
from .diffusers_models import TINY, build_diffusers_model, diffusers_classes
from .library_report import is_stale
from .task_cases import build_task_case, task_entries
from .task_generate import GENERATE_TASKS, compare_folder_generation
from .timm_models import build_timm_model, timm_families

#: the sizes a row makes dynamic
SHAPES = ("batch", "image")
#: the sizes a library's rows make dynamic when they are not all of :data:`SHAPES`
LIBRARY_SHAPES = {"tasks": ("batch",)}
#: files which do not change the rows
NOT_KEYED = ("models/report.py", "models/library_report.py", "__main__.py", "cli/main.py", "cli/models.py", "cli/common.py")


def _libraries() -> dict[str, tuple[Callable[[], dict[str, str]], Callable[..., Any]]]:
    """library -> (discovery: {architecture: model}, builder(model, shapes) -> a case)."""

    return {"timm": (timm_families, build_timm_model), "diffusers": (diffusers_classes, build_diffusers_model),
            "tasks": (task_entries, build_task_case)}


def _args(value: Any) -> tuple:
    """The positional inputs of a case: none for a model taking keywords only (the tasks)."""
    return () if value is None else (value,)


def _empty_row(library: str, architecture: str, model: str, exporter: str, shapes: str) -> dict[str, Any]:
    row = dict(library=library, architecture=architecture, model=model, exporter=exporter, shapes=shapes,
               success=False, step=None, error=None, max_abs=None, time=None)
    if library == "tasks":  # architecture: task/model_type
        row["task"] = architecture.split("/", 1)[0]
    if exporter == "to_onnx":  # to_onnx compares the program torch.export returned with eager (its default)
        row["capture_check"] = True
    return row


#: models with more parameters are saved with external data and run from the file (a ModelProto
#: holding every weight cannot be serialized above 2 GB)
LARGE_MODEL = 200_000_000


def _export(exporter: str, case, folder: str) -> Any:
    """The exported model: a ModelProto, or the path of the saved file for a large model;
    a transformers model (``case.patch_transformers``) under ``torch_export_patches``, as the
    transformers zoo exports."""
    import onnx

    large = case.parameters > LARGE_MODEL
    path = os.path.join(folder, "model.onnx")
    patches = getattr(case, "patch_transformers", False)
    with label_export_step("capture"), (
            torch_export_patches(patch_transformers=True) if patches else contextlib.nullcontext()):
        if exporter == "dynamo":
            onx = dynamo_export(case.model, _args(case.export_input), case.export_kwargs, case.dynamic_shapes)
            if large:
                onnx.save(onx, path, save_as_external_data=True, location="model.onnx.data")
        else:
            onx = to_onnx(case.model, _args(case.export_input), case.export_kwargs,
                          dynamic_shapes=case.dynamic_shapes, filename=path if large else None,
                          external_data=True if large else None)
    return (onx, path) if large else (onx, onx)


def run_row(library: str, architecture: str, model_name: str, exporter: str, shapes: str) -> dict[str, Any]:
    """Builds, exports and checks one model: one row."""

    row = _empty_row(library, architecture, model_name, exporter, shapes)
    begin = time.perf_counter()
    step = "config"
    try:
        case = _libraries()[library][1](model_name if library == "timm" else architecture, shapes=shapes)
        step = "model"
        row["parameters"] = case.parameters
        # weights initialized toward identity (layer scales, zero heads) would hide a wrong branch
        row["spread"] = len(spread_degenerate_weights(case.model, seed=0))
        with torch.no_grad(), record_ties() as ties:
            expected = flatten_outputs(case.model(*_args(case.check_input), **case.check_kwargs))
        step = "capture"
        folder = tempfile.TemporaryDirectory()
        try:
            with torch.no_grad():
                onx, runnable = _export(exporter, case, folder.name)
        except Exception as e:
            step = getattr(e, "step", "conversion")
            raise
        row["time"] = time.perf_counter() - begin
        step = "validation"
        frozen = read_frozen_inputs(onx)
        if frozen:
            check_frozen_inputs(frozen, case.model, _args(case.check_input), case.check_kwargs)
        got = run_onnx(make_session(runnable), _args(case.check_input), case.check_kwargs)
        folder.cleanup()
        report = compare_outputs(expected, got, atol=ATOL, rtol=RTOL)
        row["max_abs"] = float(report.max_abs)
        if not report.ok:  # eager float32 may be the one which is off: both judged against float64
            judged = _judged_in_float64(case, expected, got)
            if judged is not None:
                in_float64 = judged.pop("report")
                row["float64"] = judged
                report = in_float64 if judged["onnx_ok"] else report
        if report.ok:
            row["success"], step = True, None
            if _generates(row):  # the folder exported as a user deploys it, generating
                row["generate"] = compare_folder_generation(case.model, case.model.config)
        else:
            row["error"] = f"discrepancy on the second input set: {report}"
            if ties:  # a mismatch the reference's tie-breaking may explain, said so
                row["error"] += f"; {describe_ties(ties)}"
    except Exception as e:  # noqa: BLE001 - every failure is a result
        row["error"] = first_line(e)
        if step == "config":  # a builder says which of its steps failed (the tasks: model)
            step = getattr(e, "step", None) or step
    row["step"] = step
    if row["time"] is None:
        row["time"] = time.perf_counter() - begin
    return row


def _judged_in_float64(case, expected: list, got: list) -> dict[str, Any] | None:
    """Eager float32 and the ONNX model, both compared with eager in float64 (a copy of the model
    and of the inputs): when the ONNX model is within the tolerance and eager float32 is not (a
    sigmoid of a difference scaled by 50, a long sum), the row matches; ``None`` when the model
    does not run in float64."""
    import copy

    import numpy as np
    from torch.utils import _pytree as pytree

    def double(value: Any) -> Any:
        return value.double() if isinstance(value, torch.Tensor) and value.is_floating_point() else value

    try:
        model = copy.deepcopy(case.model).double()
        args = pytree.tree_map(double, _args(case.check_input))
        kwargs = pytree.tree_map(double, dict(case.check_kwargs))
        with torch.no_grad():
            reference = flatten_outputs(model(*args, **kwargs))
    except Exception:  # noqa: BLE001 - a model which does not run in float64 is judged in float32
        return None
    if len(reference) != len(expected):
        return None
    onnx_report = compare_outputs(reference, [np.asarray(g, dtype=np.float64) for g in got], atol=ATOL, rtol=RTOL)
    eager_report = compare_outputs(reference, [e.detach().double().numpy() for e in expected], atol=ATOL, rtol=RTOL)
    return {"onnx_max_abs": float(onnx_report.max_abs), "eager_max_abs": float(eager_report.max_abs),
            "onnx_ok": onnx_report.ok, "eager_ok": eager_report.ok, "report": onnx_report}


def _generates(row: dict[str, Any]) -> bool:
    """Whether a matched row gets a ``generate`` entry (:mod:`fx2onnx.zoo.task_generate`): a to_onnx
    row of the batch shapes of a task of :data:`~fx2onnx.zoo.task_generate.GENERATE_TASKS`."""

    return (row.get("task") in GENERATE_TASKS and row["exporter"] == "to_onnx" and row["shapes"] == "batch"
            and bool(row["success"]))


def generate_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its ``generate`` entry computed (the model built again, its weights spread as
    :func:`run_row` spreads them)."""

    case = _libraries()[row["library"]][1](row["architecture"], shapes=row["shapes"])
    spread_degenerate_weights(case.model, seed=0)
    return dict(row, generate=compare_folder_generation(case.model, case.model.config))


def _run_row(task: tuple) -> dict[str, Any]:
    return run_row(*task)


def _run_generate(task: tuple) -> dict[str, Any]:
    return generate_row(task[0])


def _failed_generate(task: tuple, step: str, error: str, elapsed: float) -> dict[str, Any]:
    return dict(task[0], generate={"equal": False, "error": f"{step}: {error}", "time": elapsed})


def _failed_row(task: tuple, step: str, error: str, elapsed: float) -> dict[str, Any]:
    row = _empty_row(*task)
    row.update(step=step, error=error, time=elapsed)
    return row


_DISCOVERED: dict[str, dict[str, str]] = {}


def discover(library: str) -> dict[str, str]:
    """``{architecture: model}`` of a library (computed once per process)."""
    if library not in _DISCOVERED:
        _DISCOVERED[library] = _libraries()[library][0]()
    return _DISCOVERED[library]


def buildable(library: str, architecture: str) -> bool:
    """False for an entry the zoo cannot build yet (a diffusers class without a tiny configuration)."""
    if library == "diffusers":
        return architecture in TINY
    return True


def make_tasks(library: str, only: str | None = None, exporters: Sequence[str] | None = None,
               shapes: Sequence[str] = SHAPES) -> list[tuple]:
    """``(library, architecture, model, exporter, shapes)`` of every discovered model."""
    discovered = discover(library)
    tasks = []
    for architecture, model_name in sorted(discovered.items()):
        if only and not re.search(only, architecture):
            continue
        if not buildable(library, architecture):  # listed on the page, without rows
            continue
        for shape in shapes:
            if shape not in LIBRARY_SHAPES.get(library, SHAPES):
                continue
            for exporter in exporters or EXPORTERS:
                tasks.append((library, architecture, model_name, exporter, shape))
    if library == "tasks":  # round robin over the tasks: a run stopped early leaves no task without rows
        rank: dict[str, int] = {}
        for t in tasks:
            rank.setdefault(t[1], sum(k.split("/")[0] == t[1].split("/")[0] for k in rank))
        tasks.sort(key=lambda t: (rank[t[1]], t[1]))
    return tasks


def _key(row: dict[str, Any]) -> tuple:
    return row["architecture"], row["exporter"], row["shapes"]


def load_library_rows(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(rows, meta)`` of a rows file (empty when it does not exist)."""
    return load_rows(path)


def save_library_rows(rows: Sequence[dict[str, Any]], path: str | Path, meta: dict[str, Any]) -> None:
    """Writes the rows sorted by architecture, exporter and shapes, one a line."""
    save_rows(list(rows), path, meta, key=_key)


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock (a file of the temporary folder named after ``path``): runs writing the same
    rows file at once merge their rows instead of overwriting each other's."""
    import fcntl
    import hashlib

    name = hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:16]
    with open(os.path.join(tempfile.gettempdir(), f"fx2onnx-rows-{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_library_rows(
    path: str | Path, library: str, only: str | None = None, exporters: Sequence[str] | None = None,
    shapes: Sequence[str] = SHAPES, workers: int = 2, timeout: float = 300.0, missing_only: bool = False,
    memory_gb: float = 6.0, stale_only: bool = False, generate_missing: bool = False, regenerate: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Runs the selected rows of ``library`` and merges them into the rows file ``path``; each worker
    may use ``memory_gb`` more than it holds when it starts (a row above runs out of memory).
    ``missing_only`` keeps the rows absent from the file or timed out; ``stale_only`` the rows of the
    file run before the weights were spread (:func:`~fx2onnx.zoo.library_report.is_stale`), the
    quickest (by their last time) first: a run stopped early has rerun the most rows; ``generate_missing``
    computes only the ``generate`` entry of the matched rows which should have one and have none
    (:func:`generate_row`), the rest of each row kept; ``regenerate`` the same for every matched row
    which should have one, present or not (an entry computed by older code)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = sources_hash(skip=NOT_KEYED)
    old_rows, meta = load_library_rows(path)
    rows = {_key(r): r for r in old_rows}
    generating = generate_missing or regenerate
    if generating:  # rows of the file, no discovery
        todo = [(r,) for r in old_rows if _generates(r) and (regenerate or "generate" not in r)
                and (not only or re.search(only, r["architecture"]))]
    elif stale_only:  # rows of the file: no discovery (timm's creates ~1500 models on meta, minutes)
        todo = [(library, r["architecture"], r["model"], r["exporter"], r["shapes"]) for r in old_rows
                if is_stale(r) and (not only or re.search(only, r["architecture"]))
                and r["exporter"] in (exporters or EXPORTERS) and r["shapes"] in shapes]
        todo.sort(key=lambda t: rows[(t[1], t[3], t[4])].get("time") or 0.0)
    else:
        todo = make_tasks(library, only, exporters, shapes)
    if missing_only:
        todo = [t for t in todo if (t[1], t[3], t[4]) not in rows or rows[(t[1], t[3], t[4])]["step"] == "timeout"]
    versions = {}
    for package in ("torch", "timm", "diffusers", "torchvision", "transformers"):
        with contextlib.suppress(Exception):
            versions[package] = __import__(package).__version__.split("+")[0]
    previous_command = meta.get("command")
    meta = dict(meta, library=library, date=datetime.date.today().isoformat(), workers=workers, **versions)
    meta["discovered"] = (meta["discovered"] if (stale_only or generating) and meta.get("discovered")
                          else discover(library))
    meta["command"] = (f"python -m fx2onnx.zoo.library_zoo {library}" + (f" --only '{only}'" if only else "")
                       + ("" if set(LIBRARY_SHAPES.get(library, SHAPES)) <= set(shapes)
                          else " --shapes " + " ".join(shapes))
                       + (" --missing" if missing_only else "") + (" --stale" if stale_only else "")
                       + (" --generate-missing" if generate_missing else "") + (" --regenerate" if regenerate else ""))
    if generating and previous_command:  # the page names the command which computed the rows
        meta["command"] = previous_command

    done: set[tuple] = set()

    def on_row(row: dict[str, Any]) -> None:
        done.add(_key(row))
        if generating:  # the row keeps the hash of the code which exported it
            row["generate"]["hash"] = key
        else:
            row["hash"] = key
        rows[_key(row)] = row
        with _locked(path):  # another run may have written rows of other models meanwhile: kept
            current, _ = load_library_rows(path)
            rows.update({_key(r): r for r in current if _key(r) not in done})
            save_library_rows(list(rows.values()), path, meta)

    begin = time.perf_counter()
    if todo:
        with contextlib.suppress(KeyboardInterrupt):
            run, failed = (_run_generate, _failed_generate) if generating else (_run_row, _failed_row)
            run_tasks(todo, run, failed, workers=workers, timeout=timeout, progress=None,
                      memory_gb=memory_gb, on_row=on_row, description=library)
    meta["duration"] = time.perf_counter() - begin
    with _locked(path):
        current, _ = load_library_rows(path)
        rows.update({_key(r): r for r in current if _key(r) not in done})
        save_library_rows(list(rows.values()), path, meta)
    return sorted(rows.values(), key=_key), meta


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fx2onnx.zoo.library_zoo timm|diffusers|tasks``: computes the rows of one
    library, merges them into ``rows_<library>.json`` and prints the matches per exporter."""
    parser = argparse.ArgumentParser(prog="python -m fx2onnx.zoo.library_zoo",
                                     description="timm / diffusers / transformers tasks rows of the models page")
    parser.add_argument("library", choices=["timm", "diffusers", "tasks"])
    parser.add_argument("--only", help="regular expression on the architecture (timm family, diffusers class)")
    parser.add_argument("--exporters", nargs="*", choices=list(EXPORTERS))
    parser.add_argument("--shapes", nargs="*", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the local cluster")
    parser.add_argument("--address", default=None, help="a running dask cluster (tcp://host:8786), 'local' or "
                        "'pool'; default: the environment variable FX2ONNX_CLUSTER, else a local cluster")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--missing", action="store_true", help="only rows absent from the file or timed out")
    parser.add_argument("--stale", action="store_true", help="only the rows of the file run before the weights "
                        "were spread (marked † on the page), the quickest first")
    parser.add_argument("--generate-missing", action="store_true", help="tasks: only the generate entry of the "
                        "matched rows of the generating tasks (image-text-to-text, speech-seq2seq) which have none "
                        "(the folder exported, then generating)")
    parser.add_argument("--regenerate", action="store_true", help="tasks: as --generate-missing, the generate "
                        "entry of every matched row which should have one computed again, present or not")
    parser.add_argument("--memory-gb", type=float, default=6.0, help="memory a worker may add (GB)")
    parser.add_argument("--out", default="_doc/models", help="folder of the rows file rows_<library>.json")
    args = parser.parse_args(argv)
    if args.address:  # read by fx2onnx.runner.run_tasks
        os.environ["FX2ONNX_CLUSTER"] = args.address
    path = Path(args.out) / f"rows_{args.library}.json"
    rows, meta = build_library_rows(path, args.library, args.only, args.exporters, args.shapes,
                                    args.workers, args.timeout, args.missing, args.memory_gb, args.stale,
                                    args.generate_missing, args.regenerate)
    for exporter in args.exporters or EXPORTERS:
        for shape in args.shapes:
            mine = [r for r in rows if r["exporter"] == exporter and r["shapes"] == shape]
            print(f"{exporter:<8} {shape:<6} rows {len(mine):>3} matched {sum(r['success'] for r in mine):>3}")
    print(f"{len(rows)} rows in {path} ({meta['duration']:.0f} s)")
    return 0


if __name__ == "__main__":
    # the module's own functions, not __main__'s: dask pickles __main__'s by value, with their globals
    from fx2onnx.zoo import library_zoo

    raise SystemExit(library_zoo.main())
