"""The measured tables and findings of the design pages: rendered from their JSON (``_doc/gen_bench_tables.py``),
each include a page names exists, and no measured value is typed again in a page's source."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("gen_bench_tables", ROOT / "_doc" / "gen_bench_tables.py")
gen_bench_tables = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("gen_bench_tables", gen_bench_tables)
_SPEC.loader.exec_module(gen_bench_tables)

#: a measured value with its unit, as the tables and findings write them ("43.3 ms", "0.47 GB", "10.0 %")
_VALUE = re.compile(r"\b\d+\.\d+ ?(?:ms|us|s|MB|GB|GiB|MiB|%)(?![\w/])")


def _sources() -> dict[Path, str]:
    """The pages written by hand (the generated ones are left out: the zoo's pages, the rendered tables)."""
    listed = subprocess.run(["git", "ls-files", "*.rst"], cwd=ROOT, capture_output=True, text=True, check=True)
    pages = [ROOT / line for line in listed.stdout.split() if "_generated" not in line]
    return {p: p.read_text(encoding="utf-8") for p in pages if p.exists()}


def test_every_include_of_a_measurement_is_rendered():
    written = {p.name for p in gen_bench_tables.generate()}
    named = {m for text in _sources().values() for m in re.findall(r"_generated/((?:bench|measured)_\w+\.inc)", text)}
    assert named and named <= written, sorted(named - written)
    rendered = [name for name in written if name.startswith("measured_")]
    assert set(rendered) <= named, f"rendered but included by no page: {sorted(set(rendered) - named)}"


@pytest.mark.parametrize("page", gen_bench_tables.MEASURED_PAGES)
def test_measured_values_are_typed_once(page):
    stored = json.loads((gen_bench_tables.BENCH / f"{page}.json").read_text(encoding="utf-8"))
    for name, entry in stored["tables"].items():
        assert entry["columns"] and all(len(row) == len(entry["columns"]) for row in entry["rows"]), name
        assert entry.get("date") and entry.get("machine"), f"{name}: when and where it was measured"
    text = json.dumps(stored, ensure_ascii=False)
    # values of three digits or more: "0.6 s" may well be another page's own fact
    values = {v for v in _VALUE.findall(text) if sum(c.isdigit() for c in v) >= 3}
    for path, source in _sources().items():
        typed = sorted(v for v in values if v in source)
        assert not typed, f"{path.relative_to(ROOT)} types measured values of _doc/bench/{page}.json: {typed[:5]}"


def test_a_table_renders_its_cells_and_how_it_was_measured():
    entry = {"title": "T", "date": "2026-01-02", "machine": "m", "versions": {"onnxruntime": "1.31"},
             "command": "python bench/x.py", "columns": ["a", "b"], "rows": [["x", "1.5 ms"], ["y", ""]],
             "notes": ["n"]}
    text = gen_bench_tables.measured_table(entry)
    assert "    * - x\n      - 1.5 ms" in text and "* n" in text
    assert "Measured 2026-01-02 on m (onnxruntime 1.31): ``python bench/x.py``" in text
