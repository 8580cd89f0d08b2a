"""Rows of the model zoo -> the "supported models" page: a summary, a chart, one table.

.. code-block:: python

    from fx2onnx.zoo.report import write_page
    from fx2onnx.zoo.architectures import load_rows

    rows, meta = load_rows("_doc/models_rows.json")
    write_page(rows, meta, "models")  # models/index.rst, models/summary.png
"""

from __future__ import annotations

import collections
import re
from pathlib import Path
from typing import Any, Sequence

from ..scenarios.report import grid_table, without_addresses
from .architectures import EXPORTERS, STEPS

#: a failing step -> its letter in the table
STEP_LETTERS = {"config": "F", "model": "M", "capture": "E", "conversion": "C", "validation": "V",
                "timeout": "T", "crash": "X"}
#: step -> the counters a row reaching past it increments
_PAST = {
    "config": (), "model": (), "timeout": (), "crash": (),
    "capture": (), "conversion": ("captured",), "validation": ("captured", "exported"),
}


#: the length at which the zoo stores an error of the generate column (models/generation.py)
STORED_ERROR = 300

#: what the rows cannot say by themselves: why some families fail, and the fix
KNOWN_LIMITS = [
    "* **Mixtures of experts**: transformers 5 runs the experts with a grouped matmul which, on CPU "
    "in float32, calls the custom operator ``transformers::grouped_mm_fallback`` (a Python loop over "
    "``offs.tolist()``); no exporter knows it. ``torch_export_patches(patch_transformers=True)`` "
    "replaces ``transformers.integrations.moe._grouped_mm`` by a gather of each row's expert weight "
    "and a batched matmul (:mod:`fx2onnx.patches.moe_fixes`): both exporters then see standard operators.",
    "* **State-space models** (Mamba and the hybrids built on its reference scan): without the "
    "``mamba_ssm`` kernels, transformers' ``mamba_selective_scan`` iterates ``for index in "
    "range(seq_len)``, which :func:`torch.export.export` unrolls, specializing the sequence length. "
    "A patch (:mod:`fx2onnx.patches.state_space`) runs the same recurrence with "
    "``torch.ops.higher_order.scan`` (an ONNX ``Scan``), and their convolution and recurrent cache "
    "states are flattened (:mod:`fx2onnx.patches.linear_cache`). The other Python loops over the "
    "sequence run as scans too (:mod:`fx2onnx.patches.recurrences`: RWKV, RecurrentGemma, xLSTM, "
    "MiniMax decoding with a cache); CPM-Ant and Funnel built Python lists of the sequence length "
    "(patched in :mod:`fx2onnx.patches.transformers_fixes`).",
    "* **Sliding-window caches**: a model is exported with a cache shorter than its window and run with "
    "a longer one (the second input set: 11 positions, window 8). A cache made only of sliding layers "
    "(Mistral, Ministral) carries its count of tokens seen as one more tensor, ``tokens_seen`` "
    "(:func:`fx2onnx.patches.caches.carries_token_count`). A *validation* failure on such a row is a "
    "silent wrong model of the exporter, not of the check.",
]


def summary(rows: Sequence[dict[str, Any]], architectures: int | None = None) -> list[dict[str, Any]]:
    """Per exporter x cache: architectures discovered (run), captured, exported, matched."""
    table = []
    for exporter in EXPORTERS:
        for cache in (False, True):
            mine = [r for r in rows if r["exporter"] == exporter and r["cache"] == cache and not not_applicable(r)]
            if not mine:
                continue
            entry = dict(exporter=exporter, cache=cache, run=len(mine), captured=0, exported=0, matched=0)
            for r in mine:
                reached = ("captured", "exported", "matched") if r["success"] else _PAST.get(r["step"], ())
                for name in reached:
                    entry[name] += 1
            table.append(entry)
    return table


def _escape(text: str) -> str:
    return re.sub(r"([\\`*_|\[\]<>])", r"\\\1", text)


def not_applicable(row: dict[str, Any]) -> bool:
    """True for a cache row of a model whose ``forward`` takes no cache (nothing to export)."""
    return (not row["success"] and row["cache"] and row["step"] == "model"
            and "takes no cache argument" in (row["error"] or ""))


def _error_label(row: dict[str, Any]) -> str:
    cache = "cache" if row["cache"] else "nocache"
    return f"mdl-{row['architecture']}-{row['exporter']}-{cache}".lower()


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "–"
    if not_applicable(row):
        return "\\-"  # escaped: a cell holding only "-" is an empty bullet list in rst
    if row["success"]:
        return f"✔ {row['max_abs']:.0e}"
    return f":ref:`✘ {STEP_LETTERS.get(row['step'], '?')} <{_error_label(row)}>`"


#: the temporary folder a zoo run wrote a checkpoint in (changes at every run): shown as ``TMP/``
_TEMPORARY = re.compile(r"(?:/tmp|/var/folders/[\w/]+?/T|[A-Z]:\\[^'\"]*?\\Temp)[/\\][\w.-]+[/\\]")


def error_text(error: str | None) -> str:
    """The error of a row, escaped for rst; a message the zoo shortened (ending with ``...``)
    is cut at its last complete sentence, and a shortened one says so with ``[...]``."""
    text = _TEMPORARY.sub("TMP/", without_addresses(error or "")).replace("\n", " ").strip()
    shortened = text.endswith("...")
    if shortened:
        text = text[:-3]
        ends = [text.rfind(mark) for mark in (". ", "; ", ") ")]
        end = max(ends)
        if end > len(text) // 3:
            text = text[:end + 1]
    if shortened or text.endswith(("(", ":", ",")):
        text = text.rstrip(" (:,") + " [...]"
    return _escape(text)


def plot_summary(rows: Sequence[dict[str, Any]], filename: str | Path) -> None:
    """Bars: captured, exported and matched per exporter, without and with a cache."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = summary(rows)
    labels = [f"{t['exporter']}\n{'cache' if t['cache'] else 'no cache'}" for t in table]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.2
    for i, (name, color) in enumerate((("run", "#cccccc"), ("captured", "#8172b2"),
                                       ("exported", "#4c72b0"), ("matched", "#55a868"))):
        xs = [x + (i - 1.5) * width for x in range(len(table))]
        values = [t[name] for t in table]
        ax.bar(xs, values, width=width, label=name, color=color)
        for x, v in zip(xs, values):
            ax.text(x, v, str(v), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(range(len(table))))
    ax.set_xticklabels(labels)
    ax.set_ylabel("architectures")
    ax.set_title("Discovered transformers architectures exported and matching eager")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)  # beside the bars, never on them
    fig.tight_layout()
    fig.savefig(filename, dpi=100)
    plt.close(fig)


def _heading(text: str, char: str) -> list[str]:
    return [text, char * len(text), ""]


def page_text(rows: Sequence[dict[str, Any]], meta: dict[str, Any], skipped: Sequence[tuple[str, str, str]],
              text_architectures: Sequence[str] = ()) -> str:
    """The rst of the page. ``skipped`` lists ``(architecture, kind, reason)``,
    ``text_architectures`` every architecture the zoo runs (those without rows are listed)."""
    lines = _heading("Supported models", "=")
    names = sorted({r["architecture"] for r in rows})
    kinds = collections.Counter({r["architecture"]: r["kind"] for r in rows}.values())
    lines += [
        f"Every text architecture listed by :epkg:`transformers`' auto mappings for causal LM, "
        f"masked LM and seq2seq is discovered by :mod:`fx2onnx.inputs.discover` "
        f"({len(set(text_architectures) | set(names)) + len(skipped)} architectures, "
        f"{len(skipped)} of them skipped; {len(names)} text models have rows here "
        f"({kinds.get('causal', 0)} causal LM, {kinds.get('masked', 0)} masked LM, "
        f"{kinds.get('seq2seq', 0)} seq2seq); the skipped ones are listed at the end). Each one gets "
        "a tiny configuration (hidden size 64, 2 layers, 4 heads, vocabulary 1024, sliding window 8, "
        "experts and state-space sizes scaled down) and seeded random weights, then is exported by "
        + " and ".join(f"``{k}`` (``{v}``)" for k, v in EXPORTERS.items())
        + " with dynamic batch, sequence and cache lengths, without a cache and with the cache the "
        "model itself returns after a first pass (decoders and seq2seq models), under "
        "``fx2onnx.torch_export_patches(patch_transformers=True)``. The ONNX model is checked on "
        "a second input set (other batch, sequence and cache lengths, a cache of 11 positions, "
        "longer than any sliding window) against eager PyTorch (atol=1e-3, rtol=1e-3). "
        ":doc:`../design/models` explains how this page is made.",
        "",
        f"These rows were computed by ``{meta.get('command', 'python -m fx2onnx models')}``"
        + (f" (then ``{meta['updated_by']}``)" if meta.get("updated_by") else "")
        + f" on {meta.get('date', '?')} with torch {meta.get('torch', '?')} and transformers "
        f"{meta.get('transformers', '?')}; they are committed (``_doc/models/rows.json``) and this page "
        "is rendered from them at build time.",
        "",
        ".. image:: summary.png",
        "    :alt: architectures captured, exported and matched per exporter",
        "",
        ".. list-table:: Architectures per exporter and cache",
        "    :header-rows: 1",
        "",
        "    * - exporter\n      - cache\n      - run\n      - captured\n      - exported\n      - matched",
    ]
    for t in summary(rows):
        lines.append(f"    * - ``{t['exporter']}``\n      - {'yes' if t['cache'] else 'no'}\n      - {t['run']}"
                     f"\n      - {t['captured']}\n      - {t['exported']}\n      - {t['matched']}")
    lines += ["", "*captured*: :func:`torch.export.export` produced a graph; *exported*: the ONNX model "
              "was produced; *matched*: it runs on :epkg:`onnxruntime` and matches eager on the second "
              "input set.", ""]
    lines += [capture_check_sentence(rows), ""]
    lines += _gaps(rows)
    lines += _generation_lines(rows)
    lines += _heading("Known limits", "-")
    capture = sorted({r["architecture"] for r in rows if not r["success"] and r["step"] == "capture"})
    lines += KNOWN_LIMITS + [
        "* **Failing at capture** in these rows: "
        + (", ".join(f"``{n}``" for n in capture) + " (their errors are listed below)." if capture else "none."),
        "",
    ]
    lines += _heading("Per architecture", "-")
    steps = ", ".join(f"**{letter}** {step}" for step, letter in STEP_LETTERS.items())
    lines += [f"✔ and the maximum absolute difference with eager, ✘ and the step which failed ({steps}), "
              "``-`` not applicable (the model takes no cache). Each ✘ links to its error, after the table.", ""]
    columns = [(e, c) for e in EXPORTERS for c in (False, True)]
    index = {(r["architecture"], r["exporter"], r["cache"]): r for r in rows}
    lines += _failures(rows, names, columns, index)
    no_cache = sorted({r["architecture"] for r in rows if not_applicable(r)})
    if no_cache:
        lines += ["Shown as ``-`` (not applicable): the ``forward`` of "
                  + ", ".join(f"``{n}``" for n in no_cache) + " takes no cache.", ""]
    lines += ["The table sorts by a click on a column header; the box above it filters the rows.", ""]
    body = []
    for name in names:
        kind = next(r["kind"] for r in rows if r["architecture"] == name)
        body.append([f"``{name}``", kind] + [_cell(index.get((name, e, c))) for e, c in columns]
                    + [_generate_cell(index.get((name, "to_onnx", True)))])
    groups = [(e, ("no cache", "cache")) for e in EXPORTERS] + [("generate", ("to_onnx",))]
    lines += grid_table(["architecture", "kind"], groups, body, "fx-matrix fx-sortable fx-filterable")
    failing = [r for r in rows if not r["success"] and not not_applicable(r)]
    if failing:
        lines += _heading("Errors", "-")
        lines += ["The first line of each error (a cell of the table links to its error).", ""]
        for r in sorted(failing, key=lambda r: (r["architecture"], r["exporter"], r["cache"])):
            lines += [f".. _{_error_label(r)}:", "",
                      f"**{r['architecture']}**, {r['exporter']}, {'cache' if r['cache'] else 'no cache'}, "
                      f"step *{r['step']}*: {error_text(r['error'])}", ""]
    not_run = [n for n in text_architectures if n not in set(names)]
    if not_run:
        lines += _heading("Not run yet", "-")
        lines += [f"{len(not_run)} discovered text architectures have no row in this run yet (a full run "
                  "takes hours on two cores; ``python -m fx2onnx models --missing`` goes on where the "
                  "last run stopped): " + ", ".join(f"``{n}``" for n in not_run) + ".", ""]
    lines += _heading("Skipped architectures", "-")
    lines += ["Not text models (or composite configurations built from other ones):", ""]
    for name, kind, reason in skipped:
        lines.append(f"* ``{name}`` ({kind}): {_escape(reason)}")
    lines.append("")
    return "\n".join(lines)


def _failures(rows, names, columns, index) -> list[str]:
    """The architectures with a failing cell, each failure linked to its error."""
    items = []
    for name in names:
        failed = [(e, c) for e, c in columns
                  if (r := index.get((name, e, c))) is not None and not r["success"] and not not_applicable(r)]
        if failed:
            links = ", ".join(
                f":ref:`{e} {'cache' if c else 'no cache'} {STEP_LETTERS.get(index[name, e, c]['step'], '?')} "
                f"<{_error_label(index[name, e, c])}>`" for e, c in failed)
            items.append(f"* ``{name}``: {links}")
    # the box "failures only" keeps every row holding a ✘, the generate column's included
    generating = [n for n in names if n not in {i.split("``")[1] for i in items}
                  and "✘" in _generate_cell(index.get((n, "to_onnx", True)))]
    box = (f" The box *failures only* keeps {len(items) + len(generating)} rows: these and the "
           f"{len(generating)} whose generation differs (see :ref:`mdl-generation`)." if generating else "")
    if not items:
        return [f"**Export failures**: none, every architecture matches eager.{box}", ""]
    return [f"**Export failures** ({len(items)} of {len(names)} architectures).{box}", ""] + items + [""]


def _generate_cell(row: dict[str, Any] | None) -> str:
    """``✔ 40/40``: the new tokens of fx2onnx.generate equal to transformers' (see _generation_lines)."""
    result = (row or {}).get("generate")
    if not result:
        return "–"
    if result.get("error"):
        return ":ref:`✘ error <mdl-generation>`"  # the section lists why
    text = f"{result['matched']}/{2 * result['new_tokens']}"
    return f"✔ {text}" if result["equal"] else f":ref:`✘ {text} <mdl-generation>`"


def _generation_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The generate column explained: how many decoders generate the tokens transformers does."""
    done = sorted((r for r in rows if r.get("generate")), key=lambda r: r["architecture"])
    lines = [".. _mdl-generation:", ""] + _heading("Generation", "-")
    if not done:
        return lines + ["No row has its generation compared yet.", ""]
    equal = [r for r in done if r["generate"]["equal"]]
    tokens = done[0]["generate"]["new_tokens"]
    candidates = [r for r in rows if r["exporter"] == "to_onnx" and r["cache"] and r["success"]
                  and r["kind"] == "causal"]
    missing = len(candidates) - len(done)
    pending = (f" {missing} other decoders whose cache row matches were computed before the column existed: "
               "their cell stays empty until their rows are computed again." if missing > 0 else "")
    lines += [
        f"For every decoder whose ``to_onnx`` export with a cache matches eager, :func:`fx2onnx.generate` "
        f"generates {tokens} new tokens on the ONNX model (two prompts of 8 tokens, greedy) and "
        "``model.generate(do_sample=False)`` on the eager model (column *generate*: the new tokens equal, "
        f"out of {2 * tokens}; ``–``: not compared).{pending} {len(equal)} of the {len(done)} decoders "
        "compared generate the same tokens" + (":" if len(equal) < len(done) else "."),
        "",
    ]
    for r in done:
        g = r["generate"]
        if not g["equal"]:
            if g["error"]:  # stored cut at STORED_ERROR characters: cut at its last complete sentence
                why = error_text(g["error"] + ("..." if len(g["error"]) >= STORED_ERROR else ""))
            else:
                why = _escape(f"{g['matched']}/{2 * tokens} new tokens equal, the first difference at new "
                              f"token {g['first_difference']}")
            if g.get("cause"):  # fx2onnx.generate equals a greedy loop on the eager forward
                why += _escape(f"; the tokens of a greedy loop on the eager forward: {g['cause']}")
            lines.append(f"* ``{r['architecture']}``: {why}")
    return lines + [""]


def _gaps(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Rows where dynamo matches eager and to_onnx does not."""
    index = {(r["architecture"], r["exporter"], r["cache"]): r for r in rows}
    gaps = [r for r in rows if r["exporter"] == "to_onnx" and not r["success"] and not not_applicable(r)
            and index.get((r["architecture"], "dynamo", r["cache"]), {}).get("success")]
    lines = _heading("Where torch.onnx.export succeeds and fx2onnx.to_onnx does not", "-")
    if not gaps:
        return lines + ["None.", ""]
    for r in gaps:
        lines.append(f"* ``{r['architecture']}`` ({'cache' if r['cache'] else 'no cache'}, step {r['step']}): "
                     f"{error_text(r['error'])}")
    return lines + [""]


def write_page(rows: Sequence[dict[str, Any]], meta: dict[str, Any], out_dir: str | Path,
               skipped: Sequence[tuple[str, str, str]] = (), text_architectures: Sequence[str] = (),
               subpages: Sequence[str] = ()) -> list[Path]:
    """Writes ``index.rst`` and ``summary.png`` into ``out_dir``; ``subpages`` (pages of the same
    folder, such as the timm and diffusers ones) are listed in a toctree at its top."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = page_text(rows, meta, skipped, text_architectures)
    if subpages:
        title, underline, rest = text.split("\n", 2)
        toctree = "\n".join([".. toctree::", "    :maxdepth: 1", "", *(f"    {p}" for p in subpages), ""])
        other = "Other libraries, and the tasks of transformers beyond text:"
        text = "\n".join([title, underline, "", other, "", toctree, rest.lstrip("\n")])
    index = out / "index.rst"
    if not index.exists() or index.read_text(encoding="utf-8") != text:
        index.write_text(text, encoding="utf-8")
    plot_summary(rows, out / "summary.png")
    return [index, out / "summary.png"]


__all__ = ["STEPS", "STEP_LETTERS", "error_text", "not_applicable", "page_text", "plot_summary", "summary",
           "write_page"]


def capture_check_sentence(rows: Sequence[dict[str, Any]]) -> str:
    """How many ``to_onnx`` rows ran with the capture check and which ones it flagged."""
    mine = [r for r in rows if r["exporter"] == "to_onnx"]
    checked = [r for r in mine if r.get("capture_check")]
    flagged = sorted({r["architecture"] for r in checked if (r.get("error") or "").startswith("CaptureMismatch")})
    # the check runs once torch.export returned a program: on the rows which got past the capture, and the flagged
    reached = [r for r in checked if r["step"] in ("conversion", "validation", None) or r["architecture"] in flagged]
    text = ("*Capture check*: before converting, ``to_onnx`` runs the program ``torch.export`` returned on the "
            "example inputs and compares it with eager (:class:`fx2onnx.CaptureMismatchError`: a wrong capture "
            f"is no silent wrong model). {len(checked)} of the {len(mine)} ``to_onnx`` rows ran with it")
    text += "" if len(checked) == len(mine) else f" ({len(mine) - len(checked)} ran before it existed)"
    if not checked:
        return text + "."
    text += f"; it checked the {len(reached)} captured by torch.export and flagged {len(flagged)}"
    return text + (": " + ", ".join(f"``{n}``" for n in flagged) + "." if flagged else ".")
