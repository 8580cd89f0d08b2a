"""The batch of RT-DETR and its descendants kept dynamic: ``len(tensor)`` read as ``tensor.shape[0]``.

``RTDetrModel.forward`` (and the forwards copied from it: RT-DETR v2, D-FINE, DEIMv2,
PP-DocLayout v2 and v3) reads the batch size as ``batch_size = len(source_flatten)``.
Python's ``len`` must return an ``int``: on a tensor whose first dimension is
symbolic, torch.export turns it into the example's batch size and the whole graph
after it is specialized (the capture error names that line).

The patch gives the forward a global ``len`` which returns ``value.shape[0]`` (a
symbolic size) for a tensor and calls the builtin for anything else: the same value
in eager mode, a dynamic batch once exported. The function is rebuilt with the same
code and closure (decorators such as ``can_return_tuple`` included, the wrapped
function rebuilt the same way), only its globals differ.

.. code-block:: python

    import fx2onnx

    # inside to_onnx(patches="auto") or torch_export_patches(patch_transformers=True)
    # an RTDetrForObjectDetection exports with a dynamic batch
"""

from __future__ import annotations

import builtins
import types
from typing import Any

import torch

from .registry import source_guard

#: (modeling module, model class) whose forward reads the batch with len(source_flatten)
DETR_BATCH_FORWARDS: tuple[tuple[str, str], ...] = (
    ("rt_detr", "RTDetrModel"),
    ("rt_detr_v2", "RTDetrV2Model"),
    ("d_fine", "DFineModel"),
    ("deimv2", "Deimv2Model"),
    ("pp_doclayout_v2", "PPDocLayoutV2Model"),
    ("pp_doclayout_v3", "PPDocLayoutV3Model"),
)


def symbolic_len(value: Any) -> Any:
    """``value.shape[0]`` for a tensor (symbolic while exporting), ``len(value)`` otherwise."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value.shape[0]
    return builtins.len(value)


def with_globals(function: Any, **names: Any) -> Any:
    """A copy of ``function`` whose global ``names`` are rebound; a decorator's wrapper (a
    ``__wrapped__`` function held in its closure) is copied with the wrapped function rebound."""
    inner = getattr(function, "__wrapped__", None)
    closure = function.__closure__
    scope = function.__globals__
    if inner is not None and closure and any(c.cell_contents is inner for c in closure):
        new_inner = with_globals(inner, **names)
        closure = tuple(types.CellType(new_inner) if c.cell_contents is inner else c for c in closure)
    else:
        new_inner = None
        scope = {**scope, **names}
    copy = types.FunctionType(function.__code__, scope, function.__name__, function.__defaults__, closure)
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__dict__.update(function.__dict__)
    copy.__qualname__, copy.__doc__, copy.__module__ = function.__qualname__, function.__doc__, function.__module__
    if new_inner is not None:
        copy.__wrapped__ = new_inner  # type: ignore[attr-defined]
    return copy


def make_symbolic_len_forward(original: Any) -> Any:
    return with_globals(original, len=symbolic_len)


#: skips the patch for a forward which no longer reads the batch with len(source_flatten)
guard_symbolic_len_forward = source_guard(
    "the forward", "len(source_flatten)",
    absent="the forward does not read the batch with len(source_flatten) in this version",
)
