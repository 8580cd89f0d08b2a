"""The causal-LM folders page renders the sweep's JSON (bench/sweep_folders.py): counts and one line per class."""

from __future__ import annotations

import json

from fx2onnx.zoo.folders_report import counts, folders_page, status, transformersjs_cell, write_folders_page

DOCUMENT = {
    "date": "2026-12-07 06:00 UTC", "machine": "x86_64, 2 cores", "versions": {"torch": "2.13.0"},
    "command": "python bench/sweep_folders.py", "layers": 6, "new_tokens": 8, "classes": 4,
    "rows": [
        {"arch": "llama", "class": "LlamaForCausalLM", "step": "compare", "equal": True, "stamped": True,
         "export_seconds": 6.2, "transformersjs": True},
        {"arch": "gemma3_text", "class": "Gemma3ForCausalLM", "step": "compare", "equal": False, "stamped": False,
         "export_seconds": 9.0, "error": "tokens differ from transformers' at new token 3", "transformersjs": False,
         "transformersjs_error": "transformers.js: Error: Unsupported model type: gemma3_text"},
        {"arch": "cpmant", "class": "CpmAntForCausalLM", "step": "export",
         "error": "error: CpmAnt's cache | is a tuple in /tmp/fx2onnx-sweep-ab12/checkpoint"},
    ],
}
#: a folder that refuses transformers.js says why instead of running it
REFUSED = {"arch": "mbart", "class": "MBartForCausalLM", "step": "compare", "equal": True,
           "transformersjs_refused": "transformers.js feeds a decoder-only mbart no cache"}


def test_counts_and_one_line_per_class(tmp_path):
    assert counts(DOCUMENT) == {"run": 3, "exported": 2, "equal": 1, "stamped": 1, "transformersjs_run": 2,
                                "transformersjs_equal": 1, "transformersjs_refused": 0}
    assert [status(r) for r in DOCUMENT["rows"]] == ["equal", "differs", "fails at export"]
    assert [transformersjs_cell(r) for r in DOCUMENT["rows"]] == ["equal", "fails", ""]
    text = folders_page(DOCUMENT)
    assert "generates transformers' tokens on **1 of 2** exported folders it ran." in text
    assert "at new token 3; transformers.js: Error: Unsupported model type: gemma3_text``" in text
    assert "**1 of 4** classes generate transformers' tokens; 2 exported, 1 with stamped layers; 1 not run yet." in text
    assert "      - ``CpmAnt's cache / is a tuple in FOLDER/checkpoint" in text  # the reason, without the prefix nor a table separator
    assert text.index("* - ``cpmant``") < text.index("* - ``gemma3_text``") < text.index("* - ``llama``")
    assert not any(line.endswith(" ") for line in text.splitlines())
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(DOCUMENT), encoding="utf-8")
    assert write_folders_page(path, tmp_path / "out") == ["causal_folders"]
    assert (tmp_path / "out" / "causal_folders.rst").read_text(encoding="utf-8") == text
    assert write_folders_page(tmp_path / "missing.json", tmp_path / "out") == []


def test_a_refused_folder_shows_its_reason():
    document = {**DOCUMENT, "rows": [*DOCUMENT["rows"], REFUSED]}
    assert counts(document)["transformersjs_refused"] == 1 and counts(document)["transformersjs_run"] == 2
    assert transformersjs_cell(REFUSED) == "refused"
    text = folders_page(document)
    assert "refused by the folder itself (a cache transformers.js does not feed, each saying why): 1." in text
    assert "      - ``transformers.js feeds a decoder-only mbart no cache``" in text
