"""Helpers for tests and examples: checkpoint folders made in code (tiny models with random weights, tokenizers,
processors), as ``torch.testing`` or ``numpy.testing`` are for their libraries.

.. code-block:: python

    from fx2onnx.testing.tokenizer import write_checkpoint_folder
"""
