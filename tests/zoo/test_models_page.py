"""The supported-models page, rendered from rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fx2onnx.zoo.report import error_text, page_text, summary, write_page
from fx2onnx.zoo.architectures import save_rows

ROOT = Path(__file__).resolve().parents[2]


def _row(name, exporter, cache, success, step=None, error=None, kind="causal"):
    return dict(architecture=name, kind=kind, exporter=exporter, cache=cache, success=success, step=step,
                error=error, max_abs=1e-6 if success else None, time=1.0)


ROWS = [
    _row("llama", "to_onnx", False, True),
    _row("llama", "to_onnx", True, True),
    _row("llama", "dynamo", False, True),
    _row("llama", "dynamo", True, False, "conversion", "ValueError: no *translation*"),
    _row("mamba", "to_onnx", False, False, "validation", "discrepancy"),
    _row("mamba", "dynamo", False, True),
    _row("bert", "to_onnx", False, False, "capture", "ExportError: x", kind="masked"),
]


def test_summary():
    table = {(t["exporter"], t["cache"]): t for t in summary(ROWS)}
    assert table["to_onnx", False] == dict(exporter="to_onnx", cache=False, run=3, captured=2, exported=2, matched=1)
    assert table["dynamo", True] == dict(exporter="dynamo", cache=True, run=1, captured=1, exported=0, matched=0)


def test_page_text():
    text = page_text(ROWS, {"command": "python -m fx2onnx models", "date": "2026-01-01"},
                     [("gemma3", "causal", "multimodal")])
    assert "python -m fx2onnx models" in text and "2026-01-01" in text
    assert "``mamba`` (no cache, step validation)" in text  # dynamo succeeds, to_onnx does not
    assert r"no \*translation\*" in text  # escaped for rst
    assert "``gemma3`` (causal): multimodal" in text


def test_write_page_and_generator(tmp_path):
    files = write_page(ROWS, {}, tmp_path / "page")
    assert [f.name for f in files] == ["index.rst", "summary.png"]
    assert all(f.stat().st_size > 0 for f in files)
    # the build-time generator renders the committed rows the same way
    spec = importlib.util.spec_from_file_location("gen_models", ROOT / "_doc" / "gen_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    save_rows(ROWS, tmp_path / "rows.json", {"date": "2026-01-01"})
    meta = module.generate(None, rows_path=tmp_path / "rows.json", out_dir=tmp_path / "out")
    assert meta["date"] == "2026-01-01"
    assert "Supported models" in (tmp_path / "out" / "index.rst").read_text()


def test_page_table_links_and_not_applicable():
    rows = ROWS + [
        _row("xlm", "to_onnx", False, True),
        _row("xlm", "to_onnx", True, False, "model", "ValueError: XLMWithLMHeadModel.forward takes no cache argument."),
    ]
    text = page_text(rows, {}, [])
    # a failing cell links to its error, which carries the label
    assert ":ref:`✘ C <mdl-llama-dynamo-cache>`" in text and ".. _mdl-llama-dynamo-cache:" in text
    assert "**Export failures** (3 of 4 architectures)." in text
    # a model taking no cache is not a failure
    assert ".. _mdl-xlm-to_onnx-cache:" not in text and "``xlm``, `" not in text
    assert "Shown as ``-`` (not applicable): the ``forward`` of ``xlm`` takes no cache." in text
    xlm = next(line for line in text.splitlines() if line.strip().startswith("| ``xlm``"))
    assert "\\-" in xlm, xlm  # a bare "-" in a cell would be an empty bullet list
    table = {(t["exporter"], t["cache"]): t for t in summary(rows)}
    assert table["to_onnx", True]["run"] == 1  # llama only
    # the table has a two-level header and the classes of the sortable tables
    assert ":class: fx-matrix fx-sortable fx-filterable" in text
    assert "Not run yet" not in text  # no empty section


def test_error_text_cut_at_a_sentence():
    shortened = "FrozenInputError: Dimension x is 4. The model is wrong outside that range. Export with an exam..."
    assert error_text(shortened) == r"FrozenInputError: Dimension x is 4. The model is wrong outside that range. \[...\]"
    assert error_text("ValueError: `use_cache` can only be set if Stack(") == r"ValueError: \`use\_cache\` can only be set if Stack \[...\]"
    assert error_text("RuntimeError: sizes differ") == "RuntimeError: sizes differ"
