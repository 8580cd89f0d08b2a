"""Shape functions (Meta kernels) torch lacks for operators fx2onnx converts.

Without a Meta kernel, torch.export runs the real kernel on fake tensors when every
size is static and refuses the operator (``UnsupportedOperatorException``) as soon as
one is symbolic. :func:`missing_meta_kernels` registers the shape functions below,
only for operators that still have none in the installed torch, for the duration of
a capture, and removes them afterwards.

>>> import torch
>>> with missing_meta_kernels():
...     torch.histogram(torch.empty(5, device="meta"), bins=4).hist.shape
torch.Size([4])
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch


def _histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    return x.new_empty(bins), x.new_empty(bins + 1)


def _histogram_bins_tensor(x, bins, *, weight=None, density=False):
    return x.new_empty(bins.shape[0] - 1), x.new_empty(bins.shape)


def _histogramdd_bin_edges(x, bin_ct, *, range=None, weight=None, density=False):  # noqa: A002
    return [x.new_empty(n + 1) for n in bin_ct]


def _histogramdd_from_bin_cts(x, bins, *, range=None, weight=None, density=False):  # noqa: A002
    return x.new_empty(list(bins))


def _histogramdd_from_bin_tensors(x, bins, *, weight=None, density=False):
    return x.new_empty([b.shape[0] - 1 for b in bins])


def _geqrf(a):
    m, n = a.shape[-2], a.shape[-1]
    return a.new_empty(a.shape), a.new_empty((*a.shape[:-2], torch.sym_min(m, n)))


META_KERNELS: dict[str, Callable[..., Any]] = {
    "geqrf": _geqrf,
    "histogram.bin_ct": _histogram_bin_ct,
    "histogram.bins_tensor": _histogram_bins_tensor,
    "_histogramdd_bin_edges": _histogramdd_bin_edges,
    "_histogramdd_from_bin_cts": _histogramdd_from_bin_cts,
    "_histogramdd_from_bin_tensors": _histogramdd_from_bin_tensors,
}


def _has_meta(name: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta")


@contextlib.contextmanager
def missing_meta_kernels() -> Iterator[list[str]]:
    """Registers the shape functions of :data:`META_KERNELS` torch lacks; yields their names."""
    missing = [name for name in META_KERNELS if not _has_meta(name)]
    if not missing:
        yield []
        return
    library = torch.library.Library("aten", "IMPL")
    try:
        for name in missing:
            library.impl(name, META_KERNELS[name], "Meta")
        yield missing
    finally:
        library._destroy()
