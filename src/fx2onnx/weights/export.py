"""Export from a checkpoint: the model built on the meta device, the weights streamed from the files."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import onnx
import torch

from ..convert.api import to_onnx
from .checkpoint import _READS, checkpoint_weights, relazify_views
from .empty import empty_weights, meta_tensor_names, stray_parameters_to_meta
from .model_config import _torch_dtype, model_from_checkpoint_config, model_from_config  # noqa: F401 (kept here)
from .save import load_without_weights, save_model


def read_checkpoint_buffers(checkpoint: str | os.PathLike, model: torch.nn.Module, meta_names: list[str]) -> list[str]:
    """Copies into the persistent buffers of ``model`` built outside the meta device the values the checkpoint
    holds for them, as transformers' ``from_pretrained`` does: a frozen batch norm's weight and statistics are
    buffers (DETR's backbone), which the initialization of the model sets otherwise (timm zeroes the last norm
    of each block). Returns the names read."""
    parameters = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    names = [n for n, t in model.state_dict(keep_vars=True).items()
             if n not in parameters and n not in meta_names and isinstance(t, torch.Tensor) and not t.is_meta]
    if not names:
        return []
    held = checkpoint_weights(checkpoint, model, None, names=names, missing_ok=True)
    with torch.no_grad():
        for name, tensor in held.items():
            buffer = model.get_buffer(name)
            value = np.asarray(tensor.numpy())
            if value.dtype.kind not in "biufc":  # bfloat16, float8 (ml_dtypes): through float32
                value = value.astype(np.float32)
            buffer.copy_(torch.from_numpy(np.array(value, copy=True)).to(buffer.dtype))
    return sorted(held)


def to_onnx_from_checkpoint(
    checkpoint: str | os.PathLike,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    filename: str | os.PathLike,
    model: torch.nn.Module | None = None,
    dtype: torch.dtype | str | None = None,
    progress: bool = False,
    **to_onnx_kwargs: Any,
) -> onnx.ModelProto:
    """Exports the model of a ``save_pretrained`` folder without loading its weights.

    The model is built on the meta device (or ``model`` is, built so by the caller), captured
    by :func:`fx2onnx.to_onnx` on storage that is never touched (:func:`empty_weights`), and
    every initializer is read from the safetensors files when it is written into
    ``<filename>.data``, one tensor at a time: the memory in use is bounded by the largest
    tensor, not the model.

    :param checkpoint: the folder (``config.json`` and ``*.safetensors``)
    :param args: positional inputs of the model (CPU tensors)
    :param kwargs: keyword inputs
    :param filename: the ONNX file to write (the weights go to ``<filename>.data``)
    :param model: the model on the meta device (default: built from the config)
    :param dtype: the type of the floating point weights (default: the checkpoint's);
        tensors are cast one by one while written
    :param progress: a progress bar on the bytes written
    :param to_onnx_kwargs: other options of :func:`fx2onnx.to_onnx` (``dynamic_shapes``...)
    :return: the ModelProto of the file, without the bytes of the weights (references to the
        external data file)

    .. code-block:: python

        inputs = {"input_ids": torch.randint(3, 100, (2, 8))}
        to_onnx_from_checkpoint("llama_dir", (), inputs, filename="llama.onnx",
                                dynamic_shapes={"input_ids": {0: "batch", 1: "seq"}})
    """

    for key in ("weights", "return_ir", "external_data"):
        if key in to_onnx_kwargs:
            raise TypeError(f"to_onnx_from_checkpoint sets {key!r} itself.")
    if model is None:
        model = model_from_checkpoint_config(checkpoint, dtype)
    if any(p.is_meta for p in model.parameters()):  # built on the meta device: every parameter from the checkpoint
        stray_parameters_to_meta(model)
    meta_names = meta_tensor_names(model)
    target = _torch_dtype(dtype) if dtype is not None else None
    read_checkpoint_buffers(checkpoint, model, meta_names)
    _READS.clear()
    with empty_weights(model) as empty:
        weights = checkpoint_weights(checkpoint, model, target, names=sorted(set(meta_names) & set(empty)))
        onnx_model = to_onnx(model, args, kwargs, weights=weights, return_ir=True, **to_onnx_kwargs)
    # the optimizer folded Transpose(weight) into views of the tensors it read: read them again when saved
    relazify_views(onnx_model)
    save_model(onnx_model, filename, external_data=True, progress=progress)
    return load_without_weights(filename)
