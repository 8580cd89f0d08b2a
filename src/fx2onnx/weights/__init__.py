"""Where the initializers live: references to torch memory, streaming to external data, and
the tensors of a safetensors checkpoint for a model built on the meta device.

* :func:`initializer_tensor`: an onnx_ir tensor over a torch tensor's memory (no copy);
* :func:`save_model`: writes the initializers one by one into ``<filename>.data``;
* :func:`checkpoint_weights`: lazy tensors reading a ``save_pretrained`` folder;
* :func:`empty_weights`, :func:`parameters_on_meta`: capture a model without its weights;
* :func:`to_onnx_from_checkpoint`: the export of a checkpoint larger than memory;
* :func:`write_random_checkpoint`: a random checkpoint of any size, the model never built.
"""

from .._lazy import lazy_module_names

# public name -> its module, loaded on first use: importing one module of the package loads no other
__getattr__, __dir__, __all__ = lazy_module_names(__name__, {
    "checkpoint_files": ".checkpoint",
    "checkpoint_weights": ".checkpoint",
    "lazy_checkpoint_tensor": ".checkpoint",
    "empty_weights": ".empty",
    "meta_tensor_names": ".empty",
    "parameters_on_meta": ".empty",
    "model_from_checkpoint_config": ".export",
    "to_onnx_from_checkpoint": ".export",
    "write_random_checkpoint": ".random_checkpoint",
    "load_without_weights": ".save",
    "save_model": ".save",
    "initializer_tensor": ".tensors",
    "weights_nbytes": ".tensors",
})
