"""Where the initializers live: references to torch memory, streaming to external data, and
the tensors of a safetensors checkpoint for a model built on the meta device.

* :func:`initializer_tensor`: an onnx_ir tensor over a torch tensor's memory (no copy);
* :func:`save_model`: writes the initializers one by one into ``<filename>.data``;
* :func:`checkpoint_weights`: lazy tensors reading a ``save_pretrained`` folder;
* :func:`empty_weights`, :func:`parameters_on_meta`: capture a model without its weights;
* :func:`to_onnx_from_checkpoint`: the export of a checkpoint larger than memory;
* :func:`write_random_checkpoint`: a random checkpoint of any size, the model never built.
"""

from .checkpoint import checkpoint_files, checkpoint_weights, lazy_checkpoint_tensor
from .empty import empty_weights, meta_tensor_names, parameters_on_meta
from .export import model_from_checkpoint_config, to_onnx_from_checkpoint
from .random_checkpoint import write_random_checkpoint
from .save import load_without_weights, save_model
from .tensors import initializer_tensor, weights_nbytes

__all__ = [
    "checkpoint_files",
    "checkpoint_weights",
    "empty_weights",
    "initializer_tensor",
    "lazy_checkpoint_tensor",
    "load_without_weights",
    "meta_tensor_names",
    "model_from_checkpoint_config",
    "parameters_on_meta",
    "save_model",
    "to_onnx_from_checkpoint",
    "weights_nbytes",
    "write_random_checkpoint",
]
