"""Optimization levels for exported ONNX models: :func:`optimize` and its report.

The package is ``fx2onnx.optimizer`` (not ``optimize``) so that ``fx2onnx.optimize``
stays the function, as ``fx2onnx.validate`` and the module ``fx2onnx.validation``.
"""

from .._lazy import lazy_module_names

# public name -> its module, loaded on first use: importing one module of the package loads no other
__getattr__, __dir__, __all__ = lazy_module_names(__name__, {
    "LEVEL_NAMES": ".api",
    "OptimizationReport": ".api",
    "optimize": ".api",
})
