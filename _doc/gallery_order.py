"""Order of the examples inside a gallery subsection (used by ``conf.py``).

An example named ``plot_<name>_<level>.py`` with a three-digit level (101, 102, 201, 301)
comes after the examples of lower levels; examples without a level come first. Ties are
broken by file name, so the order is stable.
"""

from __future__ import annotations

import re

_LEVEL = re.compile(r"_(\d{3})(?:_[a-z0-9]+)?\.py$")


class LevelThenFileNameSortKey:
    """Sort key for ``within_subsection_order``: (level, file name)."""

    def __init__(self, src_dir: str) -> None:
        self.src_dir = src_dir

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__}>"

    def __call__(self, filename: str) -> tuple[int, str]:
        match = _LEVEL.search(filename)
        return (int(match.group(1)) if match else 0, filename)
