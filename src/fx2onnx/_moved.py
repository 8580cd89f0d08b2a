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


def moved_to(old: str, new: str) -> None:
    """Replaces the module ``old`` being imported by the module ``new``, with a deprecation warning."""
    warnings.warn(f"{old} moved to {new}: import it from there (the old path goes in the next release).",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
