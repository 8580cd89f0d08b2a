"""Runs the zoo and writes its pages, reusing the last results when nothing changed.

The command line (``python -m fx2onnx scenarios --out <dir>``) and the
documentation build (``_doc/gen_scenarios.py``) both call :func:`build_pages`,
so they produce the same files. The results are stored in ``<dir>/rows.json``
with a hash of the sources of fx2onnx (cases included) and of the versions of
torch, onnx and onnxruntime: when the hash did not change, the zoo does not run again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from ..runner import sources_hash as _sources_hash
from .report import load_rows, save_rows, write_pages
from .run import run

ROWS_FILE = "rows.json"


#: files which only render the results or belong to the models zoo: changing them
#: does not invalidate the rows
RENDERING_FILES = (
    "scenarios/report.py", "scenarios/build.py", "__main__.py", "runner.py", "cli/main.py", "cli/scenarios.py",
    "cli/common.py",
    "models/discover.py", "models/zoo.py", "models/zoo_inputs.py", "models/report.py",
)


def sources_hash(extra: Any = None) -> str:
    """The key of the results: the sources of fx2onnx but :data:`RENDERING_FILES`, versions, options."""
    return _sources_hash(extra, skip=RENDERING_FILES)


def build_pages(
    out_dir: str | Path,
    cases: Sequence[str] | None = None,
    exporters: Sequence[str] | None = None,
    workers: int = 2,
    timeout: float = 180.0,
    use_cache: bool = True,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Runs the zoo (or reuses ``rows.json``), writes the pages into ``out_dir``, returns the metadata."""
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    key = sources_hash((sorted(cases) if cases else None, sorted(exporters) if exporters else None))
    rows_path = out / ROWS_FILE
    if use_cache and rows_path.exists():
        rows, meta = load_rows(rows_path)
        if meta.get("hash") == key:
            meta = {**meta, "cached": True}
            write_pages(rows, out, meta)
            return meta
    begin = time.perf_counter()
    rows = run(cases, exporters, workers=workers, timeout=timeout, progress=progress)
    meta = {
        "hash": key,
        "duration": time.perf_counter() - begin,
        "workers": workers,
        "tasks": len(rows),
        "torch": torch.__version__,
    }
    save_rows(rows, rows_path, meta)
    write_pages(rows, out, meta)
    return meta
