"""Saving a model in one streaming pass: each initializer is written to the external data file
from the memory it refers to (a torch tensor, a checkpoint read on demand), one at a time."""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import onnx
import onnx_ir as ir
import torch

from .tensors import onnx_dtype, weights_nbytes

#: initializers above this size (bytes) go to the external data file
EXTERNAL_DATA_THRESHOLD = 1024
#: models whose weights exceed this size are always saved with external data (protobuf's 2 GB limit)
PROTOBUF_SAFE_SIZE = 1_500_000_000


def _progress_callback(model: ir.Model, enabled: bool) -> tuple[Callable | None, Any]:
    """A tqdm bar counting the bytes written (on stderr), and the callback ir.save calls per tensor."""
    if not enabled:
        return None, None
    from tqdm.auto import tqdm

    bar = tqdm(total=weights_nbytes(model), unit="B", unit_scale=True, desc="weights", leave=False)

    def callback(tensor: ir.TensorProtocol, info: Any) -> None:
        bar.update(tensor.nbytes)

    return callback, bar


#: bytes of a block of a strided tensor made contiguous while written
STRIDED_BLOCK = 2**26


class _StridedTorchTensor(ir.tensor_adapters.TorchTensor):
    """A strided torch view written in C order 64 MB at a time: the memory added while
    saving is one block, not a contiguous copy of the whole tensor."""

    def tofile(self, file) -> None:
        tensor = self.raw
        row = max(1, tensor[0].numel() * tensor.element_size()) if tensor.dim() else 1
        step = max(1, STRIDED_BLOCK // row)
        if tensor.dim() == 0:
            return super().tofile(file)
        for begin in range(0, tensor.shape[0], step):
            block = tensor[begin : begin + step].contiguous().reshape(-1)
            file.write(block.view(torch.uint8).numpy().data)


def _torch_views(model: ir.Model) -> list[tuple[ir.Value, ir.TensorProtocol]]:
    """Wraps the initializers which are strided numpy views (the optimizer folds
    ``Transpose(weight)`` into a transposed view of the weight) as torch views of the same
    memory: numpy writes a strided array element by element (``tofile``, 50 MB/s), torch
    copies it into contiguous blocks of 64 MB, each written in one call.
    Returns (value, tensor replaced) to restore."""
    swapped = []
    for value in model.graph.initializers.values():
        tensor = value.const_value
        raw = getattr(tensor, "raw", None)
        if type(tensor) is not ir.Tensor or not isinstance(raw, np.ndarray) or raw.flags.c_contiguous or not raw.size:
            continue
        if any(s < 0 for s in raw.strides):
            continue
        try:
            if tensor.dtype == ir.DataType.BFLOAT16:
                view = torch.from_numpy(raw.view(np.uint16)).view(torch.bfloat16)
            else:
                view = torch.from_numpy(raw)
        except (TypeError, ValueError, RuntimeError):
            continue
        if onnx_dtype(view.dtype) != tensor.dtype or tuple(view.shape) != tuple(tensor.shape.numpy()):
            continue
        value.const_value = _StridedTorchTensor(view, name=tensor.name)
        swapped.append((value, tensor))
    return swapped


def save_model(
    model: ir.Model, filename: str | os.PathLike, external_data: bool | None = None, progress: bool = False
) -> bool:
    """Saves ``model``; the weights go to ``<filename>.data`` when ``external_data`` is True, or
    when it is None and they exceed :data:`PROTOBUF_SAFE_SIZE`.

    The tensors are written one after the other from their own memory (onnx_ir's streaming
    writer): saving adds at most the largest tensor to the memory in use, and lazy tensors
    (a checkpoint) are read then released one at a time. The model is left unchanged.

    :param progress: show a progress bar on the bytes written
    :return: whether the weights went to an external data file
    """
    if external_data is None:
        external_data = weights_nbytes(model) > PROTOBUF_SAFE_SIZE
    if not external_data:
        ir.save(model, filename)
        return False
    location = os.path.basename(os.fspath(filename)) + ".data"
    callback, bar = _progress_callback(model, progress)
    swapped = _torch_views(model)
    try:
        ir.save(model, filename, external_data=location, size_threshold_bytes=EXTERNAL_DATA_THRESHOLD, callback=callback)
    finally:
        for value, tensor in swapped:
            value.const_value = tensor
        if bar is not None:
            bar.close()
    return True


def load_without_weights(filename: str | os.PathLike) -> onnx.ModelProto:
    """The ModelProto saved in ``filename`` with its external initializers left as references
    (``data_location: EXTERNAL``): the graph without the bytes of the weights.
    ``onnx.load_external_data_for_model(proto, folder)`` or ``onnx.load(filename)`` brings them in."""
    return onnx.load(os.fspath(filename), load_external_data=False)
