"""The weights transformers' ``from_pretrained`` changes after reading them from the checkpoint.

An export reads every tensor from the safetensors files; the check compares it with the model transformers loads.
A few models' initializations write into loaded weights (Funnel's zeroes its embedding's padding row again, Zaya
resets a router bias): eager is then not the checkpoint and the check fails although the export is the
checkpoint's model. :func:`weights_changed_on_loading` names those weights, so a failed check says why::

    changes = weights_changed_on_loading("path/to/checkpoint")  # [("embeddings.weight", 0.43), ...]
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .checkpoint import checkpoint_files


def weights_changed_on_loading(folder: str | os.PathLike, model: torch.nn.Module | None = None
                               ) -> list[tuple[str, float]]:
    """``(name, max abs difference)`` of each parameter or buffer of the model transformers loads from ``folder``
    (``model``, else loaded in float32) that differs from the checkpoint's tensor of the same name and shape,
    the largest first. Tensors transformers renames or converts on loading are not compared."""
    from safetensors import safe_open

    if model is None:
        model = _eager(folder)
    files = checkpoint_files(folder)
    changed = []
    opened: dict[str, Any] = {}
    try:
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
    finally:
        opened.clear()
    return sorted(changed, key=lambda item: -item[1])


def _eager(folder: str | os.PathLike) -> torch.nn.Module:
    import transformers  # deferred: heavy

    transformers.utils.logging.disable_progress_bar()
    try:
        architecture = transformers.AutoConfig.from_pretrained(folder).architectures[0]
        return getattr(transformers, architecture).from_pretrained(folder, dtype=torch.float32).eval()
    finally:
        transformers.utils.logging.enable_progress_bar()
