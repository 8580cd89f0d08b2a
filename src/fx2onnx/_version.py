"""The version of the package (read by the exporter, which writes it into every model it saves)."""

__version__ = "0.1.0"
