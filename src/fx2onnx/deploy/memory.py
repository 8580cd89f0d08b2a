"""The memory an export needs, estimated from the checkpoint's headers, refused above ``--max-memory`` before loading.

The export streams the weights (one tensor at a time); the check against eager loads the model in float32
and runs the exported model in onnxruntime beside it. :func:`needed_memory` adds :data:`BASE` (the process:
torch, transformers, onnxruntime, the captured graph), four times the largest tensor (read, cast, written),
and with the check, the model in float32 plus the exported weights. It is an estimate, meant to refuse a model
that cannot fit before minutes are spent, not a bound the export enforces while it runs.
"""

from __future__ import annotations

import os
import re

import torch

from ..weights.checkpoint import SAFETENSORS_ITEMSIZE, checkpoint_files, safetensors_header

#: the memory of the process before any weight
BASE = 768 * 2**20
_FLOATING = {"F16", "BF16", "F32", "F64", "F8_E5M2", "F8_E4M3", "F8_E8M0"}
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
          "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class NotEnoughMemoryError(ValueError):
    """The export would need more memory than ``--max-memory``: one line with both figures and what to do."""


def parse_size(text: str) -> int:
    """Bytes of a size written ``16GB``, ``16G``, ``1.5GiB``, ``512MiB`` or a number of bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"--max-memory {text!r} is not a size: write it 16GB, 1.5GiB or 512MiB.")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def needed_memory(folder: str | os.PathLike, dtype: torch.dtype = torch.float32, validate: bool = True) -> int:
    """The memory the export of ``folder`` needs, estimated from its safetensors headers (see the module)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    float32 = exported = largest = 0
    for path in sorted(set(checkpoint_files(folder).values())):
        for info in safetensors_header(path).values():
            count = 1
            for d in info["shape"]:
                count *= d
            floating = info["dtype"] in _FLOATING
            float32 += count * (4 if floating else SAFETENSORS_ITEMSIZE[info["dtype"]])
            exported += count * (itemsize if floating else SAFETENSORS_ITEMSIZE[info["dtype"]])
            largest = max(largest, count * 4)
    return BASE + 4 * largest + (float32 + exported if validate else 0)


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def check_memory(folder: str | os.PathLike, max_memory: int | str, dtype: torch.dtype = torch.float32,
                 validate: bool = True) -> int:
    """Raises :class:`NotEnoughMemoryError` when the export of ``folder`` needs more than ``max_memory`` bytes
    (:func:`needed_memory`); returns the estimate."""
    bound = parse_size(max_memory) if isinstance(max_memory, str) else int(max_memory)
    needed = needed_memory(folder, dtype, validate)
    if needed > bound:
        fix = ("add --no-validate (the check against eager loads the model in float32)" if validate else
               "export on a machine with more memory")
        raise NotEnoughMemoryError(f"the export of {os.fspath(folder)!r} needs about {_size(needed)} of memory, "
                                   f"--max-memory is {_size(bound)}: raise it or {fix}.")
    return needed
