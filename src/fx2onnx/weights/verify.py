"""Checks that the initializers of a saved ONNX file are the tensors of a checkpoint, by hash.

Both sides are read in slices from their files (the ``.data`` file of the ONNX model, the
safetensors files of the checkpoint): the memory in use is one slice, whatever the model.
A checkpoint tensor matches an initializer of the same type and number of elements whose
bytes hash the same; the optimizer may have stored a 2-D weight transposed: a 2-D
initializer which matches nothing is hashed again transposed, block by block.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
from typing import Iterator

import numpy as np
import onnx

from .checkpoint import checkpoint_files
from .random_checkpoint import SAFETENSORS_NAMES

_CHUNK = 2**24

#: safetensors type name -> (onnx type, element size)
_TYPES = {
    "F64": (onnx.TensorProto.DOUBLE, 8), "F32": (onnx.TensorProto.FLOAT, 4), "F16": (onnx.TensorProto.FLOAT16, 2),
    "BF16": (onnx.TensorProto.BFLOAT16, 2), "I64": (onnx.TensorProto.INT64, 8), "I32": (onnx.TensorProto.INT32, 4),
    "I16": (onnx.TensorProto.INT16, 2), "I8": (onnx.TensorProto.INT8, 1), "U8": (onnx.TensorProto.UINT8, 1),
    "BOOL": (onnx.TensorProto.BOOL, 1),
}
assert set(_TYPES) == set(SAFETENSORS_NAMES.values())


def safetensors_entries(path: str | os.PathLike) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """name -> (type, shape, first byte, end byte in the file) of each tensor of a safetensors
    file, read from its header only."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    start = 8 + size
    return {
        name: (e["dtype"], tuple(e["shape"]), start + e["data_offsets"][0], start + e["data_offsets"][1])
        for name, e in header.items()
    }


def _hash_range(path: str, begin: int, end: int) -> str:
    digest = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        f.seek(begin)
        remaining = end - begin
        while remaining > 0:
            block = f.read(min(_CHUNK, remaining))
            if not block:
                raise ValueError(f"{path!r} ends before byte {end}")
            digest.update(block)
            remaining -= len(block)
    return digest.hexdigest()


_UINTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _hash_transposed(path: str, begin: int, shape: tuple[int, int], itemsize: int, block_bytes: int = 2**28) -> str:
    """The hash of the transposed 2-D tensor stored at ``begin``: the rows of the transposed
    tensor are built ``block_bytes`` at a time, each block from the stored rows read 64 MB at a time."""
    rows, cols = shape
    dtype = _UINTS[itemsize]
    digest = hashlib.blake2b(digest_size=20)
    width = max(1, block_bytes // max(1, rows * itemsize))  # stored columns per block
    step = max(1, 2**26 // max(1, cols * itemsize))  # stored rows per read
    for c0 in range(0, cols, width):
        c1 = min(cols, c0 + width)
        block = np.empty((c1 - c0, rows), dtype=dtype)
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            piece = np.fromfile(path, dtype=dtype, count=(r1 - r0) * cols, offset=begin + r0 * cols * itemsize)
            block[:, r0:r1] = piece.reshape(r1 - r0, cols)[:, c0:c1].T
        digest.update(block.data)
    return digest.hexdigest()


def _onnx_initializers(filename: str) -> Iterator[tuple[str, int, tuple[int, ...], str | None, int, int, bytes]]:
    """(name, onnx type, shape, data file or None, offset, length, inline bytes) of each initializer."""
    from onnx.numpy_helper import to_array

    proto = onnx.load(filename, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(filename))
    for tensor in proto.graph.initializer:
        shape = tuple(tensor.dims)
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            path = os.path.join(folder, info["location"])
            offset = int(info.get("offset", 0))
            length = int(info["length"]) if "length" in info else os.path.getsize(path) - offset
            yield tensor.name, tensor.data_type, shape, path, offset, length, b""
        else:
            raw = tensor.raw_data or to_array(tensor).tobytes()
            yield tensor.name, tensor.data_type, shape, None, 0, len(raw), raw


@dataclasses.dataclass
class HashReport:
    """What :func:`compare_with_checkpoint` found."""

    #: checkpoint tensors found in the ONNX file (as stored or transposed)
    matched: list[str]
    #: checkpoint tensors with no initializer of the same bytes
    missing: list[str]
    #: checkpoint tensors found transposed
    transposed: list[str]
    #: initializers of the type and size of a checkpoint tensor which equal none of them
    different: list[str]
    #: bytes hashed on both sides
    nbytes: int

    @property
    def ok(self) -> bool:
        return bool(self.matched) and not self.missing and not self.different

    def __str__(self) -> str:
        return (
            f"HashReport(ok={self.ok}, matched={len(self.matched)}, missing={len(self.missing)}"
            f"{' ' + repr(self.missing[:5]) if self.missing else ''}, transposed={len(self.transposed)}, "
            f"different={len(self.different)}{' ' + repr(self.different[:5]) if self.different else ''}, "
            f"nbytes={self.nbytes / 2**30:.2f} GB)"
        )


def compare_with_checkpoint(
    onnx_file: str | os.PathLike, checkpoint: str | os.PathLike, block_bytes: int = 2**28
) -> HashReport:
    """Checks by hash that every tensor of the ``save_pretrained`` folder ``checkpoint`` is an
    initializer of ``onnx_file`` with the same bytes (the same type), and that no initializer of
    the type and size of a checkpoint tensor holds other values, streaming both files.

    The optimizer folds ``Transpose(weight)`` into a transposed initializer: a 2-D initializer
    which equals no tensor is hashed again transposed, in blocks of ``block_bytes`` (each block
    reads the tensor once more): the memory in use stays below ``block_bytes`` plus 64 MB.
    """

    stored: dict[tuple[int, int, str], str] = {}  # (onnx type, numel, hash) -> checkpoint name
    nbytes = 0
    for path in sorted(set(checkpoint_files(checkpoint).values())):
        for name, (stype, shape, begin, end) in safetensors_entries(path).items():
            numel = int(np.prod(shape)) if shape else 1
            stored.setdefault((_TYPES[stype][0], numel, _hash_range(path, begin, end)), name)
            nbytes += end - begin
    sizes = {(t, n) for t, n, _ in stored}
    found: set[str] = set()
    transposed: list[str] = []
    different: list[str] = []
    for name, dtype, shape, path, offset, length, raw in _onnx_initializers(os.fspath(onnx_file)):
        numel = int(np.prod(shape)) if shape else 1
        if (dtype, numel) not in sizes or numel <= 1:
            continue
        nbytes += length
        digest = (
            hashlib.blake2b(raw, digest_size=20).hexdigest() if path is None else _hash_range(path, offset, offset + length)
        )
        if (dtype, numel, digest) in stored:
            found.add(stored[(dtype, numel, digest)])
            continue
        if len(shape) == 2:
            if path is None:
                array = np.frombuffer(raw, dtype=_UINTS[length // numel]).reshape(shape)
                digest = hashlib.blake2b(np.ascontiguousarray(array.T).tobytes(), digest_size=20).hexdigest()
            else:
                digest = _hash_transposed(path, offset, shape, length // numel, block_bytes)
            if (dtype, numel, digest) in stored:
                found.add(stored[(dtype, numel, digest)])
                transposed.append(stored[(dtype, numel, digest)])
                continue
        different.append(name)
    names = list(stored.values())
    return HashReport(
        matched=[n for n in names if n in found], missing=[n for n in names if n not in found],
        transposed=transposed, different=different, nbytes=nbytes,
    )
