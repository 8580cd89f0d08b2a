"""The custom exporter: FX graph from torch.export -> ONNX."""

from .api import to_onnx
from .dispatcher import Dispatcher
from .errors import ConversionError, ExportError, UnsupportedOpError

__all__ = ["to_onnx", "Dispatcher", "ConversionError", "ExportError", "UnsupportedOpError"]
