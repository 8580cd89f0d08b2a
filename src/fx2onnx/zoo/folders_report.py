"""The causal-LM folders page of the supported models: every causal-LM class, from a tiny folder to generated tokens.

The rows come from ``_doc/models/causal_folders.json``, written by ``bench/sweep_folders.py`` (one row per model type
of transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING``: a tiny float32 ``save_pretrained`` folder exported by
``python -m fx2onnx export FOLDER`` with no flag, then generating greedily, the tokens compared with transformers'
``generate`` and, where transformers.js lists the model type, with transformers.js' on the same folder).
:func:`write_folders_page` renders ``causal_folders.rst``: the counts, then one line per class, a failure with its
one-line reason. Nothing runs at build time.

.. code-block:: python

    from fx2onnx.zoo.folders_report import folders_page

    row = {"arch": "llama", "class": "LlamaForCausalLM", "step": "compare", "equal": True,
           "stamped": True, "export_seconds": 6.2}
    print(folders_page({"rows": [row]}))
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

#: the page's name in the models folder
PAGE = "causal_folders"


def status(row: dict[str, Any]) -> str:
    """``equal``, ``differs``, ``fails at <step>``, ``timeout``: what a row says of its folder."""
    if row.get("equal"):
        return "equal"
    if row.get("step") == "compare" and "equal" in row:
        return "differs"
    if row.get("step") in ("timeout", "crash"):
        return str(row["step"])
    return f"fails at {row.get('step', '?')}"


def counts(document: dict[str, Any]) -> dict[str, int]:
    """The classes run, the folders exported, those generating transformers' tokens, the stamped ones."""
    rows = document.get("rows", [])
    return {"run": len(rows), "exported": sum(r.get("step") in ("generate", "compare") for r in rows),
            "equal": sum(bool(r.get("equal")) for r in rows), "stamped": sum(bool(r.get("stamped")) for r in rows),
            "transformersjs_run": sum("transformersjs" in r for r in rows),
            "transformersjs_equal": sum(bool(r.get("transformersjs")) for r in rows),
            "transformersjs_refused": sum("transformersjs_refused" in r for r in rows)}


def transformersjs_cell(row: dict[str, Any]) -> str:
    """``equal``, ``differs`` or ``fails`` for a folder transformers.js ran, ``refused`` for a folder that says it
    cannot (its cache fed under other names), empty where it did not run (a model type transformers.js does not list,
    or a folder that was not exported)."""
    if "transformersjs_refused" in row:
        return "refused"
    if "transformersjs" not in row:
        return ""
    if row["transformersjs"]:
        return "equal"
    return "differs" if "differ" in row.get("transformersjs_error", "") else "fails"


def _reason(row: dict[str, Any]) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", row.get("error") or "").replace("|", "/").replace("`", "'")
    text = re.sub(r"/\S*fx2onnx-sweep-[^/\s]*", "FOLDER", text)  # the sweep's temporary folder
    return text.removeprefix("error: ")[:160]


def folders_page(document: dict[str, Any], total: int | None = None) -> str:
    """The page of a sweep's JSON document (``rows`` and its context): counts, then a table of every class."""
    rows = sorted(document.get("rows", []), key=lambda r: r["arch"])
    c = counts(document)
    total = total if total is not None else int(document.get("classes", len(rows)))
    versions = ", ".join(f"{k} {v}" for k, v in document.get("versions", {}).items())
    lines = [
        "Causal LMs from a folder",
        "========================",
        "",
        "Every model type of transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING``: a tiny configuration "
        f"({document.get('layers', '?')} layers, hidden size 64) written as a float32 ``save_pretrained`` folder with a "
        "tokenizer, exported by ``python -m fx2onnx export FOLDER`` with no flag (its check against eager included), "
        f"then generating {document.get('new_tokens', '?')} tokens greedily; the tokens are compared with "
        "``model.generate(..., do_sample=False)`` of transformers on the same folder. *stamped*: two layers (or two "
        "periods of layers) captured, the others copied in ONNX.",
        "",
        f"**{c['equal']} of {total}** classes generate transformers' tokens; {c['exported']} exported, "
        f"{c['stamped']} with stamped layers" + (f"; {total - c['run']} not run yet." if c["run"] < total else "."),
        "",
        f"**transformers.js** (``@huggingface/transformers`` in Node, where its ``AutoModelForCausalLM`` lists the "
        f"model type) generates transformers' tokens on **{c['transformersjs_equal']} of "
        f"{c['transformersjs_run']}** exported folders it ran" + (
            f"; refused by the folder itself (a cache transformers.js does not feed, each saying why): "
            f"{c['transformersjs_refused']}." if c["transformersjs_refused"] else "."),
        "",
        f"Run on {document.get('date', 'an unknown date')}, {document.get('machine', '')}, {versions}: "
        f"``{document.get('command', '')}``." + (f" {document['notes']}" if document.get("notes") else ""),
        "",
        ".. list-table::",
        "    :header-rows: 1",
        "    :widths: 17 24 9 8 8 9 25",
        "",
        "    * - model type",
        "      - class",
        "      - folder",
        "      - stamped",
        "      - export (s)",
        "      - transformers.js",
        "      - why not",
    ]
    for row in rows:
        export = row.get("export_seconds")
        reason = "" if row.get("equal") else _reason(row).replace("`", "'").strip()
        js_reason = row.get("transformersjs_error") or row.get("transformersjs_refused")
        if js_reason:
            reason = "; ".join(x for x in (reason, _reason({"error": js_reason})) if x)
        # names and reasons as literals: the site's style sheet wraps them anywhere, the table fits the column
        cells = [_literal(row.get("class", "")), status(row), "yes" if row.get("stamped") else "",
                 "" if export is None else str(export), transformersjs_cell(row), _literal(reason)]
        lines += [f"    * - {_literal(row['arch'])}", *(f"      - {cell}" if cell else "      -" for cell in cells)]
    return "\n".join(lines) + "\n"


def _literal(text: str) -> str:
    return f"``{text}``" if text else ""


def write_folders_page(rows_path: str | Path, out_dir: str | Path, total: int | None = None) -> list[str]:
    """Writes ``causal_folders.rst`` into ``out_dir`` when ``rows_path`` holds a sweep; returns the page names
    written (``["causal_folders"]`` or none)."""
    path = Path(rows_path)
    if not path.exists():
        return []
    document = json.loads(path.read_text(encoding="utf-8"))
    if not document.get("rows"):
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target, text = out / f"{PAGE}.rst", folders_page(document, total)
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
    return [PAGE]
