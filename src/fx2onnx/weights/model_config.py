"""The model of a ``save_pretrained`` folder built from its ``config.json`` on the meta device: no weight read.

.. code-block:: python

    from fx2onnx.weights.model_config import model_from_checkpoint_config

    model = model_from_checkpoint_config("qwen3_folder")  # parameters on the meta device
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .empty import stray_parameters_to_meta


def model_from_checkpoint_config(folder: str | os.PathLike, dtype: torch.dtype | str | None = None) -> torch.nn.Module:
    """The transformers model of a ``save_pretrained`` folder, built on the meta device from its
    ``config.json`` (class ``architectures[0]``), in evaluation mode: no weight is read.

    :param dtype: the type of the floating point weights (default: the config's ``dtype``)
    """
    import transformers

    config = transformers.AutoConfig.from_pretrained(os.fspath(folder))
    return model_from_config(config, dtype, folder)


def model_from_config(config: Any, dtype: torch.dtype | str | None = None, folder: Any = "the folder") -> torch.nn.Module:
    """The transformers model of ``config`` (class ``architectures[0]``) on the meta device, in
    evaluation mode (see :func:`model_from_checkpoint_config`)."""
    import transformers

    architectures = getattr(config, "architectures", None) or []
    model_class = getattr(transformers, architectures[0], None) if architectures else None
    if model_class is None:
        raise ValueError(
            f"The config of {os.fspath(folder)!r} names no transformers class (architectures={architectures}): "
            "build the model on the meta device yourself and call to_onnx_from_checkpoint(model, ..., checkpoint=folder)."
        )
    dtype = _torch_dtype(dtype if dtype is not None else getattr(config, "dtype", None) or torch.float32)
    with torch.device("meta"):
        model = model_class._from_config(config, dtype=dtype)
    stray_parameters_to_meta(model)  # every parameter read from the checkpoint, none from the constructor
    return model.eval()


def _torch_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).replace("torch.", ""), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"Unknown dtype {dtype!r}: use float32, float16 or bfloat16.")
    return value
