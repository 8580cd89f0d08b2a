"""Tools to look into an export: graphs as pictures, dynamic shapes guessed
from inputs, a model exported piece by piece.

Each tool lives in its own module of this package (``infer``, ``report``...);
the public names are reached through :mod:`fx2onnx`.
"""
