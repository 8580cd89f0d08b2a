"""The rows of the ``tasks`` library of the zoo: a tiny model per task and architecture, its two input sets
(:mod:`fx2onnx.inputs.task_inputs`), exported and compared with eager.

:func:`build_task_case` makes the tiny model and its two input sets a row of the ``tasks``
library of :mod:`fx2onnx.zoo.library_zoo` needs (``python -m fx2onnx.zoo.library_zoo
tasks``); :func:`check_task_architecture` runs one such row.

.. code-block:: python

    from fx2onnx.inputs.tasks import get_task_architecture
    from fx2onnx.zoo.task_inputs import check_task_architecture

    row = check_task_architecture(get_task_architecture("image-classification", "vit"))
    print(row["success"], row["step"], row["max_abs"])
"""

from __future__ import annotations

from typing import Any

from .._moved import moved_names
from ..inputs.task_inputs import build_task_inputs  # noqa: F401 (the zoo's tests import it from here)
from .library_zoo import run_row
from .task_cases import (  # noqa: F401 (importable from here)
    TASKS_LIBRARY,
    RandomEagerError,
    TaskCase,
    _check_deterministic,
    build_task_case,
    task_entries,
    task_key,
)


#: the builders moved to :mod:`fx2onnx.inputs.task_inputs` stay importable from here for one release
__getattr__ = moved_names(__name__, "fx2onnx.inputs.task_inputs")


def check_task_architecture(arch: Any, exporter: str = "to_onnx") -> dict[str, Any]:
    """One row of the ``tasks`` library of :mod:`fx2onnx.zoo.library_zoo` for ``arch``: its
    tiny model exported by ``exporter`` with a dynamic batch (2) under
    ``torch_export_patches(patch_transformers=True)`` and compared with eager on a batch of 3.
    The row says ``success``, the ``step`` which failed (``config``, ``model``: the tiny model,
    its inputs or its eager forward, ``capture``, ``conversion``, ``validation``), ``error``
    and ``max_abs``."""
    key = task_key(arch.task, arch.name)
    return run_row(TASKS_LIBRARY, key, arch.model_class_name, exporter, "batch")
