"""Guesses ``dynamic_shapes`` from several sets of inputs.

Given two or more sets of inputs a model accepts, every dimension which takes
different values across the sets is dynamic, every other one is static.
Dimensions taking the same values in the same sets share one name (the batch
size of every input, for example): give input sets in which two independent
dimensions never take the same values.

.. code-block:: python

    import torch
    from fx2onnx import infer_dynamic_shapes

    inputs = [
        (torch.randn(2, 3, 8), torch.randn(2, 5, 8)),
        (torch.randn(4, 7, 8), torch.randn(4, 2, 8)),
    ]
    print(infer_dynamic_shapes(None, inputs, style="string"))
    # ({0: 'batch', 1: 'seq'}, {0: 'batch', 1: 'dim_1_1'})
    ds = infer_dynamic_shapes(None, inputs)  # Dim.DYNAMIC, for torch.export.export
"""

from __future__ import annotations

import inspect
import re
import warnings
from typing import Any, Sequence

import torch
from torch.utils import _pytree as pytree

from ..patches import caches

#: the values ``style`` accepts
STYLES = ("dynamic", "string", "dim")


class _Namer:
    """Gives one name per pattern of values (the sizes of a dimension across input sets)."""

    def __init__(self) -> None:
        self.by_pattern: dict[tuple[int, ...], str] = {}
        self.used: set[str] = set()
        self.dims: dict[str, Any] = {}

    def name(self, pattern: tuple[int, ...], candidates: Sequence[str], fallback: str) -> str:
        if pattern in self.by_pattern:
            return self.by_pattern[pattern]
        name = next((c for c in candidates if c not in self.used), None)
        if name is None:
            name, k = fallback, 2
            while name in self.used:
                name, k = f"{fallback}_{k}", k + 1
        self.by_pattern[pattern] = name
        self.used.add(name)
        return name

    def as_style(self, name: str, style: str) -> Any:
        """The name as torch expects it; one :class:`torch.export.Dim` object per name."""
        if style == "string":
            return name
        if style == "dynamic":
            return torch.export.Dim.DYNAMIC
        if name not in self.dims:
            self.dims[name] = torch.export.Dim(name)
        return self.dims[name]


def _candidates(tensor: torch.Tensor, axis: int, in_cache: bool) -> list[str]:
    """Usual names for a dimension: ``batch`` first, ``seq`` for sequences, ``past_seq`` in caches."""
    if axis == 0:
        return ["batch"]
    if in_cache and tensor.dim() == 4 and axis == 2:
        return ["past_seq"]
    if not in_cache and axis == 1 and tensor.dim() in (2, 3):
        return ["seq"]
    return []


def _children(value: Any) -> list[tuple[str, Any]] | None:
    """The (label, child) of a pytree node (a cache...) in the order torch.export flattens it.

    transformers' caches are flattened the way :mod:`fx2onnx.patches.caches`
    registers them, registered or not.
    """
    node = pytree.SUPPORTED_NODES.get(type(value))
    if node is not None and node.flatten_with_keys_fn is not None:
        pairs, _ = node.flatten_with_keys_fn(value)
        return [(_key_label(k, i), c) for i, (k, c) in enumerate(pairs)]
    if node is not None:
        return [(str(i), c) for i, c in enumerate(node.flatten_fn(value)[0])]
    if type(value).__module__.startswith("transformers.cache_utils"):
        if hasattr(value, "self_attention_cache"):
            pairs, _ = caches._flatten_encoder_decoder_with_keys(value)
        elif hasattr(value, "layers"):
            pairs, _ = caches._flatten_layers_with_keys(value)
        else:
            return None
        return [(_key_label(k, i), c) for i, (k, c) in enumerate(pairs)]
    return None


def _key_label(key: Any, index: int) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(index)


def _path_label(where: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"\W", "_", where)).strip("_")


def _same_structure_error(where: str, detail: str) -> ValueError:
    return ValueError(
        f"The input sets differ in structure at {where or 'the top'}: {detail}. "
        f"infer_dynamic_shapes needs input sets of the same structure, only the shapes may differ."
    )


def _infer(values: list[Any], where: str, namer: _Namer, style: str, in_cache: bool) -> Any:
    first = values[0]
    if any(type(v) is not type(first) for v in values):
        raise _same_structure_error(where, f"types {[type(v).__name__ for v in values]}")
    if isinstance(first, torch.Tensor):
        return _infer_tensor(values, where, namer, style, in_cache)
    if first is None or isinstance(first, (bool, float, str)):
        if any(v != first for v in values[1:]):
            warnings.warn(
                f"Input {where} takes values {values}: torch.export treats it as a constant, "
                f"the exported model only works for {first!r}.",
                UserWarning,
                stacklevel=3,
            )
        return None
    if isinstance(first, int):
        return None if all(v == first for v in values) else torch.export.Dim.DYNAMIC
    if isinstance(first, (list, tuple)):
        if any(len(v) != len(first) for v in values):
            raise _same_structure_error(where, f"lengths {[len(v) for v in values]}")
        specs = [_infer([v[i] for v in values], f"{where}_{i}", namer, style, in_cache) for i in range(len(first))]
        return None if all(s is None for s in specs) else type(first)(specs) if type(first) in (list, tuple) else specs
    if isinstance(first, dict):
        if any(set(v) != set(first) for v in values):
            raise _same_structure_error(where, f"keys {[sorted(v) for v in values]}")
        specs = {k: _infer([v[k] for v in values], f"{where}_{k}", namer, style, in_cache) for k in first}
        return None if all(s is None for s in specs.values()) else specs
    children = [_children(v) for v in values]
    if children[0] is None:
        raise TypeError(
            f"Input {where} is a {type(first).__name__}, which torch.export cannot flatten. Register "
            f"the class as a pytree node (torch.utils._pytree.register_pytree_node) or pass its tensors."
        )
    if any(len(c) != len(children[0]) for c in children):
        raise _same_structure_error(where, f"{type(first).__name__} with {[len(c) for c in children]} tensors")
    specs = [
        _infer([c[i][1] for c in children], f"{where}_{label}", namer, style, True)
        for i, (label, _) in enumerate(children[0])
    ]
    return None if all(s is None for s in specs) else specs


def _infer_tensor(values: list[torch.Tensor], where: str, namer: _Namer, style: str, in_cache: bool) -> Any:
    first = values[0]
    if any(v.dim() != first.dim() for v in values):
        raise _same_structure_error(where, f"tensors of ranks {[v.dim() for v in values]}")
    spec: dict[int, Any] = {}
    for axis in range(first.dim()):
        pattern = tuple(int(v.shape[axis]) for v in values)
        if len(set(pattern)) == 1:
            continue
        if 0 in pattern or 1 in pattern:
            warnings.warn(
                f"Dimension {axis} of input {where} takes values {pattern}: torch.export "
                f"specializes sizes 0 and 1, use input sets where it is at least 2.",
                UserWarning,
                stacklevel=3,
            )
        name = namer.name(pattern, _candidates(first, axis, in_cache), f"dim_{_path_label(where)}_{axis}")
        spec[axis] = namer.as_style(name, style)
    return spec or None




def _split(inputs: Any) -> tuple[tuple, dict]:
    """One input set as (args, kwargs): a tuple/list is args, a dict kwargs, ``(tuple, dict)`` both."""
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        if len(inputs) == 2 and isinstance(inputs[0], tuple) and isinstance(inputs[1], dict):
            return tuple(inputs[0]), dict(inputs[1])
        return tuple(inputs), {}
    raise TypeError(
        f"An input set must be a tuple of positional inputs, a dict of named inputs or a pair "
        f"(args, kwargs), got {type(inputs).__name__}: use (x,) for one tensor."
    )


def _bind(model: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    signature = inspect.signature(forward)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"An input set does not match the signature {signature} of the model: {e}") from e
    return dict(bound.arguments)


def infer_dynamic_shapes(
    model: torch.nn.Module | Any | None,
    inputs_list: Sequence[Any],
    *,
    style: str = "dynamic",
) -> Any:
    """Guesses the ``dynamic_shapes`` of a model from several sets of inputs.

    A dimension is dynamic when its size differs from one set to another.
    Names come from the position (``batch`` for the first axis, ``seq`` for the
    second one of a 2D/3D tensor, ``past_seq`` for the length of a cache) or
    from the input and the axis (``dim_attention_mask_1``); a dimension taking
    the same sizes as an already named one reuses its name. Nested lists,
    tuples, dicts and pytree nodes (transformers' caches) are walked; an int
    whose value changes becomes ``Dim.DYNAMIC`` (torch.export may still
    specialize it, without error, when the code uses it as a Python int:
    check the exported program on the other input sets).

    :param model: the model, to map positional inputs to the names of the
        parameters of ``forward``; None to keep the structure of the inputs
    :param inputs_list: two or more input sets; each one is a tuple of
        positional inputs, a dict of named inputs or a pair ``(args, kwargs)``
    :param style: ``"dynamic"``: ``Dim.DYNAMIC`` everywhere, accepted by
        :func:`torch.export.export` and :func:`fx2onnx.to_onnx`, torch infers the
        relations between dimensions, the names are not kept; ``"string"``: the
        names, accepted by :func:`fx2onnx.to_onnx` and :func:`torch.onnx.export`,
        which keep them in the ONNX model (turn them into ``Dim.DYNAMIC`` for
        torch.export with :func:`fx2onnx.zoo.export_dynamic_shapes`);
        ``"dim"``: named :class:`torch.export.Dim`, accepted by both, the names
        are kept but torch.export refuses any relation or bound the model puts
        on them (``Constraints violated``)
    :return: a dict keyed by the parameter names when a model is given (or when
        the inputs are named), a tuple for positional inputs otherwise
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}.")
    if isinstance(inputs_list, (str, bytes, dict)) or len(inputs_list) < 2:
        raise ValueError(
            "inputs_list must hold at least two input sets (a list of tuples or dicts): a dimension is "
            "dynamic when its size differs between two sets."
        )
    sets = [_split(inputs) for inputs in inputs_list]
    namer = _Namer()
    if model is not None:
        bound = [_bind(model, args, kwargs) for args, kwargs in sets]
        names = list(bound[0])
        for b in bound[1:]:
            if list(b) != names:
                raise ValueError(
                    f"The input sets do not give the same inputs: {names} and {list(b)}; give every "
                    f"input in every set (or none of them)."
                )
        return {name: _infer([b[name] for b in bound], name, namer, style, False) for name in names}
    kinds = {(bool(args), bool(kwargs)) for args, kwargs in sets}
    if len(kinds) != 1 or (True, True) in kinds:
        raise ValueError(
            "Without a model, the input sets must all be positional (tuples) or all named (dicts): "
            "give the model so that infer_dynamic_shapes can map the inputs to its parameters."
        )
    if sets[0][1]:
        return _infer([kwargs for _, kwargs in sets], "", namer, style, False) or {
            k: None for k in sets[0][1]
        }
    args = [list(a) for a, _ in sets]
    specs = _infer(args, "", namer, style, False)
    return tuple(specs) if specs is not None else tuple(None for _ in args[0])
