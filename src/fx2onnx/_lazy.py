"""Public names of a package loaded on first use: the package imports none of its modules, so that importing one
module of it does not import the others (and the packages they need).

.. code-block:: python

    # fx2onnx/weights/__init__.py
    from .._lazy import lazy_module_names

    __getattr__, __dir__, __all__ = lazy_module_names(__name__, {"save_model": ".save"})
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_module_names(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` of ``package`` whose public ``names`` live in the given modules."""
    module_globals = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name], package), name)
            module_globals[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(module_globals) | set(names))

    return __getattr__, __dir__, sorted(names)
