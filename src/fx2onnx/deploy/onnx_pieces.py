"""The export of a family's pieces under ``onnx/`` (SAM, VITS, TAPAS, LayoutLM, DETR's segmenter): each piece
captured with transformers' patches, its weights streamed from the checkpoint, its inputs and outputs named and
its weights' file named as transformers.js reads it."""

from __future__ import annotations

import contextlib
import copy
import os
from typing import Any

import torch

from ..patches import torch_export_patches
from ..weights import to_onnx_from_checkpoint
from .saved_model import rename_external_data, rename_values
from .speech import Piece
from .transformersjs import data_file_name


def export_onnx_pieces(folder: str, out_dir: str, pieces: list[Piece], config: Any, dtype: torch.dtype,
                       options: dict[str, Any], *, task: str | None = None, opset: int | None = None,
                       context: Any = contextlib.nullcontext) -> None:
    """Exports every piece to ``out_dir/piece.filename`` (``options``: the family's export options; ``task``
    named in the progress line of a one-piece family, ``opset`` in place of the options' one, ``context()`` a
    context manager around each capture)."""
    optimize, quantize = options["optimize"], options["quantize"]
    settings = f"{str(dtype).replace('torch.', '')}, optimize={optimize}{', ' + quantize if quantize else ''}"
    for piece in pieces:
        name = config.architectures[0]
        options["say"](f"exporting {name} ({task}, {settings})" if task else
                       f"exporting the {piece.name} of {name} ({settings})")
        path = os.path.join(out_dir, piece.filename)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with torch_export_patches(patch_transformers=True) as modificator, context():
            to_onnx_from_checkpoint(
                folder, (), modificator(copy.deepcopy(piece.inputs)), filename=path, model=piece.module, dtype=dtype,
                progress=options["progress"], dynamic_shapes=piece.dynamic_shapes,
                target_opset=options["opset"] if opset is None else opset,
                optimize=False if optimize == "none" else optimize, quantize=quantize,
                quantize_block_size=options["block_size"], quantize_symmetric=options["symmetric"])
        rename_values(path, piece.input_names, piece.output_names, {})
        rename_external_data(path, data_file_name(piece.filename))
