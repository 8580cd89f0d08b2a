"""The weights transformers' ``from_pretrained`` changes after reading them from the checkpoint.

An export reads every tensor from the safetensors files; the check compares it with the model transformers loads.
A few models' initializations write into loaded weights (Funnel's zeroes its embedding's padding row again, Zaya
resets a router bias): eager is then not the checkpoint and the check fails although the export is the
checkpoint's model. :func:`weights_changed_on_loading` names those weights, so a failed check says why::

    model = eager_float32("path/to/checkpoint")  # fx2onnx.deploy.check: the model transformers loads
    changes = weights_changed_on_loading("path/to/checkpoint", model)  # [("embeddings.weight", 0.43), ...]
"""

from __future__ import annotations

import os
from typing import Any

import torch
from safetensors import safe_open

from .checkpoint import checkpoint_files


def weights_changed_on_loading(folder: str | os.PathLike, model: torch.nn.Module) -> list[tuple[str, float]]:
    """``(name, max abs difference)`` of each parameter or buffer of ``model``, as transformers loaded it from
    ``folder``, that differs from the checkpoint's tensor of the same name and shape, the largest first. Tensors
    transformers renames or converts on loading are not compared."""
    files = checkpoint_files(folder)
    opened: dict[str, Any] = {}
    changed = []
    for name, tensor in {**dict(model.named_buffers()), **dict(model.named_parameters())}.items():
        path = files.get(name)
        if path is None or not tensor.dtype.is_floating_point:
            continue
        if path not in opened:
            opened[path] = safe_open(path, framework="pt")
        stored = opened[path].get_tensor(name)
        if stored.shape != tensor.shape:
            continue
        diff = (stored.float() - tensor.detach().float()).abs().max().item() if stored.numel() else 0.0
        if diff > 0:
            changed.append((name, diff))
    return sorted(changed, key=lambda item: -item[1])
