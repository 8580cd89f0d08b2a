"""Old import paths kept for one release: a module that moved leaves a two-line module at its old path.

.. code-block:: python

    # fx2onnx/models/tasks.py, after the module moved to fx2onnx/inputs/tasks.py
    from .._moved import moved_to

    moved_to(__name__, "fx2onnx.inputs.tasks")

``import fx2onnx.models.tasks`` then warns (``DeprecationWarning``) and gives the module at its new path,
the same object: attributes set on one are set on the other. The layer check (:mod:`fx2onnx.layers`)
does not count these modules.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any, Callable, Collection


def moved_to(old: str, new: str) -> None:
    """Replaces the module ``old`` being imported by the module ``new``, with a deprecation warning."""
    _warn(old, new, 3)
    sys.modules[old] = importlib.import_module(new)


def _warn(old: str, new: str, stacklevel: int) -> None:
    """The deprecation warning, pointed at the caller ``stacklevel`` frames above the function calling this one."""
    warnings.warn(f"{old} moved to {new}: import it from there (the old path goes in the next release).",
                  DeprecationWarning, stacklevel=stacklevel + 1)


def moved_names(old: str, new: str, names: Collection[str] | None = None) -> Callable[[str], Any]:
    """The ``__getattr__`` of module ``old`` whose ``names`` (None: any name of ``new``) moved to module ``new``:
    each access warns (``DeprecationWarning``) and gives the name from ``new``, imported then.

    .. code-block:: python

        __getattr__ = moved_names(__name__, "fx2onnx.deploy.image_text", ("vision_pieces",))
    """

    def __getattr__(name: str) -> Any:
        if names is None or name in names:
            module = importlib.import_module(new)
            if hasattr(module, name):
                _warn(f"{old}.{name}", f"{new}.{name}", 2)
                return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__
