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


def output_names_from_spec(spec: pytree.TreeSpec | None) -> list[str]:
    """One readable name per flattened output (see the module docstring)."""
    return [path_to_name(p) for p in output_paths(spec)]
