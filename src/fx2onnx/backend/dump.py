"""``dump_onnx``: saves every ONNX model the backend builds, with the FX graph it comes from."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import onnx_ir as ir
import torch

# active dump targets (prefix, folder, list of written files), innermost last
_ACTIVE: list[tuple[str, str, list[str]]] = []


@contextlib.contextmanager
def dump_onnx(prefix: str = "model", folder: str | os.PathLike = "dump_onnx") -> Iterator[list[str]]:
    """Saves every ONNX model built by the fx2onnx backend while the context is active.

    Each model goes to ``<folder>/<prefix>_<graph>_<k>.onnx`` next to
    ``<folder>/<prefix>_<graph>.txt``, the code of the FX graph it was converted from.
    The context yields the list of written files, filled as models are built.

    :param prefix: prefix of the file names
    :param folder: destination folder, created if missing

    .. code-block:: python

        import torch, fx2onnx
        from fx2onnx.backend import onnxruntime_backend

        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        compiled = torch.compile(model, backend=onnxruntime_backend)
        with fx2onnx.dump_onnx("relu", folder="dump") as files:
            compiled(torch.randn(2, 4))
        print(files)
    """
    if not isinstance(prefix, str) or not prefix or os.sep in prefix:
        raise ValueError(f"prefix must be a non-empty file name prefix without {os.sep!r}, got {prefix!r}.")
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    files: list[str] = []
    _ACTIVE.append((prefix, folder, files))
    try:
        yield files
    finally:
        _ACTIVE.pop()


def dump_targets(extra_folder: str | None = None, extra_prefix: str = "model") -> list[tuple[str, str, list[str] | None]]:
    """The places a new model must be written to: the active contexts and the backend's own folder."""
    targets: list[tuple[str, str, list[str] | None]] = list(_ACTIVE)
    if extra_folder is not None:
        os.makedirs(extra_folder, exist_ok=True)
        targets.append((extra_prefix, extra_folder, None))
    return targets


def save_dump(
    model: ir.Model,
    gm: torch.fx.GraphModule,
    graph_name: str,
    key_index: int,
    targets: list[tuple[str, str, list[str] | None]],
) -> list[str]:
    """Writes ``model`` and the FX code of ``gm`` to every target, returns the written paths."""
    written = []
    for prefix, folder, files in targets:
        base = os.path.join(folder, f"{prefix}_{graph_name}")
        onnx_path = f"{base}_{key_index}.onnx"
        ir.save(model, onnx_path)
        text_path = f"{base}.txt"
        with open(text_path, "w", encoding="utf-8") as f:
            f.write(gm.print_readable(print_output=False))
        new = [onnx_path, text_path]
        written.extend(new)
        if files is not None:
            files.extend(p for p in new if p not in files)
    return written
