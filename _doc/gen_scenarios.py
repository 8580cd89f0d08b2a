"""Build-time page generator: the "supported scenarios" pages.

``conf.py`` calls :func:`generate` when the builder starts. It runs the scenario
zoo (:func:`fx2onnx.scenarios.build_pages`) and writes its pages into
``scenarios/`` (gitignored), linked from the root ``index.rst``. The results are
reused while the sources of fx2onnx and the package versions do not change.

Environment variables:

* ``FX2ONNX_SCENARIOS_WORKERS``: worker processes (default 2),
* ``FX2ONNX_SCENARIOS_CASES``: a regular expression restricting the cases (a quick build).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "scenarios"


def selected_cases(pattern: str) -> list[str] | None:
    """The case names matching ``pattern`` (None: all of them)."""
    if not pattern:
        return None
    from fx2onnx.scenarios import get_cases

    names = [name for name in get_cases() if re.search(pattern, name)]
    if not names:
        raise ValueError(f"FX2ONNX_SCENARIOS_CASES={pattern!r} matches no scenario.")
    return names


def generate(app=None, out_dir: Path | None = None) -> dict:
    """Runs the zoo (or reuses its results) and writes the pages; returns the run's metadata."""
    from fx2onnx.scenarios import build_pages

    workers = int(os.environ.get("FX2ONNX_SCENARIOS_WORKERS", "2"))
    cases = selected_cases(os.environ.get("FX2ONNX_SCENARIOS_CASES", "").strip())
    begin = time.perf_counter()
    meta = build_pages(out_dir or OUTPUT, cases=cases, workers=workers)
    origin = "reused" if meta.get("cached") else "computed"
    print(f"[gen_scenarios] {meta['tasks']} scenario tasks {origin} in {time.perf_counter() - begin:.0f} s")
    return meta
