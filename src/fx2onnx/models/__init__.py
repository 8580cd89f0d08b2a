"""Moved to :mod:`fx2onnx.zoo` (this path is kept for one release; its modules too)."""

from .._moved import moved_names

__getattr__ = moved_names(__name__, "fx2onnx.zoo")
