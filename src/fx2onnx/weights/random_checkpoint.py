"""A random ``save_pretrained`` checkpoint written tensor by tensor, the model never built.

A benchmark of a model larger than memory needs its checkpoint: ``save_pretrained`` would
need the whole model in memory first. :func:`write_random_checkpoint` takes the names and
shapes from the model built on the meta device and writes each tensor in the safetensors
format in slices of a few MB: the memory in use is one slice, whatever the model.
The folder holds what ``save_pretrained`` writes: ``config.json``, ``model.safetensors``
or shards ``model-0000i-of-0000n.safetensors`` and ``model.safetensors.index.json``.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Iterator

import torch

from .model_config import _torch_dtype

#: safetensors' names of the torch types
SAFETENSORS_NAMES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}

#: elements generated at once (16 MB of float32)
_SLICE = 2**22


def checkpoint_layout(model: torch.nn.Module) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    """(name, shape, dtype) of each tensor ``save_pretrained`` writes for ``model`` (on any
    device, meta included): the persistent tensors of its ``state_dict``, a tied weight once
    under its first name."""
    seen: set[int] = set()
    layout = []
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        layout.append((name, tuple(tensor.shape), tensor.dtype))
    return layout


def padding_rows(model: torch.nn.Module) -> dict[str, int]:
    """The row of each embedding's weight which a model keeps at zero (``nn.Embedding(padding_idx=...)``: its
    initialization zeroes it, training never updates it; Youtu's ``from_pretrained`` zeroes it again over the
    checkpoint), by the weight's name."""
    return {f"{name}.weight" if name else "weight": int(m.padding_idx) for name, m in model.named_modules()
            if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None}


def _slices(name: str, shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator, std: float,
            zero_row: int | None = None) -> Iterator[torch.Tensor]:
    """The values of one tensor, flattened, in slices of at most :data:`_SLICE` elements: a
    normalization weight around 1, any other floating point tensor ``std * N(0, 1)``; the row ``zero_row``
    (an embedding's padding row) zero."""
    numel = 1
    for d in shape:
        numel *= d
    norm = len(shape) == 1 and "norm" in name
    for begin in range(0, numel, _SLICE):
        size = min(_SLICE, numel - begin)
        if dtype.is_floating_point:
            values = torch.randn(size, generator=generator) * std
            if norm:
                values += 1
            if zero_row is not None and len(shape) == 2:
                start, stop = zero_row * shape[1] - begin, (zero_row + 1) * shape[1] - begin
                if stop > 0 and start < size:
                    values[max(start, 0):min(stop, size)] = 0
            yield values.to(dtype)
        elif dtype == torch.bool:
            yield torch.ones(size, dtype=torch.bool)
        else:
            yield torch.randint(0, 100, (size,), generator=generator).to(dtype)


def _header(entries: list[tuple[str, tuple[int, ...], torch.dtype]]) -> tuple[bytes, list[int]]:
    """The safetensors header of a file holding ``entries`` in that order, and each one's size."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    sizes = []
    for name, shape, dtype in entries:
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        header[name] = {"dtype": SAFETENSORS_NAMES[dtype], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
        sizes.append(nbytes)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the tensors start on an 8-byte boundary
    return struct.pack("<Q", len(text)) + text, sizes


def _shards(layout, max_shard_size: int) -> list[list[tuple[str, tuple[int, ...], torch.dtype]]]:
    shards: list[list[Any]] = [[]]
    size = 0
    for entry in layout:
        nbytes = _header([entry])[1][0]
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(entry)
        size += nbytes
    return shards


def write_random_checkpoint(
    config: Any,
    folder: str | os.PathLike,
    dtype: torch.dtype | str | None = None,
    *,
    seed: int = 0,
    max_shard_size: int = 5 * 10**9,
    std: float | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Writes a random checkpoint of the transformers model described by ``config`` into
    ``folder`` as ``save_pretrained`` does, without building the model: each tensor is
    generated and written in slices of 16 MB (seeded: the same files for the same seed).

    :param config: a transformers configuration naming its class in ``architectures``
        (``LlamaForCausalLM``...)
    :param dtype: the type of the floating point weights (default: the config's, else float32)
    :param max_shard_size: the size (bytes) above which the tensors go to the next shard
    :param std: the standard deviation of the weights (default: ``config.initializer_range``
        or 0.02); normalization weights are ``1 + std * N(0, 1)``
    :param progress: a progress bar on the bytes written
    :return: ``{"files": [...], "nbytes": total, "tensors": count}``
    """
    import transformers

    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    dtype = _torch_dtype(dtype if dtype is not None else getattr(config, "dtype", None) or torch.float32)
    model_class = getattr(transformers, (getattr(config, "architectures", None) or [""])[0], None)
    if model_class is None:
        raise ValueError(f"config.architectures={getattr(config, 'architectures', None)} names no transformers class.")
    with torch.device("meta"):
        model = model_class._from_config(config, dtype=dtype)
    layout = checkpoint_layout(model)
    zero_rows = padding_rows(model)
    del model
    std = std if std is not None else float(getattr(config, "initializer_range", 0.02) or 0.02)
    shards = _shards(layout, max_shard_size)
    names = (
        ["model.safetensors"] if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    total = sum(_header([e])[1][0] for e in layout)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="B", unit_scale=True, desc="checkpoint", leave=False)
    weight_map = {}
    index = 0
    try:
        for file, entries in zip(names, shards):
            header, _ = _header(entries)
            with open(os.path.join(folder, file), "wb") as f:
                f.write(header)
                for name, shape, tensor_dtype in entries:
                    # one generator per tensor: a tensor's values do not depend on the sharding
                    generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
                    index += 1
                    for piece in _slices(name, shape, tensor_dtype, generator, std, zero_rows.get(name)):
                        f.write(piece.view(torch.uint8).numpy().data)
                        if bar is not None:
                            bar.update(piece.numel() * piece.element_size())
                    weight_map[name] = file
    finally:
        if bar is not None:
            bar.close()
    if len(shards) > 1:
        with open(os.path.join(folder, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    config.dtype = str(dtype).replace("torch.", "")
    config.save_pretrained(folder)
    return {"files": [os.path.join(folder, n) for n in names], "nbytes": total, "tensors": len(layout)}
