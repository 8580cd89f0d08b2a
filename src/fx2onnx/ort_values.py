"""onnxruntime values as numpy arrays, bfloat16 included (numpy has no bfloat16: ``ml_dtypes`` gives it).

.. code-block:: python

    import numpy as np
    import onnxruntime
    from fx2onnx.ort_values import ort_value_to_numpy

    value = onnxruntime.OrtValue.ortvalue_from_numpy(np.ones((2, 3), dtype=np.float32))
    print(ort_value_to_numpy(value).shape)  # (2, 3)
"""

from __future__ import annotations

import ctypes
from typing import Any

import ml_dtypes
import numpy as np


def ort_value_to_numpy(value: Any) -> np.ndarray:
    """The array an ``onnxruntime.OrtValue`` holds (a copy for bfloat16, which ``OrtValue.numpy`` refuses)."""
    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    shape = tuple(value.shape())
    size = int(np.prod(shape, dtype=np.int64))
    raw = ctypes.string_at(value.data_ptr(), 2 * size) if size else b""
    return np.frombuffer(raw, dtype=np.uint16).copy().view(ml_dtypes.bfloat16).reshape(shape)
