"""Order of the examples inside a gallery subsection (used by ``conf.py``).

An example named ``plot_<name>_<level>.py`` (or ``plot_<name>_<level>_<suffix>.py``) with a
three-digit level (101, 102, 201, 301) comes after the examples of lower levels. An example
without a level in its name counts as 150 (after the 101 introductions, before the 201
ones) unless ``LEVELS`` gives its level. Ties are broken by file name.
"""

from __future__ import annotations

import re

_LEVEL = re.compile(r"_(\d{3})(?:_[a-z0-9]+)?\.py$")
#: the level of the examples whose file name has none (the tutorial map's series)
LEVELS = {"plot_onnxrt_diff.py": 301}
DEFAULT_LEVEL = 150


class LevelThenFileNameSortKey:
    """Sort key for ``within_subsection_order``: (level, file name)."""

    def __init__(self, src_dir: str) -> None:
        self.src_dir = src_dir

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__}>"

    def __call__(self, filename: str) -> tuple[int, str]:
        match = _LEVEL.search(filename)
        level = int(match.group(1)) if match else LEVELS.get(filename, DEFAULT_LEVEL)
        return (level, filename)
