"""What a task feeds a model: the tasks transformers lists and their tiny models, example inputs from a config or
a processor (see :mod:`fx2onnx.layers`: imports the export machinery only)."""
