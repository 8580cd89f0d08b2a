"""The tensors of a safetensors checkpoint as lazy initializers, read one at a time when written.

A ``save_pretrained`` folder holds ``model.safetensors`` or several shards listed in
``model.safetensors.index.json``. :func:`checkpoint_weights` maps every tensor name of a
model (as in its ``state_dict``, every alias of a tied weight included) to an
:class:`onnx_ir.LazyTensor` which reads the tensor from its file when the model is saved:
the memory held at once is one tensor, not the model.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from .model_config import model_from_checkpoint_config
from .tensors import onnx_dtype

_INDEX = "model.safetensors.index.json"
_SINGLE = "model.safetensors"
#: what to do with a truncated or corrupt checkpoint file
_DOWNLOAD_AGAIN = "download it again (a download cut in the middle leaves such a file)"
#: bytes per element of the dtypes a safetensors header may name
SAFETENSORS_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8, "C64": 8,
}
#: a header larger than this is corrupt (safetensors itself refuses more than 100 MB)
_MAX_HEADER = 100_000_000


class CheckpointFileError(ValueError):
    """A checkpoint file is truncated, corrupt or missing: one line naming it and what to do."""


class CheckpointMismatchError(KeyError, ValueError):
    """The checkpoint does not hold the tensors the model of its config.json needs (a KeyError for the
    callers catching one, a ValueError for the command line's one-line refusal)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def safetensors_header(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """The tensors of a safetensors file, ``{name: {"dtype", "shape", "data_offsets"}}``, read from its header
    (a few kilobytes, no tensor read) and checked against the file: the header's length and JSON, every dtype
    known, each tensor's bytes its shape's, the data exactly covered by the tensors and the file that long.

    :raises CheckpointFileError: one line naming the file, what is wrong and what to do
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointFileError(f"{path!r} is missing: {_DOWNLOAD_AGAIN.split(' (')[0]} into the folder.")
    size = os.path.getsize(path)

    def corrupt(what: str) -> CheckpointFileError:
        return CheckpointFileError(f"{path!r} is truncated or corrupt ({what}): {_DOWNLOAD_AGAIN}.")

    with open(path, "rb") as f:
        first = f.read(8)
        if len(first) < 8:
            raise corrupt(f"{size} bytes, shorter than a safetensors header")
        length = int.from_bytes(first, "little")
        if length > min(_MAX_HEADER, size - 8):
            raise corrupt(f"its header announces {length} bytes, the file holds {size - 8} after the length")
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise corrupt(f"its header is not JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(header, dict):
        raise corrupt("its header is not a JSON object")
    header.pop("__metadata__", None)
    data = size - 8 - length
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise corrupt(f"the entry of tensor {name!r} lacks its dtype, shape or data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in SAFETENSORS_ITEMSIZE:
            raise corrupt(f"tensor {name!r} has an unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                   for d in shape):
            raise corrupt(f"tensor {name!r} has an invalid shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise corrupt(f"tensor {name!r} has invalid data offsets {offsets!r}")
        expected = SAFETENSORS_ITEMSIZE[dtype]
        for d in shape:
            expected *= d
        if offsets[1] - offsets[0] != expected:
            raise corrupt(f"tensor {name!r} spans {offsets[1] - offsets[0]} bytes, its shape {shape} and dtype {dtype} "
                          f"make {expected}")
        if offsets[1] > data:
            raise corrupt(f"tensor {name!r} ends at byte {offsets[1]} of the data, the file holds {data}")
        spans.append((offsets[0], offsets[1]))
    position = 0
    for begin, end in sorted(spans):
        if begin != position:
            raise corrupt(f"its tensors {'overlap' if begin < position else 'leave a gap'} at byte {position} of the "
                          "data")
        position = end
    if position != data:
        raise corrupt(f"its tensors cover {position} bytes of data, the file holds {data}")
    return header


def checkpoint_files(folder: str | os.PathLike) -> dict[str, str]:
    """Maps each tensor name of the checkpoint in ``folder`` to the safetensors file holding it.

    :raises CheckpointFileError: an index which is not JSON, names a missing shard, or a tensor its shard
        does not hold; a truncated or corrupt file (:func:`safetensors_header`)
    """
    folder = os.fspath(folder)
    index = os.path.join(folder, _INDEX)
    if os.path.exists(index):
        try:
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise TypeError("weight_map is not a mapping of names to files")
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointFileError(
                f"{index!r} is not a safetensors index ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): "
                f"{_DOWNLOAD_AGAIN}.") from None
        headers: dict[str, dict[str, Any]] = {}
        for file in sorted(set(weight_map.values())):
            path = os.path.join(folder, file)
            if not os.path.isfile(path):
                count = sum(v == file for v in weight_map.values())
                raise CheckpointFileError(
                    f"{index!r} names the shard {file!r} ({count} tensors), which is not in the folder: download it "
                    "into the folder.")
            headers[file] = safetensors_header(path)
        for name, file in weight_map.items():
            if name not in headers[file]:
                raise CheckpointFileError(f"{index!r} places tensor {name!r} in {file!r}, which does not hold it: "
                                          f"{_DOWNLOAD_AGAIN}.")
        return {name: os.path.join(folder, file) for name, file in weight_map.items()}
    single = os.path.join(folder, _SINGLE)
    if not os.path.exists(single):
        raise FileNotFoundError(
            f"No {_SINGLE} nor {_INDEX} in {folder!r}: give a folder written by save_pretrained "
            "(safe_serialization, the default)."
        )
    return {name: single for name in safetensors_header(single)}


def checkpoint_shapes(folder: str | os.PathLike) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{tensor name: (safetensors dtype, shape)}`` of the checkpoint in ``folder``, from the headers only."""
    files = checkpoint_files(folder)
    result = {}
    for path in sorted(set(files.values())):
        for name, info in safetensors_header(path).items():
            result[name] = (info["dtype"], tuple(info["shape"]))
    return result


#: data pointer of every tensor read from a checkpoint -> (end pointer, path, key, dtype), see
#: :func:`relazify_views`; filled when a lazy tensor is evaluated
_READS: dict[int, tuple[int, str, str, torch.dtype | None]] = {}


def _read(path: str, key: str, dtype: torch.dtype | None) -> ir.TensorProtocol:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        tensor = f.get_tensor(key)
    if dtype is not None and tensor.dtype != dtype and tensor.is_floating_point():
        tensor = tensor.to(dtype)
    tensor = tensor.contiguous()
    if tensor.numel():
        start = tensor.data_ptr()
        _READS[start] = (start + tensor.numel() * tensor.element_size(), path, key, dtype)
    return ir.tensor_adapters.TorchTensor(tensor, name=key)


def _read_view(path: str, key: str, dtype: torch.dtype | None, shape, strides, offset: int, name: str):
    tensor = _read(path, key, dtype).raw
    return ir.tensor_adapters.TorchTensor(torch.as_strided(tensor, shape, strides, offset), name=name)


def _array_of(tensor: Any) -> tuple[int, tuple[int, ...], int, Any] | None:
    """(data pointer, strides in elements, element size, the torch tensor owning the memory) of
    an initializer which is a view of a live torch tensor (a numpy view of it included)."""
    raw = getattr(tensor, "raw", None)
    if isinstance(raw, torch.Tensor) and raw.numel():
        return raw.data_ptr(), tuple(raw.stride()), raw.element_size(), raw
    if isinstance(raw, np.ndarray) and raw.size:
        size = raw.itemsize
        owner = raw
        while getattr(owner, "base", None) is not None:
            owner = owner.base
        if not isinstance(owner, torch.Tensor) or any(s % size for s in raw.strides):
            return None
        return raw.__array_interface__["data"][0], tuple(s // size for s in raw.strides), size, owner
    return None


def relazify_views(model: ir.Model) -> int:
    """Replaces the initializers which are views of a tensor read from a checkpoint (the optimizer
    folds ``Transpose(weight)`` into a transposed view) by lazy tensors reading it again when
    saved; returns how many. Without it, each view keeps its source tensor, a mapping of the
    checkpoint file, alive until the model is freed: saving would touch every page of it."""
    if not _READS:
        return 0
    starts = sorted(_READS)
    count = 0
    import bisect

    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is None or isinstance(tensor, ir.LazyTensor):
            continue
        found = _array_of(tensor)
        if found is None:
            continue
        pointer, strides, size, owner = found
        i = bisect.bisect_right(starts, pointer) - 1
        if i < 0 or pointer >= _READS[starts[i]][0]:
            continue
        end, path, key, dtype = _READS[starts[i]]
        storage = owner.untyped_storage()
        if storage.data_ptr() != starts[i] or storage.nbytes() != end - starts[i] or (pointer - starts[i]) % size:
            continue  # not the storage read (freed, its memory reused by another tensor)
        func = functools.partial(
            _read_view, path, key, dtype, tuple(tensor.shape.numpy()), strides, (pointer - starts[i]) // size, tensor.name
        )
        value.const_value = ir.LazyTensor(func, dtype=tensor.dtype, shape=tensor.shape, name=tensor.name)
        count += 1
    _READS.clear()
    return count


def lazy_checkpoint_tensor(path: str, key: str, name: str, dtype: torch.dtype | None = None) -> ir.LazyTensor:
    """The tensor ``key`` of the safetensors file ``path``, read when its bytes are needed
    (cast to ``dtype`` if given, floating point tensors only); ``name`` names the initializer."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        piece = f.get_slice(key)
        shape = piece.get_shape()
        stored = _SAFETENSORS_DTYPES[piece.get_dtype()]
    target = dtype if dtype is not None and stored.is_floating_point else stored
    return ir.LazyTensor(
        lambda: _read(path, key, target), dtype=onnx_dtype(target), shape=ir.Shape(shape), name=name
    )


_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


def _aliases(model: torch.nn.Module) -> dict[str, list[str]]:
    """Every name of each tensor of ``model``: tied weights share one tensor under several names."""
    by_id: dict[int, list[str]] = {}
    for name, tensor in list(model.named_parameters(remove_duplicate=False)) + list(
        model.named_buffers(remove_duplicate=False)
    ):
        by_id.setdefault(id(tensor), []).append(name)
    return {name: names for names in by_id.values() for name in names}


def _candidates(name: str, prefix: str) -> list[str]:
    """Names a checkpoint may use for the model tensor ``name``: itself, without or with the
    base model prefix (a checkpoint of the base model, or of the model with a head)."""
    names = [name]
    if prefix and name.startswith(prefix + "."):
        names.append(name[len(prefix) + 1 :])
    elif prefix:
        names.append(f"{prefix}.{name}")
    return names


def checkpoint_weights(
    folder: str | os.PathLike, model: torch.nn.Module, dtype: torch.dtype | None = None, names: list[str] | None = None,
    missing_ok: bool = False,
) -> dict[str, ir.LazyTensor]:
    """Maps the tensor names of ``model`` to lazy tensors reading the checkpoint in ``folder``.

    A tied weight absent from the checkpoint (``lm_head.weight`` tied to the embeddings) is
    read under the name of the tensor it is tied to; a checkpoint of the base model (or of
    the model with a head) is matched by removing (adding) the model's ``base_model_prefix``.

    :param names: the names which must be found (default: every parameter); a name found
        nowhere raises a KeyError naming it
    :param dtype: cast the floating point tensors to this type while reading
    :param missing_ok: the names found only, none raised (buffers a checkpoint may hold)
    """
    files = checkpoint_files(folder)
    aliases = _aliases(model)
    prefix = getattr(model, "base_model_prefix", "") or ""
    wanted = names if names is not None else [n for n, _ in model.named_parameters(remove_duplicate=False)]
    result: dict[str, ir.LazyTensor] = {}
    missing: dict[str, list[str]] = {}  # name -> the checkpoint names it may have
    renamed: dict[str, str] | None = None
    tensors = dict(model.named_parameters(remove_duplicate=False))
    tensors.update(model.named_buffers(remove_duplicate=False))
    for name in wanted:
        candidates = [c for alias in aliases.get(name, [name]) for c in _candidates(alias, prefix)]
        key = next((c for c in candidates if c in files), None)
        if key is None:
            if renamed is None:  # a checkpoint in the layout transformers saves (LLaVA's language_model.model...)
                renamed = transformers_renamed_keys(folder, list(files))
            key = next((renamed[c] for c in candidates if c in renamed), None)
        if key is None:
            missing[name] = candidates
            continue
        result[name] = lazy_checkpoint_tensor(files[key], key, name, dtype)
        expected = tensors[name].shape if name in tensors else None
        if expected is not None and tuple(expected) != tuple(result[name].shape.numpy()):
            raise CheckpointFileError(
                f"tensor {key!r} of {files[key]!r} has shape {list(result[name].shape.numpy())}, the model of "
                f"config.json needs {list(expected)} for {name!r}: config.json lacks a field or does not belong to "
                "these weights; restore the config.json written with them.")
    if missing:  # tensors transformers builds from several (fused experts) or splits (a fused q, k, v)
        converted = transformers_converted_tensors(folder, files, model, dtype)
        for name, candidates in list(missing.items()):
            key = next((c for c in candidates if c in converted), None)
            if key is not None:
                result[name] = converted[key]
                del missing[name]
    if missing and not missing_ok:
        missing_names = list(missing)
        shown = ", ".join(repr(m) for m in missing_names[:5]) + \
            (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise CheckpointMismatchError(
            f"{len(missing)} tensor(s) of the model are not in the checkpoint {os.fspath(folder)!r}: {shown}. "
            "The checkpoint belongs to another architecture or renames its tensors: build the model "
            "from the checkpoint's config.json."
        )
    return result


def _folder_model(folder: str | os.PathLike) -> torch.nn.Module | None:
    """The model of the folder's config.json on the meta device, None without one or its class."""

    if not os.path.isfile(os.path.join(os.fspath(folder), "config.json")):
        return None
    try:
        return model_from_checkpoint_config(folder)
    except ValueError:  # no transformers class named
        return None


def _transforms(model: torch.nn.Module) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """``(renamings, converters, state dict)``: what transformers applies to a checkpoint's keys
    when it loads ``model`` (its checkpoint conversion mapping)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming

    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    return renamings, converters, model.state_dict(keep_vars=True)


def transformers_renamed_keys(folder: str | os.PathLike, keys: list[str]) -> dict[str, str]:
    """``{name in the model: key in the checkpoint}`` for the keys transformers renames when it loads
    the folder (its checkpoint conversion mapping: ``save_pretrained`` of a LLaVA model writes
    ``language_model.model.layers...`` for ``model.language_model.layers...``); keys that
    transformers merges or splits (a converter: fused experts, :func:`transformers_converted_tensors`)
    are left out; empty when the folder has no config.json or its class is unknown."""
    from transformers.core_model_loading import rename_source_key

    meta = _folder_model(folder)
    if meta is None:
        return {}
    renamings, converters, state = _transforms(meta)
    result = {}
    for key in keys:
        name, converter = rename_source_key(key, renamings, converters, meta.base_model_prefix, state)
        if converter is None and name != key:
            result[name] = key
    return result


def transformers_converted_tensors(folder: str | os.PathLike, files: dict[str, str], model: torch.nn.Module,
                                   dtype: torch.dtype | None = None) -> dict[str, ir.LazyTensor]:
    """``{name in the model: lazy tensor}`` of the tensors transformers converts when it loads the
    folder (its ``WeightConverter``: the experts of a layer stacked into one tensor, a fused q, k, v
    split...), computed by transformers' own conversion operations from the checkpoint's tensors.
    The operations first run on meta tensors of the stored shapes (the names, shapes and types
    of what they make, nothing read); a tensor is then computed when its bytes are needed, with the
    others its group makes (kept until each is read once). ``model``: the model (any device; a
    wrapper without transformers' attributes: the folder's model built on the meta device)."""
    import copy

    from transformers.core_model_loading import dot_natural_key, rename_source_key

    if not hasattr(model, "config") or not hasattr(model, "base_model_prefix"):
        # a wrapper (the pieces of a folder) names its tensors as the folder's model does: that model on meta
        model = _folder_model(folder)
        if model is None:
            return {}
    renamings, converters, state = _transforms(model)
    if not converters:
        return {}
    by_pattern = {k: c for c in converters for k in c.source_patterns}
    groups: dict[str, list[tuple[str, str]]] = {}  # first target -> [(checkpoint key, source pattern)]
    # in transformers' order of the keys (the experts of a layer in their order)
    for key in sorted(files, key=dot_natural_key):
        name, pattern = rename_source_key(key, renamings, converters, model.base_model_prefix, state)
        if pattern is not None and name in state:
            groups.setdefault(name, []).append((key, pattern))

    def run(first: str, read: Any) -> dict[str, torch.Tensor]:
        converter = copy.deepcopy(by_pattern[groups[first][0][1]])
        for key, pattern in groups[first]:
            converter.add_tensor(first, key, pattern, lambda key=key: read(key))
        with torch.no_grad():
            out = converter.convert(first, model=model, config=model.config)
        return {k: v[0] if isinstance(v, list) else v for k, v in out.items()}

    def meta_tensor(key: str) -> torch.Tensor:
        from safetensors import safe_open

        with safe_open(files[key], framework="pt") as f:
            piece = f.get_slice(key)
            return torch.empty(piece.get_shape(), dtype=_SAFETENSORS_DTYPES[piece.get_dtype()], device="meta")

    def load(key: str) -> torch.Tensor:
        from safetensors import safe_open

        with safe_open(files[key], framework="pt") as f:
            return f.get_tensor(key)

    result: dict[str, ir.LazyTensor] = {}
    for first in groups:
        try:
            shapes = run(first, meta_tensor)
        except Exception:  # noqa: BLE001 - an operation meta tensors cannot run: those tensors stay missing
            continue
        cache: dict[str, torch.Tensor] = {}

        def compute(name: str, first: str = first, cache: dict = cache) -> Any:
            if name not in cache:
                cache.update(run(first, load))
            tensor = cache.pop(name)
            if dtype is not None and tensor.is_floating_point():
                tensor = tensor.to(dtype)
            return ir.tensor_adapters.TorchTensor(tensor.contiguous(), name=name)

        for name, meta in shapes.items():
            if name not in state:
                continue
            target = dtype if dtype is not None and meta.is_floating_point() else meta.dtype
            result[name] = ir.LazyTensor(lambda name=name, compute=compute: compute(name), dtype=onnx_dtype(target),
                                         shape=ir.Shape(meta.shape), name=name)
    return result

