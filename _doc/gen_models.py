"""Build-time page generator: the "supported models" page.

``conf.py`` calls :func:`generate` when the builder starts. The rows come from
``_doc/models/rows.json``, committed and produced by ``python -m fx2onnx models``
(a run over every architecture takes hours on two cores, more than a build may
spend); the page is rendered from them into ``models/`` (gitignored), linked
from the root ``index.rst``. ``design/models.rst`` explains how to refresh it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "_doc" / "models" / "rows.json"
OUTPUT = ROOT / "models"


def generate(app=None, rows_path: Path | None = None, out_dir: Path | None = None) -> dict:
    """Renders the page from the committed rows; returns their metadata."""
    from fx2onnx.zoo.report import write_page
    from fx2onnx.zoo.architectures import load_rows, select_architectures, skipped_architectures

    begin = time.perf_counter()
    path = rows_path or ROWS
    rows, meta = load_rows(path)
    if not rows:
        raise FileNotFoundError(f"No rows in {path}: run `python -m fx2onnx models` to produce them.")
    from fx2onnx.zoo.library_report import write_library_pages
    from fx2onnx.zoo.library_zoo import load_library_rows

    libraries = {name: load_library_rows(ROWS.parent / f"rows_{name}.json") for name in ("timm", "diffusers", "tasks")}
    folder_rows = ROOT / "_doc" / "bench" / "folder_tasks.json"  # bench/sweep_folder_tasks.py, never run here
    folder = json.loads(folder_rows.read_text(encoding="utf-8")) if folder_rows.exists() else None
    subpages = write_library_pages(libraries, out_dir or OUTPUT, folder)
    from fx2onnx.zoo.torchvision_report import write_torchvision_page

    subpages += write_torchvision_page(ROOT / "_doc" / "bench" / "torchvision_detection.json", out_dir or OUTPUT)
    from fx2onnx.zoo.folders_report import write_folders_page

    subpages += write_folders_page(ROWS.parent / "causal_folders.json", out_dir or OUTPUT)
    write_page(rows, meta, out_dir or OUTPUT, skipped_architectures(), select_architectures(), subpages)
    print(f"[gen_models] {len(rows)} model rows rendered in {time.perf_counter() - begin:.0f} s")
    return meta
