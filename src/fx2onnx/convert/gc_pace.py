"""Fewer garbage collections while torch.export traces: a capture makes many short-lived objects
(sympy expressions, fake tensors) and, at Python's default pace (a collection every 700
allocations), the collector walks the whole heap (torch, transformers and the model: 170,000
objects and more) hundreds of times a capture."""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

#: allocations between two collections of the youngest generation while capturing (Python's default: 700)
CAPTURE_THRESHOLD = 10_000


@contextlib.contextmanager
def fewer_collections(threshold: int = CAPTURE_THRESHOLD) -> Iterator[None]:
    """Within the block, a collection every ``threshold`` allocations, and the objects that
    existed before the block out of the collections (:func:`gc.freeze`) unless the process
    froze some itself; both restored after it.

    >>> import gc
    >>> before = gc.get_threshold()
    >>> with fewer_collections():
    ...     gc.get_threshold()[0]
    10000
    >>> gc.get_threshold() == before
    True
    """
    previous = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0 and gc.isenabled()
    if freeze:
        gc.freeze()
    gc.set_threshold(max(threshold, previous[0]), *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        if freeze:
            gc.unfreeze()
