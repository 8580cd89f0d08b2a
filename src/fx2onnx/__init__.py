"""fx2onnx: export PyTorch models to ONNX, and learn how it works.

The public API is imported lazily: ``import fx2onnx`` is cheap and each name
loads its module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

# public name -> module (relative to this package) that defines it
_PUBLIC_API: dict[str, str] = {
    # the custom exporter
    "to_onnx": ".convert.api",
    "Dispatcher": ".convert.dispatcher",
    "UnsupportedOpError": ".convert.errors",
    "ExportError": ".convert.errors",
    "ConversionError": ".convert.errors",
    "CaptureMismatchError": ".convert.capture_check",
    "CaptureMismatchWarning": ".convert.capture_check",
    # optimization levels (fused operators)
    "optimize": ".optimizer.api",
    "OptimizationReport": ".optimizer.api",
    # checking an ONNX model against eager
    "validate": ".validation",
    "ValidationReport": ".validation",
    "FrozenInputWarning": ".frozen",
    "FrozenInputError": ".frozen",
    # patches making torch.export work on transformers models
    "torch_export_patches": ".patches",
    "bypass_export_some_errors": ".patches",
    "register_cache_serialization": ".patches",
    "unregister_cache_serialization": ".patches",
    "code_needing_rewriting": ".patches",
    "list_patches": ".patches",
    # tools
    "compare_onnx_execution": ".compare",
    "dump_onnx": ".backend",
    "make_onnxruntime_backend": ".backend",
    "onnxruntime_backend": ".backend",
    # inspecting an export
    "infer_dynamic_shapes": ".inspect.infer",
    "export_report": ".inspect.report",
    "to_dot": ".inspect.dot",
    # running an exported model
    "generate": ".runtime.generate",
    "pipeline": ".runtime.pipelines",
}

__all__ = sorted(_PUBLIC_API) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC_API:
        module = importlib.import_module(_PUBLIC_API[name], __name__)
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fx2onnx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC_API))
