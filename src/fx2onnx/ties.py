"""Ties in the selections of an eager run: outputs which depend on how ties are broken.

``torch.topk`` keeps the ``k`` largest values of a row; when the ``k``-th and
the ``(k+1)``-th are equal, which index is kept is up to the implementation:
onnxruntime keeps the lowest index (the ONNX specification of ``TopK``), torch
on CPU does not say. The same holds for ``argmax``, ``argmin`` and ``max`` or
``min`` along a dimension when the extreme value appears several times. A model
whose outputs go through such a selection (the router of a mixture of experts
initialized to zero: every expert scores the same) gives other outputs in
onnxruntime than in torch although the export is right: the reference itself is
ambiguous.

:func:`record_ties` watches an eager run and lists the selections which met a
tie; :func:`describe_ties` says it in one sentence, to add to a discrepancy
report so that a mismatch caused by ties is not taken for a wrong model (or a
wrong model for ties).

.. code-block:: python

    with record_ties() as ties:
        expected = model(**inputs)
    if ties:
        print(describe_ties(ties))
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import traceback
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode

_SELECTIONS = {
    torch.topk: "topk",
    torch.Tensor.topk: "topk",
    torch.argmax: "argmax",
    torch.Tensor.argmax: "argmax",
    torch.argmin: "argmin",
    torch.Tensor.argmin: "argmin",
    torch.max: "max",
    torch.Tensor.max: "max",
    torch.min: "min",
    torch.Tensor.min: "min",
}
_SKIPPED_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(__file__))


@dataclasses.dataclass(frozen=True)
class SelectionTie:
    """A selection of the eager run whose result depends on how ties are broken."""

    op: str
    where: str  #: ``file:line`` of the model's code calling the operator
    rows: int  #: the rows (slices along the dimension) with a tie at the selection boundary
    total: int  #: the rows of the selection

    def __str__(self) -> str:
        return f"{self.op} at {self.where} ({self.rows}/{self.total} rows tied)"


def _caller() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.startswith(_SKIPPED_DIRS) and "contextlib" not in frame.filename:
            return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return "?"


def _bind(name: str, args: tuple, kwargs: dict) -> tuple[torch.Tensor, int | None, int, bool]:
    """``(input, dim, k, largest)`` of a selection call; dim None: the whole tensor."""
    x = args[0]
    if name == "topk":
        k = args[1] if len(args) > 1 else kwargs["k"]
        dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
        largest = args[3] if len(args) > 3 else kwargs.get("largest", True)
        return x, dim, int(k), bool(largest)
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    return x, dim, 1, name in ("max", "argmax")


def _tied_rows(x: torch.Tensor, dim: int | None, k: int, largest: bool, ordered: bool = False) -> tuple[int, int]:
    """Rows whose ``k``-th and ``(k+1)``-th values (in selection order) are equal, and all rows;
    ``ordered`` (a sorted ``topk``): also rows with two equal values among the first ``k``, whose
    indices come in an order the tie decides."""
    if not x.is_floating_point() and x.dtype not in (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8):
        return 0, 0
    x = x.detach().reshape(-1) if dim is None else x.detach().movedim(dim, -1)
    if x.dim() == 0 or x.shape[-1] <= k:
        return 0, 0
    x = x.reshape(-1, x.shape[-1])
    values = torch.topk(x, k + 1, dim=-1, largest=largest).values  # plain call: the mode is off here
    tied = values[:, k - 1] == values[:, k]
    if ordered and k > 1:
        tied = tied | (values[:, 1:k] == values[:, : k - 1]).any(dim=-1)
    return int(tied.sum()), int(tied.numel())


class _TieMode(TorchFunctionMode):
    def __init__(self, found: list[SelectionTie]):
        super().__init__()
        self.found = found

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _SELECTIONS.get(func)
        if name is not None and args and isinstance(args[0], torch.Tensor):
            x, dim, k, largest = _bind(name, args, kwargs)
            if name in ("topk", "argmax", "argmin") or isinstance(dim, int):  # max(x) / max(a, b): no index
                try:
                    ordered = name == "topk" and bool(args[4] if len(args) > 4 else kwargs.get("sorted", True))
                    rows, total = _tied_rows(x, dim if isinstance(dim, int) else None, k, largest, ordered)
                except Exception:  # noqa: BLE001 - a check must never break the run it watches
                    rows, total = 0, 0
                if rows:
                    self.found.append(SelectionTie(name, _caller(), rows, total))
        return func(*args, **kwargs)


@contextlib.contextmanager
def record_ties() -> Iterator[list[SelectionTie]]:
    """Lists the selections (``topk``, ``argmax``, ``argmin``, ``max``/``min`` along a
    dimension) of the run inside the block which met a tie at their boundary."""
    found: list[SelectionTie] = []
    with _TieMode(found):
        yield found


def describe_ties(ties: list[SelectionTie], limit: int = 3) -> str:
    """One sentence naming the tied selections and what follows for a comparison."""
    if not ties:
        return ""
    unique: dict[tuple[str, str], SelectionTie] = {}
    for tie in ties:
        unique.setdefault((tie.op, tie.where), tie)
    shown = ", ".join(str(t) for t in list(unique.values())[:limit])
    more = f" and {len(unique) - limit} more" if len(unique) > limit else ""
    return (
        f"the eager reference selects among tied values: {shown}{more}; torch and onnxruntime "
        f"(lowest index first) break ties differently, so outputs may differ although the export is right "
        f"(fix: give the weights feeding the selection distinct values, e.g. a zero-initialized router)"
    )


def has_ties(run: Any, *args: Any, **kwargs: Any) -> list[SelectionTie]:
    """Runs ``run(*args, **kwargs)`` without gradients and returns the tied selections it met."""
    with torch.no_grad(), record_ties() as ties:
        run(*args, **kwargs)
    return ties
