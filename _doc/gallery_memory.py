"""The memory column of sphinx-gallery's execution-time tables, without ``memory_profiler``.

sphinx-gallery calls ``show_memory(func)`` around every code block of an example and once
around a no-op before the first one; it expects ``(MiB, func's result)`` and reports the
largest value over the blocks minus the value before the first: how far the example raised
the resident memory of the build process. ``PeakRSS`` resets the peak resident memory of
the process (Linux: ``5`` written to ``/proc/self/clear_refs``), runs the block and reads the
peak back (``VmHWM``). Memory used by a child process an example starts is not counted.
"""

from __future__ import annotations

from typing import Any, Callable


def _status_mib(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise KeyError(field)


def supported() -> bool:
    """Whether the peak can be reset and read (Linux with procfs)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        _status_mib("VmHWM")
    except (OSError, KeyError):
        return False
    return True


class PeakRSS:
    """``show_memory`` of sphinx-gallery: called with a code block, returns the peak resident memory
    of the process while it ran (MiB) and its result. An instance rather than a function: Sphinx
    caches the configuration only when it holds no function."""

    def __call__(self, func: Callable[[], Any]) -> tuple[float, Any]:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # the peak becomes the current resident memory
        result = func()
        return _status_mib("VmHWM"), result

    def __eq__(self, other: object) -> bool:  # the same configuration from one build to the next
        return isinstance(other, PeakRSS)

    def __hash__(self) -> int:
        return hash(PeakRSS)
