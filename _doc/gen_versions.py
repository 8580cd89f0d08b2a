"""Build-time page generator: the versions of the packages this site was built with.

``conf.py`` calls :func:`generate` when the builder starts. It writes
``_generated/versions.rst`` (gitignored), listed in the toctree of ``index.rst``.
A generator only rewrites a page when its content changes, so that Sphinx does
not rebuild it for nothing.
"""

from __future__ import annotations

import platform
import re
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "_generated" / "versions.rst"


def pinned_packages(requirements: Path) -> list[tuple[str, str]]:
    """Returns ``(name, pinned version)`` for the direct dependencies of requirements-docs.txt.

    Direct dependencies are the pins written before the "indirect" comment line.
    """
    pins = []
    for line in requirements.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("#") and "indirect" in line:
            break
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if match:
            pins.append((match.group(1), match.group(2)))
    return pins


def installed_version(name: str) -> str:
    """The installed version of a distribution, or ``"not installed"``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions_page(pins: list[tuple[str, str]]) -> str:
    """The rst page: a table package / pinned / installed."""
    rows = [("package", "pinned", "installed")]
    rows += [(name, pin, installed_version(name)) for name, pin in pins]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    border = "  ".join("=" * w for w in widths)

    def fmt(row):
        return "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()

    lines = [
        "Versions",
        "========",
        "",
        f"This site was built with Python {platform.python_version()} and the packages below "
        "(pins from ``requirements-docs.txt``). Every output shown in the tutorial and the "
        "gallery was produced by these versions.",
        "",
        border,
        fmt(rows[0]),
        border,
        *[fmt(r) for r in rows[1:]],
        border,
        "",
    ]
    return "\n".join(lines)


def write_if_changed(path: Path, text: str) -> bool:
    """Writes ``text`` to ``path`` unless the file already holds it; returns True if written."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def generate(app=None) -> None:
    """Writes the versions page (``app`` is the Sphinx application, unused)."""
    write_if_changed(OUTPUT, versions_page(pinned_packages(ROOT / "requirements-docs.txt")))
