"""The site check of ``make html`` (``_doc/site_check.py``) on small HTML pages."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "_doc" / "site_check.py"
_SPEC = importlib.util.spec_from_file_location("site_check", _PATH)
site_check = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("site_check", site_check)  # dataclasses look their module up
_SPEC.loader.exec_module(site_check)


def page(body: str) -> str:
    return f"<html><head><style>.x{{color:#333}}</style><script>var a = '/tmp/x';</script></head><body>{body}</body></html>"


@pytest.mark.parametrize(
    "body, rule",
    [
        ('<pre>wrote /tmp/tmpa1b2c3/model.onnx</pre>', "temporary path"),
        ("<pre>Writing model shards: 100%|██████████| 3/3 [00:00&lt;00:00, 12.1it/s]</pre>", "progress bar"),
        ("<p>&lt;function f at 0x7f3a2c1d9e40&gt;</p>", "memory address"),
        ('<pre>source: File "", line 13</pre>', "empty file name"),
        ("<p>Real sizes (issue 37), measured</p>", "tracker number"),
        ("<p>as asked in #33.</p>", "tracker number"),
        ("<p>see stop 48 of the log</p>", "tracker number"),
        ("<pre>git clone REPOSITORY_URL fx2onnx</pre>", "placeholder"),
        ("<p>Estimated memory usage: 0 MB</p>", "memory usage of 0 MB"),
    ],
)
def test_each_rule_fails(body, rule):
    problems = site_check.check_page(page(body))
    assert [p.split(":")[0] for p in problems] == [rule], problems


@pytest.mark.parametrize(
    "body",
    [
        "<p>The column #1 and #2 of compare_onnx, a colour #444444, stop 1.5 s, 100% of the rows.</p>",
        "<p>Estimated memory usage: 12 MB</p>",
        "<pre>python -m fx2onnx export ckpt --out exported</pre>",
        '<pre>File "model.py", line 13</pre>',
        "<p>the address 0x10 of a register</p>",
    ],
)
def test_clean_pages_pass(body):
    assert site_check.check_page(page(body)) == []


def test_script_and_style_are_not_read():
    # the page() wrapper holds '/tmp/x' in a script and '#333' in a style
    assert site_check.check_page(page("<p>nothing</p>")) == []


def test_long_line_of_code():
    html = page("<pre>short\n" + "x" * 450 + "\nshort</pre>")
    problems = site_check.check_page(html)
    assert len(problems) == 1 and problems[0].startswith("line of 450 characters"), problems
    # under the limit, a code line wider than the content column at 1400 px still fails: the reader scrolls
    problems = site_check.check_page(html, max_line=500)
    assert len(problems) == 1 and problems[0].startswith("line of code of 450 characters, wider than the content"), \
        problems
    column = "x" * site_check.COLUMN_CHARS
    assert site_check.check_page(page(f"<pre>{column}</pre>")) == []
    assert len(site_check.check_page(page(f"<pre>{column}x</pre>"))) == 1


def test_output_lines_wrap_code_lines_scroll():
    line = "x" * 200
    output = page(f'<div class="sphx-glr-script-out highlight-none"><div class="highlight"><pre>{line}</pre></div></div>')
    text = page(f'<div class="highlight-default notranslate"><div class="highlight"><pre>{line}</pre></div></div>')
    code = page(f'<div class="highlight-python notranslate"><div class="highlight"><pre>{line}</pre></div></div>')
    assert site_check.check_page(output) == [] and site_check.check_page(text) == []
    assert site_check.read_page(output).wrapped_lines == [line] and site_check.read_page(output).pre_lines == []
    problems = site_check.check_page(code)
    assert len(problems) == 1 and "wider than the content column" in problems[0], problems
    # the site's CSS wraps the same blocks the check reads as wrapped
    css = (_PATH.parents[1] / "_static" / "fx2onnx.css").read_text(encoding="utf-8")
    rule = css[css.index(".sphx-glr-script-out pre"):]
    rule = rule[: rule.index("}")]
    assert "white-space: pre-wrap" in rule
    assert all(f".{name} pre" in rule for name in site_check.WRAPPED_BLOCKS)


def test_long_word_in_a_paragraph():
    problems = site_check.check_page(page("<p>Computed by <code>--only '/(" + "a|" * 220 + "b)$'</code></p>"))
    assert len(problems) == 1 and problems[0].startswith("word of 447 characters"), problems


def test_tables_and_example_time():
    html = page(
        "<table><tr><th>a</th><th>b</th></tr><tr><td>" + "x" * 50 + "</td><td>" + "y " * 50 + "</td></tr></table>"
        "<p>Total running time of the script: (2 minutes 3.500 seconds)</p>"
    )
    info = site_check.read_page(html)
    assert info.table_widths == [int(50 * 7.5 + 16 + 1 * 7.5 + 16)]  # a cell is as narrow as its longest word
    assert site_check.example_seconds(html) == 123.5
    assert site_check.example_seconds(page("<p>no example</p>")) is None


def test_literals_wrap_and_matrices_scroll_in_their_box():
    literal = '<p><code class="docutils literal">' + "fx2onnx.scenario_exporters" * 3 + "</code></p>"
    assert site_check.read_page(page(f"<table><tr><td>{literal}</td></tr></table>")).table_widths == [
        int(12 * 7.5 + 16)]
    wide = "<tr>" + "".join(f"<td>{'x' * 20}</td>" for _ in range(8)) + "</tr>"
    assert site_check.read_page(page(f'<table class="docutils fx-matrix">{wide}</table>')).table_widths == []


def test_a_table_wider_than_the_column_fails(tmp_path):
    wide = "<tr>" + "".join(f"<td>{'x' * 20}</td>" for _ in range(8)) + "</tr>"
    (tmp_path / "index.html").write_text(page(f"<table>{wide}</table>"), encoding="utf-8")
    report = site_check.check_site(str(tmp_path))
    assert len(report.problems) == 1 and "wider than the content column" in report.problems[0], report.problems


def test_site(tmp_path):
    (tmp_path / "index.html").write_text(page("<p>Home</p>"), encoding="utf-8")
    gallery = tmp_path / "auto_examples" / "06_benchmarks"
    gallery.mkdir(parents=True)
    (gallery / "plot_slow.html").write_text(
        page("<p>Total running time of the script: (9 minutes 0.0 seconds)</p>"), encoding="utf-8"
    )
    (gallery / "plot_fast.html").write_text(
        page("<p>Total running time of the script: (0 minutes 2.0 seconds)</p><div class='sphx-glr-script-out'>"
             "<pre>wrote /tmp/tmpzz/x\n" + "y" * 150 + "</pre></div>"),
        encoding="utf-8",
    )
    # the source pages are not checked
    (tmp_path / "_modules").mkdir()
    (tmp_path / "_modules" / "m.html").write_text(page("<p>issue 12</p>"), encoding="utf-8")
    report = site_check.check_site(str(tmp_path))
    assert sorted(report.times) == ["auto_examples/06_benchmarks/plot_fast.html", "auto_examples/06_benchmarks/plot_slow.html"]
    assert len(report.problems) == 2, report.problems
    assert any("over its budget" in p and "plot_slow" in p for p in report.problems)
    assert any("temporary path" in p and "plot_fast" in p for p in report.problems)
    text = site_check.format_report(report)
    assert "longest examples" in text and "2 problem(s)" in text
    assert report.wide_lines == {}  # an example's output wraps
    assert site_check.main([str(tmp_path)]) == 1
    assert site_check.main([str(tmp_path / "missing")]) == 2


def test_budgets():
    assert site_check.budget("auto_examples/06_benchmarks/plot_torch_export_201.html") == 420
    assert site_check.budget("auto_examples/01_export_graph/plot_torch_export_101.html") == 240
    assert site_check.budget("auto_examples/04_onnx_onnxruntime/plot_captioner_folders_102.html") == 480
    assert site_check.budget("auto_examples/04_onnx_onnxruntime/plot_export_folder_generate_102.html") == 480
