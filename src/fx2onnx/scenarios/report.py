"""Rows of :func:`fx2onnx.scenarios.run` -> rst pages, a summary table and a chart.

.. code-block:: python

    from fx2onnx.scenarios import run, write_pages

    rows = run(["OneTensor", "IfOnValue"], exporters=["export-nostrict", "custom"], workers=0)
    write_pages(rows, "scenarios_out")  # index.rst, tables, details, summary.png
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from typing import Any, Sequence

import torch

from .cases import ZOO_FAMILIES, get_case
from .run import EXPORTERS, ONNX_EXPORTERS, PROGRAM_EXPORTERS

#: step -> the short letter shown in a failing cell
STEP_LETTERS = {
    "export": "E",
    "conversion": "C",
    "run": "R",
    "onnxruntime": "O",
    "discrepancy": "D",
    "timeout": "T",
    "crash": "X",
}
FAMILY_TITLES = {
    "signatures": "Signatures: inputs and outputs",
    "control_flow": "Control flow",
    "mutations": "In-place operations and data-dependent shapes",
    "types": "Dtypes, weights, submodules, custom ops",
    "exportdb": "torch's export database",
}


def save_rows(rows: list[dict[str, Any]], path: str | Path, meta: dict[str, Any] | None = None) -> None:
    """Saves rows (and metadata such as the duration) as JSON."""
    Path(path).write_text(json.dumps({"meta": meta or {}, "rows": rows}, indent=1), encoding="utf-8")


def load_rows(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Loads what :func:`save_rows` wrote: ``(rows, meta)``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return data["rows"], data.get("meta", {})


def summary(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per exporter: successes and totals, static and dynamic, and the time spent."""
    table = []
    for exporter in EXPORTERS:
        mine = [r for r in rows if r["exporter"] == exporter]
        if not mine:
            continue
        entry: dict[str, Any] = {"exporter": exporter}
        for label, dyn in (("static", False), ("dynamic", True)):
            sub = [r for r in mine if r["dynamic"] == dyn]
            entry[f"{label}_ok"] = sum(r["success"] for r in sub)
            entry[f"{label}_total"] = len(sub)
        entry["time"] = sum(r["time"] or 0 for r in mine)
        table.append(entry)
    return table


def to_onnx_gaps(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows where ``custom`` (fx2onnx.to_onnx) fails and ``export-nostrict`` succeeds."""
    index = {(r["case"], r["exporter"], r["dynamic"]): r for r in rows}
    gaps = []
    for r in rows:
        if r["exporter"] != "custom" or r["success"]:
            continue
        ref = index.get((r["case"], "export-nostrict", r["dynamic"]))
        if ref is not None and ref["success"]:
            gaps.append(r)
    return gaps


def escape_rst(text: str) -> str:
    """Escapes the characters inline rst markup would interpret."""
    return re.sub(r"([\\`*_|\[\]<>])", r"\\\1", text)


def _label(case: str, exporter: str | None = None) -> str:
    base = f"scn-{case.lower()}"
    return base if exporter is None else f"{base}-{exporter}"


def _mark(row: dict[str, Any] | None) -> str:
    if row is None:
        return "–"
    if row["success"]:
        return "✔"
    return f"✘ {STEP_LETTERS.get(row['step'], '?')}"


def describe(value: Any) -> str:
    """``float32[3, 4]`` for a tensor, the repr for a scalar, the structure for containers."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"{dtype}[{', '.join(str(d) for d in value.shape)}]"
    if isinstance(value, tuple):
        return "(" + ", ".join(describe(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _heading(text: str, char: str) -> list[str]:
    return [text, char * max(len(text), 4), ""]


def _code(text: str, language: str = "text", wrap: bool = False) -> list[str]:
    """A code block; ``wrap``: its lines wrap in the content column (class ``fx-wrap``, the site's style sheet), for
    code the project does not write (torch's exportdb examples)."""
    body = [("    " + line).rstrip() for line in (text or "").splitlines()] or ["    (empty)"]
    return [f".. code-block:: {language}", *(["    :class: fx-wrap"] if wrap else []), "", *body, ""]


def grid_table(
    leading: Sequence[str],
    groups: Sequence[tuple[str, Sequence[str]]],
    body: Sequence[Sequence[str]],
    classes: str = "fx-matrix",
) -> list[str]:
    """An rst grid table with a header of two levels: each group title over its columns.

    ``leading`` names the first columns (their header spans both levels), ``groups``
    gives ``(title, column names)``; ``body`` holds the rows, one text per cell (one line).
    The table gets the CSS ``classes`` (``_static/fx2onnx.css``: sticky header, fitting width).
    """
    from docutils.utils import column_width

    n_lead = len(leading)
    sub = [name for _, names in groups for name in names]
    texts = [list(leading) + sub] + [list(row) for row in body]
    if any(len(row) != n_lead + len(sub) for row in texts):
        raise ValueError("every row of the table needs one cell per column")
    widths = [max(column_width(row[i]) for row in texts) + 2 for i in range(len(sub) + n_lead)]
    start = n_lead
    for title, names in groups:  # a group title wider than its columns widens the last one
        span = sum(widths[start:start + len(names)]) + len(names) - 1
        widths[start + len(names) - 1] += max(0, column_width(title) + 2 - span)
        start += len(names)

    def cell(text: str, width: int) -> str:
        return " " + text + " " * (width - 1 - column_width(text))

    def line(char: str, indices: Sequence[int]) -> str:
        return "+" + "+".join(char * widths[i] for i in indices) + "+"

    every = range(len(widths))
    first = "|" + "|".join(cell(leading[i], widths[i]) for i in range(n_lead))
    middle = "|" + "|".join(" " * widths[i] for i in range(n_lead))
    start = n_lead
    for title, names in groups:
        span = sum(widths[start:start + len(names)]) + len(names) - 1
        first += "|" + cell(title, span)
        middle += "+" + "+".join("-" * widths[i] for i in range(start, start + len(names)))
        start += len(names)
    second = "|" + "|".join(cell(text, widths[i]) for i, text in enumerate([""] * n_lead + sub))
    lines = [line("-", every), first + "|", middle + "+", second + "|", line("=", every)]
    for row in body:
        lines.append("|" + "|".join(cell(text, widths[i]) for i, text in enumerate(row)) + "|")
        lines.append(line("-", every))
    return [".. table::", f"    :class: {classes}", "    :widths: auto", ""] + ["    " + x for x in lines] + [""]


def _table_page(rows, cases: list[str], exporters: Sequence[str], title: str, intro: str) -> str:
    index = {(r["case"], r["exporter"], r["dynamic"]): r for r in rows}
    # no table of contents on the right: the matrix takes its width (_static/fx2onnx.css)
    lines = [":hide-toc:", ""] + _heading(title, "=") + [intro, "", _exporters_text(exporters), "", _legend(), ""]
    body = []
    for case in cases:
        cells = [f":ref:`{case} <{_label(case)}>`"]
        for exporter in exporters:
            for dyn in (False, True):
                row = index.get((case, exporter, dyn))
                mark = _mark(row)
                cells.append(mark if row is None else f":ref:`{mark} <{_label(case, exporter)}>`")
        body.append(cells)
    groups = [(exporter, ("static", "dynamic")) for exporter in exporters]
    lines += grid_table(["case"], groups, body, "fx-matrix fx-sortable fx-filterable")
    return "\n".join(lines)


def _exporters_text(exporters: Sequence[str]) -> str:
    """What each exporter named in a page calls: every page defines its own columns."""
    return "Exporters: " + "; ".join(f"``{e}``: ``{EXPORTERS[e]}``" for e in exporters) + "."


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def without_addresses(text: str) -> str:
    """An error message without the memory addresses of the objects it prints
    (``<MapImpl object at 0x7f...>`` becomes ``<MapImpl object>``): they change at every run."""
    return _ADDRESS.sub("", text)


def _legend() -> str:
    steps = ", ".join(f"**{letter}** {step}" for step, letter in STEP_LETTERS.items())
    return (
        f"✔ success, ✘ failure at the step given by its letter ({steps}), – not run "
        f"(the case defines no dynamic shapes). Each mark links to the graph or the error."
    )


def _details_page(rows, family: str, cases: list[str]) -> str:
    by_case = collections.defaultdict(list)
    for r in rows:
        by_case[r["case"]].append(r)
    lines = _heading(FAMILY_TITLES.get(family, family), "=")
    lines += [f"One section per case of the family ``{family}``: its code, its inputs, and "
              "what every exporter produced (the graph, or the error).", ""]
    lines += [_exporters_text([e for e in EXPORTERS if any(r["exporter"] == e for r in rows)]), ""]
    for name in cases:
        case = get_case(name)
        lines += [f".. _{_label(name)}:", ""] + _heading(name, "-")
        doc = case.doc if family in ZOO_FAMILIES else escape_rst(case.doc)
        lines += [doc, ""]
        lines += _code(case.code, "python", wrap=family not in ZOO_FAMILIES)
        lines.append("**Input sets** (static runs check the first one, dynamic runs the second one):")
        lines.append("")
        for i, (args, kwargs) in enumerate(case.inputs[:2]):
            text = describe(tuple(args)) + (f", kwargs={describe(kwargs)}" if kwargs else "")
            lines.append(f"#. ``{text}``")
        lines.append("")
        lines += [f"**Dynamic shapes**: ``{case.dynamic_shapes!r}``" if case.has_dynamic else "**Dynamic shapes**: none", ""]
        for exporter in EXPORTERS:
            mine = [r for r in by_case[name] if r["exporter"] == exporter]
            if not mine:
                continue
            lines += [f".. _{_label(name, exporter)}:", ""] + _heading(f"{name}: {exporter}", "~")
            for r in sorted(mine, key=lambda r: r["dynamic"]):
                kind = "dynamic" if r["dynamic"] else "static"
                if r["success"]:
                    lines += [f"* {kind}: ✔ max abs diff {r['max_abs']:.3g}, {r['time']:.2f} s", ""]
                else:
                    lines += [f"* {kind}: ✘ failed at step **{r['step']}** ({r['time']:.2f} s)", ""]
                    lines += ["  " + line if line else "" for line in _code(without_addresses(r["error"] or ""))]
            shown = next((r for r in sorted(mine, key=lambda r: not r["dynamic"]) if r.get("graph")), None)
            if shown is not None:
                lines.append(f"Graph ({'dynamic' if shown['dynamic'] else 'static'}):")
                lines.append("")
                lines += _code(shown["graph"])
    return "\n".join(lines)


def plot_summary(rows: Sequence[dict[str, Any]], filename: str | Path) -> None:
    """A bar chart: successes per exporter, static and dynamic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = summary(rows)
    names = [t["exporter"] for t in table]
    xs = range(len(names))
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar([x - 0.2 for x in xs], [t["static_ok"] for t in table], width=0.4, label="static", color="#4c72b0")
    ax.bar([x + 0.2 for x in xs], [t["dynamic_ok"] for t in table], width=0.4, label="dynamic", color="#dd8452")
    for x, t in zip(xs, table):
        ax.text(x - 0.2, t["static_ok"], f"{t['static_ok']}/{t['static_total']}", ha="center", va="bottom", fontsize=7)
        ax.text(x + 0.2, t["dynamic_ok"], f"{t['dynamic_ok']}/{t['dynamic_total']}", ha="center", va="bottom", fontsize=7)
    top = max([t["static_total"] for t in table] + [1])
    ax.set_ylim(0, top * 1.25)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=15)
    ax.set_ylabel("successful scenarios")
    ax.set_title("Scenarios exported and matching eager, per exporter")
    ax.legend(loc="upper center", ncol=2)
    fig.tight_layout()
    fig.savefig(filename, dpi=100)
    plt.close(fig)


# the label of the summary page, referenced by the tutorial ("strict = ?")
SUMMARY_LABEL = "led-summary-exported-program"


def _index_page(rows, meta: dict[str, Any], families: list[str]) -> str:
    lines = [f".. _{SUMMARY_LABEL}:", ""] + _heading("Supported scenarios", "=")
    n_cases = len({r["case"] for r in rows})
    lines += [
        f"Each of the {n_cases} scenarios of :mod:`fx2onnx.scenarios` (a small module, two input "
        "sets of different shapes, dynamic shapes) is exported by every exporter, once without "
        "dynamic shapes (*static*) and once with them (*dynamic*). A static model is checked on "
        "the first input set, the shapes it was exported with. A dynamic model is exported with "
        "the first input set and checked on the second one, of other shapes. ONNX models run on "
        ":epkg:`onnxruntime`, exported programs with ``ep.module()``; both are compared with "
        "eager PyTorch and a difference above the case tolerance (1e-4 unless the case says "
        "otherwise) is a failure (step *discrepancy*). :doc:`../design/scenarios` explains how "
        "the zoo works.",
        "",
        _exporters_text(list(EXPORTERS)),
        "",
    ]
    if meta:
        lines += [
            f"This run: {meta.get('tasks', len(rows))} tasks in {meta.get('duration', 0):.0f} s with "
            f"{meta.get('workers', '?')} worker process(es), torch {meta.get('torch', '?')}"
            + (", reused from the cache (the sources did not change)" if meta.get("cached") else "")
            + ".",
            "",
        ]
    n_dynamic = len({r["case"] for r in rows if r["dynamic"]})
    lines += [
        f"Dynamic runs only happen for the {n_dynamic} scenarios defining dynamic shapes (every "
        "case of the zoo, and the examples of torch's export database which define some).",
        "",
        ".. image:: summary.png",
        "    :alt: successes per exporter",
        "",
    ]
    table = summary(rows)
    lines += [".. list-table:: Successes per exporter", "    :header-rows: 1", ""]
    lines.append("    * - exporter\n      - static\n      - dynamic\n      - time (s, sum over tasks)")
    for t in table:
        lines.append(
            f"    * - ``{t['exporter']}``\n      - {t['static_ok']} / {t['static_total']}\n"
            f"      - {t['dynamic_ok']} / {t['dynamic_total']}\n      - {t['time']:.0f}"
        )
    lines.append("")
    gaps = to_onnx_gaps(rows)
    lines += _heading("Where fx2onnx.to_onnx fails and torch.export succeeds", "-")
    if gaps:
        lines += ["The cases ``export-nostrict`` handles and ``custom`` does not:", ""]
        for r in gaps:
            kind = "dynamic" if r["dynamic"] else "static"
            lines.append(f"* :ref:`{r['case']} <{_label(r['case'], 'custom')}>` ({kind}, step {r['step']}): "
                         f"``{without_addresses(r['error'] or '').replace('`', chr(39))}``")
        lines.append("")
    else:
        lines += ["None.", ""]
    lines += [".. toctree::", "    :maxdepth: 1", "", "    exported_programs", "    onnx_exporters"]
    lines += [f"    details_{family}" for family in families]
    lines.append("")
    return "\n".join(lines)


def _write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.write_text(text, encoding="utf-8")


def write_pages(rows: Sequence[dict[str, Any]], out_dir: str | Path, meta: dict[str, Any] | None = None) -> list[Path]:
    """Writes ``index.rst``, the two tables, one details page per family and ``summary.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cases = list(dict.fromkeys(r["case"] for r in rows))
    labels = [c.lower() for c in cases]
    if len(set(labels)) != len(labels):
        raise ValueError("Two case names differ only by case: the page labels would collide.")
    families = list(dict.fromkeys(get_case(c).family for c in cases))
    pages = {
        "index.rst": _index_page(rows, meta or {}, families),
        "exported_programs.rst": _table_page(
            rows, cases, [e for e in PROGRAM_EXPORTERS if any(r["exporter"] == e for r in rows)],
            "Exported programs",
            "What :epkg:`torch.export.export` produces, run with ``ep.module()`` and compared with eager.",
        ),
        "onnx_exporters.rst": _table_page(
            rows, cases, [e for e in ONNX_EXPORTERS if any(r["exporter"] == e for r in rows)],
            "ONNX exporters",
            "The ONNX models, run with :epkg:`onnxruntime` and compared with eager.",
        ),
    }
    for family in families:
        pages[f"details_{family}.rst"] = _details_page(rows, family, [c for c in cases if get_case(c).family == family])
    # a previous run over other cases may have left pages this run does not link
    for stale in out.glob("details_*.rst"):
        if stale.name not in pages:
            stale.unlink()
    written = []
    for name, text in pages.items():
        _write_if_changed(out / name, text)
        written.append(out / name)
    plot_summary(rows, out / "summary.png")
    written.append(out / "summary.png")
    return written
