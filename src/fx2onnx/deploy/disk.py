"""The free space an export needs, estimated from the checkpoint's headers and the options, checked before writing.

The estimate (:func:`needed_bytes`) counts every tensor of the checkpoint at the size it takes in the
ONNX data: floating point tensors in the exported dtype (float32 by default: a bfloat16 checkpoint
doubles), quantized matrices at ``bits / 8`` bytes a value plus a float32 scale per block, the other
tensors as stored; plus :data:`MARGIN` of it and :data:`OVERHEAD` bytes for the graphs, the tokenizer and
the configuration files. The folder is written beside the output before it replaces it: the space of a
previous folder is freed only after, so it is not counted as free.
"""

from __future__ import annotations

import os
import shutil

import torch

from ..weights.checkpoint import SAFETENSORS_ITEMSIZE, checkpoint_files, safetensors_header

#: the share added to the tensors' bytes (tied weights written twice, graphs, alignment)
MARGIN = 0.10
#: bytes added for the graphs and the copied files
OVERHEAD = 32 * 2**20
_FLOATING = {"F16", "BF16", "F32", "F64", "F8_E5M2", "F8_E4M3", "F8_E8M0"}


class NotEnoughSpaceError(ValueError):
    """The output's filesystem has less free space than the export needs: one line with both figures."""


def needed_bytes(folder: str | os.PathLike, dtype: torch.dtype = torch.float32, quantize: str | None = None,
                 block_size: int = 32) -> int:
    """The bytes the export of ``folder`` writes, estimated from its safetensors headers (see the module)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    bits = {"int4": 4, "int8": 8}.get(quantize or "", 0)
    total = 0
    for path in sorted(set(checkpoint_files(folder).values())):
        for info in safetensors_header(path).values():
            count = 1
            for d in info["shape"]:
                count *= d
            if info["dtype"] not in _FLOATING:
                total += count * SAFETENSORS_ITEMSIZE[info["dtype"]]
            elif bits and len(info["shape"]) == 2:
                total += count * bits // 8 + (count // max(block_size, 1) + 1) * 4
            else:
                total += count * itemsize
    return int(total * (1 + MARGIN)) + OVERHEAD


def free_bytes(path: str | os.PathLike) -> int:
    """The bytes free for this user on the filesystem of ``path`` (its nearest existing parent)."""
    path = os.path.abspath(os.fspath(path))
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return shutil.disk_usage(path).free


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_free_space(folder: str | os.PathLike, out: str | os.PathLike, dtype: torch.dtype = torch.float32,
                     quantize: str | None = None, block_size: int = 32) -> int:
    """Raises :class:`NotEnoughSpaceError` when the filesystem of ``out`` has less free space than the export of
    ``folder`` needs (:func:`needed_bytes`); returns the estimate."""
    needed = needed_bytes(folder, dtype, quantize, block_size)
    free = free_bytes(out)
    if free < needed:
        raise NotEnoughSpaceError(
            f"the export needs about {_gib(needed)} free beside {os.fspath(out)!r}, its filesystem has {_gib(free)}: "
            "free some space or give an --out on another disk (--quantize int4 or --dtype bfloat16 write less).")
    return needed
