"""The model zoo: every discovered architecture through the exporters, without and with a cache.

One row per architecture x exporter x cache. A row goes through the steps
:data:`STEPS`: the tiny configuration (``config``), the model and its inputs
(``model``: an eager forward pass, the cache filled by a first pass),
``capture`` (:func:`torch.export.export`, inside the exporter), ``conversion``
(to ONNX) and ``validation``: the model is exported with the first input set
and dynamic batch, sequence and cache lengths, then run by onnxruntime on the
second input set (other batch, sequence and cache lengths, a cache longer than
any sliding window) and compared with eager. Every export runs under
:func:`fx2onnx.torch_export_patches` (``patch_transformers=True``).

Each row runs in a worker process with a timeout (:mod:`fx2onnx.runner`).
:func:`build_rows` merges new rows into a JSON file, so that a run restricted
with ``only`` refreshes some architectures and keeps the others.

.. code-block:: python

    from fx2onnx.zoo.architectures import run

    rows = run(only="^(llama|gpt2)$", exporters=["to_onnx"], workers=0)
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from ..convert.api import to_onnx
from ..frozen import check_frozen_inputs, read_frozen_inputs
from ..inputs.discover import discover_architectures, get_architecture, tiny_config
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
from .generation import compare_generation
from .zoo_inputs import CacheFlatteningError, build_zoo_model

#: exporter name -> what it runs
EXPORTERS: dict[str, str] = {
    "to_onnx": "fx2onnx.to_onnx(strict=False)",
    "dynamo": "torch.onnx.export(dynamo=True)",
}
#: the steps of a row, in order; a failing row says which one failed
STEPS = ("config", "model", "capture", "conversion", "validation", "timeout", "crash")
#: tolerance of the comparison with eager (float32, random weights)
ATOL, RTOL = 1e-3, 1e-3
#: files which do not change the rows (the zoo rows do not depend on the scenario zoo)
NOT_KEYED = ("models/report.py", "__main__.py")
#: the rows file written by :func:`build_rows`
ROWS_FILE = "rows.json"


def _empty_row(name: str, kind: str, exporter: str, cache: bool) -> dict[str, Any]:
    row = dict(architecture=name, kind=kind, exporter=exporter, cache=cache, success=False,
               step=None, error=None, max_abs=None, time=None)
    if exporter == "to_onnx":  # to_onnx compares the program torch.export returned with eager (its default)
        row["capture_check"] = True
    return row


def _export(exporter: str, model, kwargs: dict[str, Any], dynamic_shapes: Any):
    """Exports with one exporter; raises with ``step`` set to ``capture`` or ``conversion``."""
    with label_export_step("capture"):
        if exporter == "dynamo":
            return dynamo_export(model, (), kwargs, dynamic_shapes)

        return to_onnx(model, (), kwargs, dynamic_shapes=dynamic_shapes)


def run_row(name: str, exporter: str, cache: bool) -> dict[str, Any]:
    """Exports one architecture with one exporter, without or with a cache: one row."""

    if exporter not in EXPORTERS:
        raise ValueError(f"Unknown exporter {exporter!r}, expected one of {list(EXPORTERS)}.")
    arch = get_architecture(name)
    row = _empty_row(name, arch.kind, exporter, cache)
    begin = time.perf_counter()
    step = "config"
    try:
        if arch.skip:
            raise ValueError(f"skipped: {arch.skip}")
        tiny_config(arch)
        step = "model"
        try:
            zoo = build_zoo_model(arch, with_cache=cache)
        except CacheFlatteningError:
            step = "capture"
            raise
        with torch.no_grad(), record_ties() as ties:
            expected = flatten_outputs(zoo.model(**zoo.copy_inputs(1)))
        step = "capture"
        try:
            with torch_export_patches(patch_transformers=True), torch.no_grad():
                onx = _export(exporter, zoo.model, zoo.copy_inputs(0), zoo.dynamic_shapes)
        except Exception as e:
            step = getattr(e, "step", "conversion")
            raise
        row["time"] = time.perf_counter() - begin
        step = "validation"
        frozen = read_frozen_inputs(onx)
        if frozen:  # what the export said it froze: refused as fx2onnx.validate refuses it
            check_frozen_inputs(frozen, zoo.model, (), zoo.copy_inputs(1))
        got = run_onnx(make_session(onx), (), zoo.copy_inputs(1))
        report = compare_outputs(expected, got, atol=ATOL, rtol=RTOL)
        row["max_abs"] = float(report.max_abs)
        if report.ok:
            row["success"] = True
            step = None
            if cache and exporter == "to_onnx" and arch.kind == "causal":
                # the "generate" column: greedy tokens of fx2onnx.generate vs transformers
                row["generate"] = compare_generation(zoo.model, onx)
        else:
            row["error"] = f"discrepancy on the second input set: {report}"
            if ties:  # a mismatch the reference's tie-breaking may explain, said so
                row["error"] += f"; {describe_ties(ties)}"
    except Exception as e:  # noqa: BLE001 - every failure is a result
        row["error"] = first_line(e)
    row["step"] = step
    if row["time"] is None:
        row["time"] = time.perf_counter() - begin
    return row


def _run_row(task: tuple[str, str, bool]) -> dict[str, Any]:
    return run_row(*task)


def _failed_row(task: tuple[str, str, bool], step: str, error: str, elapsed: float) -> dict[str, Any]:
    row = _empty_row(task[0], get_architecture(task[0]).kind, task[1], task[2])
    row.update(step=step, error=error, time=elapsed)
    return row


#: architectures run first (widely used families, the failures the zoo was made for):
#: an interrupted run covers them, the others follow in name order
PRIORITY = (
    "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3_text", "falcon", "mixtral",
    "qwen2_moe", "qwen3_moe", "deepseek_v3", "mamba", "granitemoe", "granitemoehybrid", "gptj", "codegen",
    "cohere", "glm", "gpt2", "gpt_neox", "phi", "olmo", "bloom", "opt", "bart", "t5", "bert", "roberta",
)


def select_architectures(only: str | None = None, include_skipped: bool = False) -> list[str]:
    """Names of the discovered architectures matching the regular expression ``only``
    (:data:`PRIORITY` first, then in name order)."""

    names = [a.name for a in discover_architectures() if include_skipped or not a.skip]
    if only:
        names = [n for n in names if re.search(only, n)]
    first = [n for n in PRIORITY if n in names]
    return first + sorted(set(names) - set(first))


def skipped_architectures() -> list[tuple[str, str, str]]:
    """``(architecture, kind, reason)`` of the discovered architectures the zoo does not run."""

    return [(a.name, a.kind, a.skip) for a in discover_architectures() if a.skip]


def make_tasks(names: Sequence[str], exporters: Sequence[str]) -> list[tuple[str, str, bool]]:
    """``(architecture, exporter, cache)`` for every name: with a cache only for decoders and seq2seq."""

    tasks = []
    for name in names:
        caches = (False,) if get_architecture(name).kind == "masked" else (False, True)
        for cache in caches:
            for exporter in exporters:
                tasks.append((name, exporter, cache))
    return tasks


def run(
    only: str | None = None,
    exporters: Sequence[str] | None = None,
    workers: int = 2,
    timeout: float = 300.0,
    progress: bool | None = None,
    memory_gb: float | None = 6.0,
    on_row=None,
) -> list[dict[str, Any]]:
    """Runs the zoo: one row per architecture x exporter x cache (see :func:`run_row`).

    :param only: regular expression restricting the architectures (model types)
    :param exporters: keys of :data:`EXPORTERS` (default: all)
    :param workers: worker processes (0: in this process, no protection against crashes)
    :param timeout: seconds after which a row is killed (step ``timeout``)
    :param progress: tqdm progress bar (default: when stderr is a terminal)
    :param memory_gb: memory a worker may add before a row fails with a MemoryError
    :param on_row: called with every row as soon as it is known
    """
    exporters = list(exporters or EXPORTERS)
    unknown = [e for e in exporters if e not in EXPORTERS]
    if unknown:
        raise ValueError(f"Unknown exporters {unknown}, expected some of {list(EXPORTERS)}.")
    tasks = make_tasks(select_architectures(only), exporters)
    return run_tasks(tasks, _run_row, _failed_row, workers=workers, timeout=timeout, progress=progress,
                     memory_gb=memory_gb, on_row=on_row, description="models")


def load_rows(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(rows, meta)`` from a rows file (empty when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return [], {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["rows"], data.get("meta", {})


def _without_temporary_paths(text: str) -> str:
    """``text`` with every path under the temporary directory (a row's error naming the checkpoint
    it read) written ``<temporary folder>``: a stored row must not depend on the run's folders."""
    return re.sub(re.escape(tempfile.gettempdir()) + r"/[^'\"\s\\]+", "<temporary folder>", text)


def save_rows(rows: list[dict[str, Any]], path: str | Path, meta: dict[str, Any], key=None) -> None:
    """Writes rows sorted by ``key`` (architecture, exporter and cache by default), one row a line."""
    rows = sorted(rows, key=key or (lambda r: (r["architecture"], r["exporter"], r["cache"])))
    body = _without_temporary_paths(",\n".join(json.dumps(r, sort_keys=True) for r in rows))
    Path(path).write_text('{"meta": ' + json.dumps(meta, indent=1, sort_keys=True) + ',\n"rows": [\n'
                          + body + "\n]}\n", encoding="utf-8")


def lacks_generation(row: dict[str, Any]) -> bool:
    """Whether a row should have a ``generate`` entry and has none: a decoder
    (``causal``) exported by to_onnx with a cache, matching eager."""
    return (row["exporter"] == "to_onnx" and row["cache"] and row["kind"] == "causal" and row["success"]
            and "generate" not in row)


def _key(row: dict[str, Any]) -> tuple[str, str, bool]:
    return row["architecture"], row["exporter"], row["cache"]


def build_rows(
    path: str | Path,
    only: str | None = None,
    exporters: Sequence[str] | None = None,
    workers: int = 2,
    timeout: float = 300.0,
    use_cache: bool = True,
    progress: bool | None = None,
    missing_only: bool = False,
    generate_missing: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Runs the selected rows and merges them into the rows file ``path``; returns ``(rows, meta)``.

    A row is run again only when the sources of fx2onnx or the versions changed
    since it was computed (its ``hash``), or with ``use_cache=False``. Rows of
    other architectures are kept; the file is saved after every row, so an
    interrupted run keeps what it computed. With ``missing_only``, only the rows
    absent from the file or killed by a timeout run (an interrupted run goes on where
    it stopped). With ``generate_missing``, only the rows of :func:`lacks_generation` run
    (a decoder matched with a cache, without its ``generate`` column).
    """
    import transformers

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = sources_hash(skip=NOT_KEYED)
    old_rows, meta = load_rows(path)
    rows = {_key(r): r for r in old_rows}
    wanted = make_tasks(select_architectures(only), list(exporters or EXPORTERS))
    if generate_missing:
        todo = [t for t in wanted if t in rows and lacks_generation(rows[t])]
    elif missing_only:
        todo = [t for t in wanted if t not in rows or rows[t]["step"] == "timeout"]
    else:
        todo = [t for t in wanted if not use_cache or rows.get(t, {}).get("hash") != key]
    meta = dict(meta)
    restricted = bool(exporters) and set(exporters) != set(EXPORTERS)
    command = "python -m fx2onnx models" + (f" --only '{only}'" if only else "") + (" --missing" if missing_only else "")
    command += " --generate-missing" if generate_missing else ""
    if restricted:
        command += " --exporters " + " ".join(exporters)
    meta.update(
        torch=torch.__version__.split("+")[0],
        transformers=transformers.__version__,
        date=datetime.date.today().isoformat(),
        workers=workers,
    )
    if (only or restricted or generate_missing) and meta.get("command"):
        # a few architectures or one exporter run again: the file is still the one the full command made
        meta["updated_by"] = command
    else:
        meta["command"] = command
        meta.pop("updated_by", None)

    def on_row(row: dict[str, Any]) -> None:
        row["hash"] = key
        rows[_key(row)] = row
        save_rows(list(rows.values()), path, meta)

    begin = time.perf_counter()
    if todo:
        with contextlib.suppress(KeyboardInterrupt):
            run_tasks(todo, _run_row, _failed_row, workers=workers, timeout=timeout, progress=progress,
                      memory_gb=6.0, on_row=on_row, description="models")
    meta["duration"] = meta.get("duration", 0.0) if not todo else time.perf_counter() - begin
    meta["computed"] = len(todo)
    save_rows(list(rows.values()), path, meta)
    return sorted(rows.values(), key=lambda r: _key(r)), meta
