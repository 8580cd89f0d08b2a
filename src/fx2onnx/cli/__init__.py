"""The command line, one module per command: :mod:`fx2onnx.cli.main` builds the parser and runs the command."""
