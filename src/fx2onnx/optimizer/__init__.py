"""Optimization levels for exported ONNX models: :func:`optimize` and its report.

The package is ``fx2onnx.optimizer`` (not ``optimize``) so that ``fx2onnx.optimize``
stays the function, as ``fx2onnx.validate`` and the module ``fx2onnx.validation``.
"""

from .api import LEVEL_NAMES, OptimizationReport, optimize

__all__ = ["LEVEL_NAMES", "OptimizationReport", "optimize"]
