"""Checks the built site for what must never reach a reader, and reports its longest pages.

``make html`` runs it after Sphinx: ``python _doc/site_check.py _build/html``. It reads every
HTML page (the ``_modules/`` source pages and the search index excepted), takes the text a
reader sees (no ``<script>``, no ``<style>``, no tag or attribute) and fails (exit 1, one line
per finding) on:

* a temporary path (``/tmp/tmpab12cd``, ``C:\\...\\Temp\\``): an example printed where it wrote;
* a progress bar (``100%|####| 3/3``): a tool's bar captured in an example's output;
* a memory address (``0x7f3a2c...``, ``object at 0x...``): changes at every build;
* an empty file name in a source location (``File "", line 13``);
* a tracker number (``issue 33``, ``#33``, ``stop 48``): our work process, not the product;
* a placeholder left in a page (``REPOSITORY_URL``);
* a memory column of sphinx-gallery which measures nothing (``Estimated memory usage: 0 MB``);
* a line of code or output, or a word, longer than :data:`MAX_LINE` characters (far past the window
  at 1400 px);
* a line of a code block wider than the content column at 1400 px (:data:`COLUMN_CHARS`): the output
  of an example and the literal blocks of text wrap their lines (:data:`WRAPPED_BLOCKS`, the site's
  CSS), code scrolls;
* a gallery example which ran longer than its time budget (:data:`BUDGETS`, read from the
  "Total running time of the script" sphinx-gallery writes on every example's page).

* a table wider than the content column at 1400 px (:data:`COLUMN_PX`), estimated from the longest
  word of each column (a literal wraps anywhere, the site's CSS); the matrices of the zoo's pages
  (``fx-matrix``) scroll in their own box by design, their header kept on screen.

It reports the longest pages and examples.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser

#: (name, regular expression on the visible text of a page)
RULES: list[tuple[str, re.Pattern]] = [
    # a documented location (torch's compile cache) is no leftover: "/tmp/torchinductor_<user>"
    ("temporary path", re.compile(r"(?<![\w.])/tmp/(?!torchinductor_<)[\w.-]+|/var/folders/\w+|"
                                  r"\\AppData\\Local\\Temp\\", re.I)),
    ("progress bar", re.compile(r"\d{1,3}%\|[^|\n]{0,80}\|\s*\d+(?:\.\d+)?[kMG]?/\d+")),
    ("memory address", re.compile(r"\bat 0x[0-9a-f]{6,}\b|\b0x(?:7f|55|56)[0-9a-f]{8,}\b", re.I)),
    ("empty file name", re.compile(r"File \"\", line \d+")),
    ("tracker number", re.compile(r"\b(?:issue|stop)\s+\d+(?![\d.,])|(?<![\w&#/])#\d{2,4}\b(?!\.\d)", re.I)),
    ("placeholder", re.compile(r"\bREPOSITORY_URL\b|\bTODO\b|\bFIXME\b")),
    ("memory usage of 0 MB", re.compile(r"Estimated memory usage:\s*0 MB")),
]

#: a line of a ``<pre>`` block (or a word of a paragraph) longer than this fails: about 3,000 px, far
#: into its scroll box (a line of code fails past the column, :data:`COLUMN_CHARS`)
MAX_LINE = 400
#: the characters of a line of code in the content column at 1400 px (54em, 856 px: ``_static/fx2onnx.css``;
#: 105 measured in Chromium): a wider line scrolls
COLUMN_CHARS = 104
#: the content column in pixels: a table whose narrowest width (its longest words) is wider scrolls (reported)
COLUMN_PX = 856
#: the blocks whose lines wrap (``_static/fx2onnx.css``): a gallery example's output and the literal blocks of
#: text (``::``, ``code-block:: text``, a command's output); the code blocks (python, bash) keep their lines
WRAPPED_BLOCKS = ("sphx-glr-script-out", "highlight-text", "highlight-default", "highlight-none", "fx-wrap")

#: seconds a gallery example may run (a regular expression on its page's path -> seconds);
#: the first matching entry applies
#: (measured on the 2-core build machine, loaded by other jobs: a quiet machine takes about half)
BUDGETS: list[tuple[str, float]] = [
    # three to four checkpoint folders exported and generating from the command line
    (r"_folders?_(generate_)?10\d", 480.0),
    # Mask R-CNN exported (most of the export is torch.export's symbolic reasoning on the resize and the kept boxes)
    (r"plot_torchvision_detection", 480.0),
    (r"06_benchmarks/|bench", 420.0),
    (r".*", 240.0),
]
#: ``FX2ONNX_BUDGET_SCALE=2 make html`` doubles every budget (a slower machine)
BUDGET_SCALE = float(os.environ.get("FX2ONNX_BUDGET_SCALE", "1") or 1)

_TOTAL_TIME = re.compile(r"Total running time of the script:\s*\(\s*(?:(\d+)\s*minutes?\s*)?([\d.]+)\s*seconds?\s*\)")


@dataclass
class Page:
    """What the checks read from one HTML page."""

    text: str = ""
    #: the text outside the ``<pre>`` blocks
    prose: str = ""
    #: the lines of the code blocks (they scroll when wider than the column)
    pre_lines: list[str] = field(default_factory=list)
    #: the lines of the blocks that wrap (:data:`WRAPPED_BLOCKS`)
    wrapped_lines: list[str] = field(default_factory=list)
    #: the estimated width in pixels of every table
    table_widths: list[int] = field(default_factory=list)


class _Extractor(HTMLParser):
    """Collects the visible text, the lines of ``<pre>`` blocks and the tables' cell widths."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.prose: list[str] = []
        self.skip = 0
        self.pre = 0
        self.pre_parts: list[str] = []
        self.pre_blocks: list[str] = []
        self.wrapped_blocks: list[str] = []
        # one entry per open div: whether its lines wrap (a class of WRAPPED_BLOCKS)
        self.divs: list[bool] = []
        # one entry per open table: the widths of its columns, the current row's cells, the cell's text
        self.tables: list[dict] = []
        self.widths: list[int] = []
        # one entry per open <code>: whether it is a literal the style sheet wraps anywhere (``code.literal``)
        self.codes: list[bool] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.skip += 1
        elif tag == "pre":
            self.pre += 1
        elif tag == "div":
            classes = (dict(attrs).get("class") or "").split()
            self.divs.append(any(c in WRAPPED_BLOCKS for c in classes))
            if not self.pre:
                self.parts.append("\n")
        elif tag == "table":
            classes = (dict(attrs).get("class") or "").split()
            self.tables.append({"cols": [], "row": [], "cell": None, "matrix": "fx-matrix" in classes})
        elif tag == "code":
            self.codes.append("literal" in (dict(attrs).get("class") or "").split())
        elif tag == "tr" and self.tables:
            self.tables[-1]["row"] = []
        elif tag in ("td", "th") and self.tables:
            self.tables[-1]["cell"] = []
        elif tag in ("br", "p", "div", "li", "tr") and not self.pre:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip = max(0, self.skip - 1)
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
            if not self.pre:
                (self.wrapped_blocks if any(self.divs) else self.pre_blocks).append("".join(self.pre_parts))
                self.pre_parts = []
        elif tag == "div" and self.divs:
            self.divs.pop()
        elif tag == "code" and self.codes:
            self.codes.pop()
        elif tag in ("td", "th") and self.tables and self.tables[-1]["cell"] is not None:
            table = self.tables[-1]
            # the narrowest a cell can be: its longest word (a browser wraps at the spaces)
            table["row"].append(max((len(w) for w in "".join(table["cell"]).split()), default=0))
            table["cell"] = None
        elif tag == "tr" and self.tables:
            table = self.tables[-1]
            for i, n in enumerate(table["row"]):
                if i < len(table["cols"]):
                    table["cols"][i] = max(table["cols"][i], n)
                else:
                    table["cols"].append(n)
        elif tag == "table" and self.tables:
            table = self.tables.pop()
            # about 7.5 px a character of the body font in a table, 16 px of padding a column:
            # the table's narrowest width, wider than the column it scrolls; a matrix (fx-matrix: the zoo's
            # grids) scrolls in its own box by design, its header kept on screen
            if not table["matrix"]:
                self.widths.append(int(sum(n * 7.5 + 16 for n in table["cols"])))
        if tag in ("p", "div", "li", "tr", "td", "th", "pre", "dt", "dd", "h1", "h2", "h3", "h4") and not self.pre:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.skip:
            return
        self.parts.append(data)
        if self.pre:
            self.pre_parts.append(data)
        else:
            self.prose.append(data)
        if self.tables and self.tables[-1]["cell"] is not None:
            # a literal wraps anywhere (the style sheet): it widens a column by a few characters only
            self.tables[-1]["cell"].append(re.sub(r"\S{12}", r"\g<0> ", data) if any(self.codes) else data)


def read_page(html: str) -> Page:
    """The visible text, the ``<pre>`` lines and the tables' widths of an HTML page."""
    parser = _Extractor()
    parser.feed(html)
    parser.close()
    lines = [line for block in parser.pre_blocks for line in block.splitlines()]
    wrapped = [line for block in parser.wrapped_blocks for line in block.splitlines()]
    return Page(text="".join(parser.parts), prose=" ".join(parser.prose), pre_lines=lines,
                wrapped_lines=wrapped, table_widths=parser.widths)


def check_page(html: str, max_line: int = MAX_LINE) -> list[str]:
    """The problems of one page: ``"rule: excerpt"`` for each finding (one per rule and excerpt)."""
    page = read_page(html)
    problems: list[str] = []
    for name, pattern in RULES:
        seen = set()
        for match in pattern.finditer(page.text):
            start = max(0, match.start() - 30)
            excerpt = " ".join(page.text[start : match.end() + 30].split())
            if match.group(0) not in seen:
                seen.add(match.group(0))
                problems.append(f"{name}: ...{excerpt}...")
    for line in page.pre_lines + page.wrapped_lines:
        if len(line) > max_line:
            problems.append(f"line of {len(line)} characters (at most {max_line}): {line[:60]}...")
            break
    # a code block's line past the content column at 1400 px: the reader scrolls to read it
    for line in page.pre_lines:
        if COLUMN_CHARS < len(line) <= max_line:
            problems.append(f"line of code of {len(line)} characters, wider than the content column at 1400 px "
                            f"(at most {COLUMN_CHARS}): {line[:60]}...")
            break
    # a word a browser cannot wrap (a long literal in a paragraph) widens its block as a long line does
    for word in page.prose.split():
        if len(word) > max_line:
            problems.append(f"word of {len(word)} characters (at most {max_line}): {word[:60]}...")
            break
    return problems


def example_seconds(html: str) -> float | None:
    """The running time sphinx-gallery printed on an example's page, None on another page."""
    match = _TOTAL_TIME.search(" ".join(read_page(html).text.split()))
    if not match:
        return None
    return float(match.group(1) or 0) * 60 + float(match.group(2))


def budget(name: str) -> float:
    """The seconds an example may run (:data:`BUDGETS`), ``name`` the path of its page."""
    for pattern, seconds in BUDGETS:
        if re.search(pattern, name):
            return seconds * BUDGET_SCALE
    return float("inf")


@dataclass
class Report:
    """The findings on a built site."""

    problems: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    wide_lines: dict[str, int] = field(default_factory=dict)
    wide_tables: dict[str, int] = field(default_factory=dict)


def _pages(folder: str):
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in ("_modules", "_static", "_sources", "_images", "_downloads"))
        for name in sorted(files):
            if name.endswith(".html") and name not in ("genindex.html", "search.html", "py-modindex.html"):
                yield os.path.join(root, name)


def check_site(folder: str, max_line: int = MAX_LINE) -> Report:
    """Checks every page of a built site (the HTML folder of ``make html``)."""
    report = Report()
    for path in _pages(folder):
        rel = os.path.relpath(path, folder)
        with open(path, encoding="utf-8") as f:
            html = f.read()
        report.sizes[rel] = len(html)
        report.problems.extend(f"{rel}: {p}" for p in check_page(html, max_line))
        page = read_page(html)
        wide = sum(len(line) > COLUMN_CHARS for line in page.pre_lines)
        if wide:
            report.wide_lines[rel] = wide
        if page.table_widths and max(page.table_widths) > COLUMN_PX:
            report.wide_tables[rel] = max(page.table_widths)
            report.problems.append(f"{rel}: a table of about {max(page.table_widths)} px at its narrowest, wider than "
                                   f"the content column at 1400 px ({COLUMN_PX} px): shorten its longest words "
                                   "or make it a matrix (class fx-matrix, scrolling in its box)")
        seconds = example_seconds(html)
        if seconds is not None and rel.startswith("auto_examples"):
            report.times[rel] = seconds
            limit = budget(rel.replace(os.sep, "/"))
            if seconds > limit:
                report.problems.append(f"{rel}: ran {seconds:.0f} s, over its budget of {limit:.0f} s")
    return report


def format_report(report: Report, top: int = 8) -> str:
    """The text printed by the command line: the longest pages and examples, then the problems."""
    lines = [f"site check: {len(report.sizes)} pages, {len(report.times)} gallery examples"]
    lines.append("longest pages (KB of HTML):")
    for rel, size in sorted(report.sizes.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {size / 1024:8.0f}  {rel}")
    if report.times:
        lines.append(f"longest examples (s), of {sum(report.times.values()):.0f} s in all:")
        for rel, seconds in sorted(report.times.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"  {seconds:8.1f}  {rel}")
    if report.wide_lines:
        lines.append(f"pages with lines of code wider than the content column ({COLUMN_CHARS} characters, "
                     "failing): "
                     f"{len(report.wide_lines)}")
        for rel, n in sorted(report.wide_lines.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"  {n:8d}  {rel}")
    if report.wide_tables:
        lines.append(f"pages with a table wider than the content column (~{COLUMN_PX} px, failing): "
                     f"{len(report.wide_tables)}")
        for rel, px in sorted(report.wide_tables.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"  {px:8d}  {rel}")
    if report.problems:
        lines.append(f"{len(report.problems)} problem(s):")
        lines.extend(f"  {p}" for p in report.problems)
    else:
        lines.append("no problem found")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("folder", nargs="?", default=os.path.join("_build", "html"), help="the built site")
    parser.add_argument("--max-line", type=int, default=MAX_LINE, help="the longest line of code or output")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.folder, "index.html")):
        print(f"error: {args.folder} holds no built site (index.html); run make html first", file=sys.stderr)
        return 2
    report = check_site(args.folder, args.max_line)
    print(format_report(report))
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
