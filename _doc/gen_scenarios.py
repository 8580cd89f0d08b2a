"""Build-time page generator: the "supported scenarios" pages.

``conf.py`` calls :func:`generate` when the builder starts and :func:`finish` once
sphinx-gallery has run the examples. ``generate`` starts the scenario zoo
(:func:`fx2onnx.scenarios.build_pages`) in a child process, so that it runs while the
gallery runs; ``finish`` waits for it: its pages are in ``scenarios/`` (gitignored),
linked from the root ``index.rst``, before sphinx reads any page. The results are
reused while the sources of fx2onnx and the package versions do not change.

Environment variables:

* ``FX2ONNX_SCENARIOS_WORKERS``: worker processes (default 2; 1 in the background of the build),
* ``FX2ONNX_SCENARIOS_CASES``: a regular expression restricting the cases (a quick build).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


_BACKGROUND: dict = {}


def generate(app=None, out_dir: Path | None = None) -> dict | None:
    """Runs the zoo (or reuses its results) and writes the pages; returns the run's metadata.

    Called by sphinx (``app`` given), it only starts the run in a child process and returns None:
    :func:`finish` waits for it.
    """
    if app is not None:
        command = [sys.executable, str(Path(__file__).resolve()), str(out_dir or OUTPUT)]
        # one worker beside the gallery (one process) unless told: both end at about the same time on 2 cores
        env = dict(os.environ, FX2ONNX_SCENARIOS_WORKERS=os.environ.get("FX2ONNX_SCENARIOS_WORKERS", "1"))
        print("[gen_scenarios] the scenario zoo runs in the background while the gallery runs")
        _BACKGROUND["process"] = subprocess.Popen(command, cwd=str(ROOT), env=env)
        return None
    return _build(out_dir)


def finish(app=None) -> None:
    """Waits for the run :func:`generate` started; raises if it failed."""
    process = _BACKGROUND.pop("process", None)
    if process is None:
        return
    begin = time.perf_counter()
    code = process.wait()
    print(f"[gen_scenarios] waited {time.perf_counter() - begin:.0f} s for the scenario zoo after the gallery")
    if code != 0:
        raise RuntimeError(f"The scenario zoo failed (exit code {code}): its error is printed above.")


def _build(out_dir: Path | None = None) -> dict:
    from fx2onnx.scenarios import build_pages

    workers = int(os.environ.get("FX2ONNX_SCENARIOS_WORKERS", "2"))
    cases = selected_cases(os.environ.get("FX2ONNX_SCENARIOS_CASES", "").strip())
    begin = time.perf_counter()
    meta = build_pages(out_dir or OUTPUT, cases=cases, workers=workers)
    origin = "reused" if meta.get("cached") else "computed"
    print(f"[gen_scenarios] {meta['tasks']} scenario tasks {origin} in {time.perf_counter() - begin:.0f} s")
    return meta


if __name__ == "__main__":
    _build(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
