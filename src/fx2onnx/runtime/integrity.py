"""The files of an exported folder as the export wrote them: sizes and checksums kept in ``fx2onnx.json``.

The export records every file of the folder (:func:`folder_manifest`: ``"files"`` in ``fx2onnx.json``, the
file itself excepted) with its size and a SHA-256 checksum; ``generate`` checks them
(:func:`check_folder_files`) before onnxruntime opens a model, so that a folder changed since (a data file
truncated by a copy, a file replaced, a model missing) is refused in one line instead of crashing inside
onnxruntime. The checksum of a file up to :data:`WHOLE_BYTES` covers all of it; a larger one (the weights'
data) is checked on its size and on :data:`SAMPLES` blocks of :data:`SAMPLE_BYTES` spread over it, the first
and last included (``"sampled": true``): a truncation, a file of another length or a block rewritten at a
sampled place is found for a few milliseconds (4 MiB read whatever the size), a byte changed elsewhere is
not (the full hash of 2 GB would take seconds at every start). A missing ONNX model or data file is refused;
another missing file (a tokenizer removed to run token ids) is left to the loop, which names what it needs.
A folder exported before this check (no ``"files"``) is not checked.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

#: files up to this size are hashed whole
WHOLE_BYTES = 4 * 2**20
#: a larger file is hashed on this many blocks
SAMPLES = 64
#: of this size
SAMPLE_BYTES = 64 * 2**10
#: the files whose absence is refused (what onnxruntime loads)
MODEL_SUFFIXES = (".onnx", ".onnx.data", ".data", ".onnx_data")


class FolderChangedError(ValueError):
    """The folder differs from what the export wrote: one line naming the file and what to do."""


def file_checksum(path: str, size: int | None = None) -> tuple[str, bool]:
    """``(hex SHA-256, sampled)`` of the file ``path``: whole up to :data:`WHOLE_BYTES`, else its size and
    :data:`SAMPLES` blocks spread over it."""
    size = os.path.getsize(path) if size is None else size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= WHOLE_BYTES:
            for block in iter(lambda: f.read(2**20), b""):
                digest.update(block)
            return digest.hexdigest(), False
        digest.update(str(size).encode())
        last = size - SAMPLE_BYTES
        for i in range(SAMPLES):
            f.seek(last * i // (SAMPLES - 1))
            digest.update(f.read(SAMPLE_BYTES))
    return digest.hexdigest(), True


def folder_manifest(folder: str | os.PathLike, skip: tuple[str, ...] = ("fx2onnx.json",)) -> dict[str, dict[str, Any]]:
    """``{relative path: {"size", "sha256"[, "sampled"]}}`` of every file under ``folder`` but ``skip``."""
    folder = os.fspath(folder)
    result: dict[str, dict[str, Any]] = {}
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, folder).replace(os.sep, "/")
            if relative in skip or not os.path.isfile(path):
                continue
            size = os.path.getsize(path)
            checksum, sampled = file_checksum(path, size)
            result[relative] = {"size": size, "sha256": checksum, **({"sampled": True} if sampled else {})}
    return result


def check_folder_files(folder: str | os.PathLike, metadata: dict[str, Any]) -> None:
    """Raises :class:`FolderChangedError` when a file the export recorded in ``metadata["files"]`` changed
    size or checksum, or a model file is missing (see the module); nothing when nothing was recorded."""
    folder = os.fspath(folder)
    files = metadata.get("files")
    if not isinstance(files, dict):
        return
    fix = f"the folder changed after the export: export it again (python -m fx2onnx export CHECKPOINT --out {folder})."
    for relative, expected in sorted(files.items()):
        path = os.path.join(folder, *relative.split("/"))
        if not os.path.isfile(path):
            if relative.endswith(MODEL_SUFFIXES):
                raise FolderChangedError(f"{path!r} is missing: {fix}")
            continue
        size = os.path.getsize(path)
        if size != expected.get("size"):
            raise FolderChangedError(f"{path!r} holds {size} bytes, the export wrote {expected.get('size')}: {fix}")
        if file_checksum(path, size)[0] != expected.get("sha256"):
            raise FolderChangedError(f"{path!r} differs from what the export wrote (its checksum): {fix}")
