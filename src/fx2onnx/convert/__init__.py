"""The custom exporter: FX graph from torch.export -> ONNX."""

from .._lazy import lazy_module_names

# public name -> its module, loaded on first use: importing one module of the package loads no other
__getattr__, __dir__, __all__ = lazy_module_names(__name__, {
    "to_onnx": ".api",
    "Dispatcher": ".dispatcher",
    "ConversionError": ".errors",
    "ExportError": ".errors",
    "UnsupportedOpError": ".errors",
})
