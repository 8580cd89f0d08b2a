"""The pages: written from real rows, valid for Sphinx (warnings as errors), and the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fx2onnx.__main__ import main
from fx2onnx.scenarios import run, summary, write_pages
from fx2onnx.scenarios.report import escape_rst, load_rows, to_onnx_gaps

CASES = ["OneTensor", "IfOnValue", "exportdb_list_unpack"]


@pytest.fixture(scope="module")
def rows():
    return run(CASES, exporters=["export-nostrict", "custom"], workers=0, progress=False)


def test_summary(rows):
    table = {t["exporter"]: t for t in summary(rows)}
    assert set(table) == {"export-nostrict", "custom"}
    # OneTensor passes static and dynamic, list_unpack is static only, IfOnValue fails both with
    # torch.export alone and passes both with to_onnx (its `if` rewritten into torch.cond)
    counts = {e: (t["static_ok"], t["static_total"], t["dynamic_ok"], t["dynamic_total"]) for e, t in table.items()}
    assert counts == {"export-nostrict": (2, 3, 1, 2), "custom": (3, 3, 2, 2)}
    assert to_onnx_gaps(rows) == []


def test_escape_rst():
    assert escape_rst("f(*args, **kwargs) `x` a_b|") == r"f(\*args, \*\*kwargs) \`x\` a\_b\|"


def _sphinx_project(root: Path) -> Path:
    (root / "design").mkdir()
    (root / "design" / "scenarios.rst").write_text("Zoo\n===\n\nThe design.\n", encoding="utf-8")
    (root / "index.rst").write_text(
        "Site\n====\n\n.. toctree::\n\n    scenarios/index\n    design/scenarios\n", encoding="utf-8"
    )
    (root / "conf.py").write_text(
        "extensions = ['sphinx_runpython.epkg']\n"
        "epkg_dictionary = {'onnxruntime': 'https://onnxruntime.ai/', "
        "'torch.export.export': 'https://pytorch.org/docs/stable/export.html'}\n",
        encoding="utf-8",
    )
    return root / "scenarios"


def test_pages_build_with_sphinx(rows, tmp_path):
    out = _sphinx_project(tmp_path)
    written = write_pages(rows, out, {"duration": 12.0, "workers": 0, "tasks": len(rows), "torch": "x"})
    # a page left by an earlier run over other cases would break the build (not in any toctree)
    (out / "details_stale_family.rst").write_text("Stale\n=====\n", encoding="utf-8")
    written = write_pages(rows, out, {"duration": 12.0, "workers": 0, "tasks": len(rows), "torch": "x"})
    assert not (out / "details_stale_family.rst").exists()
    names = sorted(p.name for p in written)
    assert names == [
        "details_control_flow.rst", "details_exportdb.rst", "details_signatures.rst", "exported_programs.rst",
        "index.rst", "onnx_exporters.rst", "summary.png",
    ]
    table = (out / "onnx_exporters.rst").read_text(encoding="utf-8")
    assert ":ref:`✔ <scn-ifonvalue-custom>`" in table and ":ref:`✔ <scn-onetensor-custom>`" in table
    programs = (out / "exported_programs.rst").read_text(encoding="utf-8")
    assert ":ref:`✘ E <scn-ifonvalue-export-nostrict>`" in programs
    assert (out / "index.rst").read_text(encoding="utf-8").startswith(".. _led-summary-exported-program:\n")
    details = (out / "details_signatures.rst").read_text(encoding="utf-8")
    assert "class OneTensor(torch.nn.Module):" in details and "Relu(x)" in details
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(tmp_path), str(tmp_path / "_build")],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    html = (tmp_path / "_build" / "scenarios" / "onnx_exporters.html").read_text(encoding="utf-8")
    assert "details_signatures.html#scn-onetensor-custom" in html
    # a header of two levels: each exporter over its static and dynamic columns
    assert '<th class="head" colspan="2"><p>custom</p></th>' in html and "fx-sortable" in html


def test_command_line(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["scenarios", "--out", str(out), "--cases", "OneTensor", "--exporters", "custom", "--workers", "0"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "2 tasks in" in printed and "static   1/1" in printed
    assert (out / "index.rst").exists() and (out / "summary.png").stat().st_size > 1000
    rows, meta = load_rows(out / "rows.json")
    assert len(rows) == 2 and all(r["success"] for r in rows)
    # the second call reuses the results: the sources did not change
    assert main(argv) == 0
    assert "reused from the cache" in capsys.readouterr().out


@pytest.mark.slow
def test_generator_writes_pages(tmp_path, monkeypatch):
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "_doc" / "gen_scenarios.py"
    spec = importlib.util.spec_from_file_location("gen_scenarios_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("FX2ONNX_SCENARIOS_CASES", "^OneTensor$")
    monkeypatch.setenv("FX2ONNX_SCENARIOS_WORKERS", "0")
    meta = module.generate(None, out_dir=tmp_path)
    assert meta["tasks"] == 12
    assert "OneTensor" in (tmp_path / "exported_programs.rst").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="matches no scenario"):
        module.selected_cases("^NoSuchCase$")
