"""A :func:`torch.compile` backend running the graphs dynamo captures on :epkg:`onnxruntime`.

Every graph dynamo hands the backend goes through aot_autograd (aten ops,
forward and backward graphs when training), is converted into ONNX with
fx2onnx's converters and runs on onnxruntime.

.. code-block:: python

    import torch
    from fx2onnx.backend import onnxruntime_backend

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    compiled = torch.compile(model, backend=onnxruntime_backend)
    y = compiled(torch.randn(3, 4))
"""

from __future__ import annotations

from .compiler import OrtBackend, make_onnxruntime_backend, onnxruntime_backend
from .dump import dump_onnx
from .fallback import Fallback, FallbackWarning
from .runner import BackendOptions, GraphRunner

__all__ = [
    "BackendOptions",
    "Fallback",
    "FallbackWarning",
    "GraphRunner",
    "OrtBackend",
    "dump_onnx",
    "make_onnxruntime_backend",
    "onnxruntime_backend",
]
