"""Readable names for the ONNX outputs, derived from the structure of the model's outputs.

torch.export flattens the outputs (a tuple, a dict, a ``ModelOutput``...) and
keeps their structure in ``ep.call_spec.out_spec``. Walking that structure gives
one path per output (``("logits",)``, ``(0,)``, ``("b", 1)``) which becomes a
name (``logits``, ``output_0``, ``b_1``) instead of an FX name like ``linear_7``.

.. code-block:: python

    import torch
    from fx2onnx.convert.naming import output_names_from_spec

    class M(torch.nn.Module):
        def forward(self, x):
            return {"sum": x + 1, "pair": (x * 2, x - 1)}

    ep = torch.export.export(M(), (torch.randn(2, 3),))
    print(output_names_from_spec(ep.call_spec.out_spec))  # ['sum', 'pair_0', 'pair_1']
"""

from __future__ import annotations

import re
from typing import Any

from torch.utils import _pytree as pytree


def _child_keys(spec: pytree.TreeSpec) -> list[Any]:
    """One key per child: dict keys, namedtuple fields, ModelOutput keys or indices."""
    n = spec.num_children
    context = spec.context
    if isinstance(context, (list, tuple)) and len(context) == n and all(isinstance(k, (str, int)) for k in context):
        return list(context)
    fields = getattr(context, "_fields", None) or getattr(spec.type, "_fields", None)
    if fields is not None and len(fields) == n:
        return list(fields)
    return list(range(n))


def output_paths(spec: pytree.TreeSpec | None) -> list[tuple[Any, ...]]:
    """The path (tuple of keys and indices) of every leaf of ``spec``, in flattening order."""
    if spec is None:
        return []
    if spec.is_leaf():
        return [()]
    paths: list[tuple[Any, ...]] = []
    for key, child in zip(_child_keys(spec), spec.children()):
        paths.extend((key, *p) for p in output_paths(child))
    return paths


def path_to_name(path: tuple[Any, ...]) -> str:
    """``("logits",)`` -> ``logits``, ``(0,)`` -> ``output_0``, ``()`` -> ``output``."""
    if not path:
        return "output"
    parts = [str(p) for p in path]
    if isinstance(path[0], int):
        parts.insert(0, "output")
    name = re.sub(r"[^A-Za-z0-9_]", "_", "_".join(parts))
    return name


def _key(entry: Any) -> Any:
    for attribute in ("key", "idx", "name"):  # MappingKey, SequenceKey, GetAttrKey
        if hasattr(entry, attribute):
            return getattr(entry, attribute)
    return str(entry)


def _paths_with_keys(spec: pytree.TreeSpec) -> list[tuple[Any, ...]] | None:
    """Paths given by the flatten-with-keys functions of the registered classes
    (a ``DynamicCache`` names its leaves ``key_0``, ``value_0``...), or None when the
    structure cannot be rebuilt from placeholder tensors."""
    import torch

    try:
        tree = spec.unflatten([torch.zeros((1, 1, 1, 1)) for _ in range(spec.num_leaves)])
        leaves = pytree.tree_flatten_with_path(tree)[0]
    except Exception:  # a class whose unflatten needs real values: walk the spec instead
        return None
    if len(leaves) != spec.num_leaves:
        return None
    return [tuple(_key(k) for k in path) for path, _ in leaves]


def leaf_paths(spec: pytree.TreeSpec | None) -> list[tuple[Any, ...]]:
    """The path of every leaf of ``spec`` (keys of the registered classes when they can be read)."""
    if spec is None:
        return []
    paths = _paths_with_keys(spec) if not spec.is_leaf() else None
    return paths or output_paths(spec)


def output_names_from_spec(spec: pytree.TreeSpec | None) -> list[str]:
    """One readable name per flattened output (see the module docstring)."""
    return [path_to_name(p) for p in leaf_paths(spec)]




def cache_pairs(
    input_paths: dict[str, tuple[Any, ...]], output_paths_: dict[str, tuple[Any, ...]]
) -> dict[str, str]:
    """Input name -> output name for the outputs at the same place in the returned structure as
    a keyword input's leaf: ``past_key_values.key_0`` given (path ``(1, "past_key_values",
    "key_0")`` in ``(args, kwargs)``) and returned (path ``("past_key_values", "key_0")``), the
    updated cache a generation loop feeds back (:func:`fx2onnx.generate`)."""
    by_path = {path: name for name, path in output_paths_.items() if len(path) >= 2}
    pairs: dict[str, str] = {}
    for name, path in input_paths.items():
        if len(path) >= 3 and path[0] == 1 and tuple(path[1:]) in by_path:
            pairs[name] = by_path[tuple(path[1:])]
    return pairs


def distinct_from_inputs(names: list[str | None], input_names: set[str]) -> list[str | None]:
    """Renames the output names equal to an input name: ``past_key_values_key_0``
    becomes ``present_key_0`` (the usual name of an updated cache), others get ``_out``."""
    result: list[str | None] = []
    for name in names:
        if name is not None and name in input_names:
            name = "present" + name[len("past_key_values"):] if name.startswith("past_key_values_") else f"{name}_out"
        result.append(name)
    return result
