"""Build-time page generator: the tables of the stored benchmarks, rendered from their JSON.

``conf.py`` calls :func:`generate` when the builder starts. A benchmark which exports
full-size checkpoints runs for minutes to hours, so it is not run by the build: its script
(``bench/bench_deploy.py``, ``bench/bench_speech.py``, ``bench/bench_vlm.py``) stores its rows in
``_doc/bench/<name>.json``, each row with its date and command. This module renders them into
``design/_generated/bench_<name>.inc`` (gitignored, included by ``design/deploy.rst``): one row
per model and precision, fx2onnx's value beside onnxruntime-genai's, the ratio of decoding
speeds, then the dates and commands of the rows. The gallery pages plotting the same JSON show
the same values: a number is typed once, by the script which measured it.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "_doc" / "bench"
OUTPUT = ROOT / "design" / "_generated"
OURS, THEIRS = "fx2onnx", "onnxruntime-genai"


def _pairs(rows: list[dict], key) -> list[tuple[tuple, dict, dict | None]]:
    """(key, fx2onnx's row, onnxruntime-genai's row or None), in the JSON's order."""
    by: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        by.setdefault(key(row), {})[row["exporter"]] = row
    pairs = [(k, v[OURS], v.get(THEIRS)) for k, v in by.items() if OURS in v]
    models = list(dict.fromkeys(k[0] for k, _, _ in pairs))  # the JSON's order of models, then the rest
    order = {"float32": 0, "bfloat16": 1, "float16": 2, "int8": 3, "int4": 4}
    return sorted(pairs, key=lambda p: (models.index(p[0][0]), p[0][2:], order.get(p[0][1], 9)))


def _both(ours: dict, theirs: dict | None, field: str, fmt: str) -> str:
    left = format(ours[field], fmt) if field in ours else "-"
    if theirs is None or field not in theirs:
        return left
    return f"{left} / {format(theirs[field], fmt)}"


def _ratio(ours: dict, theirs: dict | None, field: str) -> str:
    if theirs is None or not theirs.get(field):
        return "-"
    return f"{ours[field] / theirs[field]:.2f}x"


def _list_table(header: list[str], body: list[list[str]], widths: list[int]) -> list[str]:
    lines = [".. list-table::", "    :header-rows: 1", f"    :widths: {' '.join(map(str, widths))}", ""]
    for row in [header, *body]:
        lines.append(f"    * - {row[0]}")
        lines.extend(f"      - {cell}" for cell in row[1:])
    return lines


def _sources(rows: list[dict]) -> list[str]:
    """The dates and commands of the rows, each once."""
    seen: dict[tuple[str, str], None] = {}
    for row in rows:
        seen[(row.get("date", "date not recorded"), row.get("command", "command not recorded"))] = None
    lines = ["Measured by:", ""]
    for date, command in seen:
        lines.append(f"* {date}: ``{command}``")
    versions = {json.dumps(r["versions"], sort_keys=True) for r in rows if "versions" in r}
    for text in sorted(versions):
        lines.append("* versions: " + ", ".join(f"{k} {v}" for k, v in json.loads(text).items()))
    return lines


def llm_deploy_table(stored: dict) -> str:
    """The rst of ``llm_deploy.json``: text folders exported by both tools."""
    rows = stored["rows"]
    body = []
    for (model, precision, prompt, new), ours, theirs in _pairs(
        rows, lambda r: (r["model"], r["precision"], r.get("prompt", 24), r.get("new", 64))
    ):
        body.append([
            f"{model} {precision}, {prompt} + {new} tokens",
            _both(ours, theirs, "export_s", ".1f"), _both(ours, theirs, "peak_rss_gb", ".2f"),
            _both(ours, theirs, "size_mb", ".0f"), _both(ours, theirs, "prefill_tok_s", ".1f"),
            _both(ours, theirs, "decode_tok_s", ".2f"), _ratio(ours, theirs, "decode_tok_s"),
            "yes" if theirs is not None and theirs.get("same_tokens") else "no",
        ])
    header = ["model, precision, prompt + new tokens", "export (s)", "export's peak memory (GB)",
              "files (MB)", "prefill (tokens/s)", "decode (tokens/s)", "decode ratio", "same tokens"]
    lines = [f"Each cell: fx2onnx / onnxruntime-genai's builder; the ratio is fx2onnx's decoding speed over the "
             f"builder's (above 1: fx2onnx is faster). {stored.get('cpus', '?')} cores, one intra-op thread, "
             f"greedy, the best of interleaved rounds.", ""]
    lines += _list_table(header, body, [22, 11, 11, 11, 11, 12, 8, 6]) + [""] + _sources(rows)
    return "\n".join(lines) + "\n"


def multimodal_table(stored: dict) -> str:
    """The rst of ``multimodal.json``: speech and image-text folders exported by both tools."""
    rows = stored["rows"]
    body = []
    for (model, precision), ours, theirs in _pairs(rows, lambda r: (r["model"], r["precision"])):
        files = _both(ours, theirs, "size_mb", ".0f")
        first = _both(ours, theirs, "first_token_ms", ".0f")
        if "text_mb" in ours:  # the builder writes the text model only: ours without the vision piece too
            files += f" (text: {_both(ours, theirs, 'text_mb', '.0f')})"
            first += f" (text: {_both(ours, theirs, 'text_first_token_ms', '.0f')})"
        body.append([
            f"{model.split(',')[0]} {precision}", _both(ours, theirs, "export_s", ".1f"), _both(ours, theirs, "peak_rss_gb", ".2f"),
            files, first, _both(ours, theirs, "decode_tok_s", ".1f"), _ratio(ours, theirs, "decode_tok_s"),
        ])
    header = ["model, precision", "export (s)", "export's peak memory (GB)", "files (MB)",
              "first token (ms)", "decode (tokens/s)", "decode ratio"]
    lines = [f"Each cell: fx2onnx / onnxruntime-genai's builder; *text*: the text decoder alone (the builder "
             f"writes no vision piece for this model). Qwen2.5-VL-3B's widths with 8 decoder layers and 8 vision "
             f"blocks. {stored.get('cpus', '?')} cores, 2 threads, greedy, the best of interleaved rounds.", ""]
    lines += _list_table(header, body, [18, 11, 11, 18, 18, 12, 8]) + [""] + _sources(rows)
    return "\n".join(lines) + "\n"


def stamped_patterns_table(stored: dict) -> str:
    """The rst of ``stamped_patterns.json``: deep tiny folders exported stamped and captured whole."""
    rows = stored["rows"]
    body = []
    for row in rows:
        layers = f"{row['layers']}"
        if row.get("first_k_dense_replace"):
            layers += f" ({row['first_k_dense_replace']} dense first)"
        captured = "all" if row["capture"] == "whole" else f"{row['captured_layers']}"
        tokens = {True: "yes", False: "no"}.get(row.get("greedy_equal"), "-")
        body.append([row["case"], layers, row["capture"], captured, f"{row['export_seconds']:.1f}",
                     f"{row['check_seconds']:.1f}", f"{row['peak_rss_mb']}",
                     "yes" if row["checks_ok"] else "no", tokens])
    header = ["model type", "layers", "capture", "layers captured", "export (s)", "check (s)",
              "peak memory (MB)", "equal to eager", "transformers' tokens"]
    load = ", ".join(f"{x:g}" for x in stored.get("load_average", []))
    lines = [f"Tiny float32 folders, each export in its own process. Load average {load or 'not recorded'} "
             f"when measured: the seconds rank, they do not settle a target.", ""]
    lines += _list_table(header, body, [14, 10, 9, 9, 8, 8, 9, 8, 10]) + [""]
    if stored.get("notes"):
        lines += [stored["notes"], ""]
    lines += [f"Measured by: {stored.get('date', 'date not recorded')}, ``{stored.get('command', '')}``"]
    return "\n".join(lines) + "\n"


TABLES = {"llm_deploy": llm_deploy_table, "multimodal": multimodal_table, "stamped_patterns": stamped_patterns_table}
#: the measurements the design pages cite, one JSON per page: its ``tables`` (a measured table with its date,
#: machine, versions, command and notes) and its ``findings`` (one measured sentence each)
MEASURED_PAGES = ("optimizer", "runner", "deploy", "folder_safety", "site", "real_size_families")


def _measured_by(entry: dict) -> list[str]:
    """The lines saying when, where and how a table or a finding was measured."""
    versions = ", ".join(f"{k} {v}" for k, v in entry.get("versions", {}).items())
    command = f"``{entry['command']}``" if entry.get("command") else "command not recorded"
    return [f"*Measured {entry.get('date', '(date not recorded)')} on {entry.get('machine', 'the project machine')}"
            f"{' (' + versions + ')' if versions else ''}: {command}.*"]


def measured_table(entry: dict) -> str:
    """The rst of one measured table: its title, conditions, the table, its notes, how it was measured."""
    columns = entry["columns"]
    lines = [f"**{entry['title']}.** {entry.get('conditions', '')}".rstrip(), ""]
    lines += _list_table(columns, [[cell or "" for cell in row] for row in entry["rows"]],
                         [max(8, min(40, max(len(str(r[i])) for r in [columns, *entry["rows"]])))
                          for i in range(len(columns))])
    lines.append("")
    for note in entry.get("notes", []):
        lines += [f"* {note}"]
    if entry.get("notes"):
        lines.append("")
    return "\n".join(lines + _measured_by(entry)) + "\n"


def measured_finding(entry: dict) -> str:
    """The rst of one measured sentence, with how it was measured."""
    how = f" ({entry['how']})" if entry.get("how") else ""
    return f"*Measured {entry.get('date', '(date not recorded)')}{how}:* {entry['text']}\n"


def _write(path: Path, text: str) -> Path:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def generate(app=None) -> list[Path]:
    """Writes ``design/_generated/bench_<name>.inc`` for every table of :data:`TABLES`, and
    ``design/_generated/measured_<page>_<name>.inc`` for every table and finding of :data:`MEASURED_PAGES`."""
    OUTPUT.mkdir(parents=True, exist_ok=True)
    written = []
    for name, render in TABLES.items():
        with open(BENCH / f"{name}.json", encoding="utf-8") as f:
            text = render(json.load(f))
        written.append(_write(OUTPUT / f"bench_{name}.inc", text))
    for page in MEASURED_PAGES:
        with open(BENCH / f"{page}.json", encoding="utf-8") as f:
            stored = json.load(f)
        for name, entry in stored["tables"].items():
            written.append(_write(OUTPUT / f"measured_{page}_{name}.inc", measured_table(entry)))
        for name, entry in stored["findings"].items():
            written.append(_write(OUTPUT / f"measured_{page}_{name}.inc", measured_finding(entry)))
    return written


if __name__ == "__main__":
    for path in generate():
        print(path.read_text(encoding="utf-8"))
