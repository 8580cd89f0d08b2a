"""The zoo: tiny hand-tuned models, every discovered architecture through the exporters, the sweeps and their pages.

* :mod:`~fx2onnx.zoo.tiny`: a few hand-tuned tiny models with their inputs and
  dynamic shapes (:func:`get_tiny_model`, :func:`list_tiny_models`),
* :mod:`~fx2onnx.inputs.discover`: a tiny configuration for every text architecture
  of transformers' auto mappings (:func:`discover_architectures`),
* :mod:`~fx2onnx.zoo.architectures`: runs them through the exporters, one row per
  architecture x exporter x cache (``python -m fx2onnx models``).
"""

from __future__ import annotations

from .tiny import _SPECS, TinyModel, export_dynamic_shapes, get_tiny_model, list_tiny_models

__all__ = ["TinyModel", "export_dynamic_shapes", "get_tiny_model", "list_tiny_models"]
