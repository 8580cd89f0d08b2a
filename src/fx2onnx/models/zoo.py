"""Moved to :mod:`fx2onnx.zoo.architectures` (this path is kept for one release)."""

from .._moved import moved_to

moved_to(__name__, "fx2onnx.zoo.architectures")
