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
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .packed_sequences import packed_sequence_capture


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


# Recurrent layers. ``aten.lstm.input`` / ``gru.input`` / ``rnn_tanh.input`` / ``rnn_relu.input`` are
# composite: torch computes their output shapes by running their python decomposition, a Python loop over
# the time steps (``for step in input.unbind(0)``) which turns a symbolic sequence length into the
# example's. The shape function below gives the same shapes without the loop, so the operator stays in
# the graph with a symbolic length and is converted to ONNX's LSTM / GRU / RNN, whose sequence is dynamic.
RECURRENT_OPERATORS = ("lstm.input", "gru.input", "rnn_tanh.input", "rnn_relu.input")


def _recurrent_shapes(original: Callable[..., Any]) -> Callable[..., Any]:
    from torch._subclasses.fake_tensor import FakeTensor

    def kernel(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        if not isinstance(x, FakeTensor):  # real tensors (a constant folded while tracing) run the real loop
            return original(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
        directions = 2 if bidirectional else 1
        # [seq, batch] or [batch, seq], then directions x hidden (the projection's size when proj_size > 0)
        output = x.new_empty((*x.shape[:2], directions * states[0].shape[-1]))
        return (output, *[s.new_empty(s.shape) for s in states])

    # torch.export.default_decompositions() reads a composite operator's kernel: a table built during a
    # capture must decompose with torch's loop, not with these empty outputs (see decompose.decompositions_for)
    kernel.decomposition = original
    return kernel


@contextlib.contextmanager
def recurrent_shape_kernels() -> Iterator[list[str]]:
    """Replaces, for a capture, the looping shape computation of torch's recurrent operators by
    :func:`_recurrent_shapes`; restores torch's kernels afterwards. Yields the operators patched.

    >>> import torch
    >>> lstm = torch.nn.LSTM(8, 16, batch_first=True)
    >>> with recurrent_shape_kernels():
    ...     ep = torch.export.export(lstm, (torch.randn(2, 5, 8),), dynamic_shapes=({1: torch.export.Dim("seq")},))
    >>> ep.module()(torch.randn(2, 9, 8))[0].shape  # the sequence length stayed symbolic
    torch.Size([2, 9, 16])
    """
    keys = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)
    saved: list[tuple[Any, dict]] = []
    try:
        for name in RECURRENT_OPERATORS:
            packet, overload = name.split(".")
            op = getattr(getattr(torch.ops.aten, packet), overload)
            original = op.py_kernels.get(torch._C.DispatchKey.CompositeImplicitAutograd)
            if original is None or isinstance(original, torch._C.DispatchKey):
                continue  # torch changed how it registers them: leave them alone
            saved.append((op, {k: op.py_kernels.get(k) for k in keys}))
            kernel = _recurrent_shapes(original)
            for key in keys:
                op.py_kernels[key] = kernel
            op._dispatch_cache.clear()
        with warnings.catch_warnings():
            # nn.RNNBase refreshes its list ``_flat_weights`` during the capture, which torch reports as
            # tensors "assigned during export"; they are the module's parameters, lifted as such
            warnings.filterwarnings("ignore", message=r"The tensor attributes .*_flat_weights\[")
            yield [str(op) for op, _ in saved]
    finally:
        for op, kernels in saved:
            for key, kernel in kernels.items():
                if kernel is None:
                    op.py_kernels.pop(key, None)
                else:
                    op.py_kernels[key] = kernel
            op._dispatch_cache.clear()


@contextlib.contextmanager
def capture_kernels() -> Iterator[None]:
    """Every shape function of this module, for the duration of a capture or a decomposition, and
    packed sequences kept padded (:func:`fx2onnx.convert.packed_sequences.packed_sequence_capture`)."""

    with missing_meta_kernels(), recurrent_shape_kernels(), packed_sequence_capture():
        yield
