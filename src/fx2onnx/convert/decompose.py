"""Targeted decompositions: only the operators without a converter are decomposed.

:func:`torch.export.export` keeps high-level operators (``diag_embed``,
``hardshrink``...). Those with a converter (built-in or given through
:class:`fx2onnx.Dispatcher`) are converted as they are. The others are
replaced by torch's own decomposition (:func:`torch.export.default_decompositions`)
restricted to them, a few rounds while the decomposition brings new operators
without a converter. Operators with a converter are protected during these
rounds: torch would otherwise expand some of them while re-tracing the graph.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Iterable, Iterator

import torch

from . import ops as _builtin_converters  # noqa: F401 (registers the built-in converters)
from . import registry
from .errors import ExportError, target_name
from .local_functionalize import functionalize_intermediates

#: the number of decomposition rounds before giving up (each one re-traces the model)
MAX_ROUNDS = 4

# python kernels torch runs while re-tracing a graph, expanding an operator on the fly
_EXPANDING_KEYS = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)


def has_converter(target: Any, dispatcher: Any = None) -> bool:
    """Tells if ``target`` has a converter in ``dispatcher`` or in the built-in registry."""
    if dispatcher is not None and dispatcher.find(target) is not None:
        return True
    return registry.lookup(target) is not None


def call_targets(ep: torch.export.ExportedProgram) -> set[Any]:
    """Every ``call_function`` target of the program, subgraphs included."""
    targets: set[Any] = set()
    for gm in ep.graph_module.modules():
        if isinstance(gm, torch.fx.GraphModule):
            targets.update(n.target for n in gm.graph.nodes if n.op == "call_function")
    return targets


def unsupported_ops(ep: torch.export.ExportedProgram, dispatcher: Any = None) -> set[torch._ops.OpOverload]:
    """The operators of the program without any converter."""
    return {
        t for t in call_targets(ep) if isinstance(t, torch._ops.OpOverload) and not has_converter(t, dispatcher)
    }


def decompositions_for(ops: Iterable[torch._ops.OpOverload]) -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """torch's decompositions of ``ops``, only those torch knows."""
    ops = list(ops)
    if not ops:
        return {}
    table = torch.export.default_decompositions()
    # a shape function installed for the capture (meta_kernels.recurrent_shape_kernels) stands for its operator's
    # composite kernel meanwhile: the decomposition is the kernel it replaces
    return {op: getattr(table[op], "decomposition", table[op]) for op in ops if op in table}


def _preserved_by_torch() -> set[Any]:
    """The composite operators ``run_decompositions`` keeps when its table leaves them out."""
    from torch._export.utils import _collect_all_valid_cia_ops

    return set(_collect_all_valid_cia_ops())


@contextlib.contextmanager
def preserving(ops: Iterable[Any]) -> Iterator[None]:
    """Keeps ``ops`` as they are while torch re-traces a graph (always restored).

    Some operators have a python kernel expanding them during any re-tracing
    (``hardshrink`` becomes ``abs``, ``le``, ``where``); it is hidden meanwhile.
    The composite kernel of an operator torch preserves itself (``upsample_linear1d.vec``)
    stays: torch computes the operator's output sizes with it, where the C++ kernel
    it would fall back to refuses symbolic sizes.
    """
    hidden: list[tuple[Any, Any, Any]] = []
    kept_by_torch = _preserved_by_torch()
    try:
        for op in ops:
            if not isinstance(op, torch._ops.OpOverload):
                continue
            for key in _EXPANDING_KEYS:
                if key == torch._C.DispatchKey.CompositeImplicitAutograd and op in kept_by_torch:
                    continue
                if key in op.py_kernels:
                    hidden.append((op, key, op.py_kernels.pop(key)))
                    op._dispatch_cache.clear()
        yield
    finally:
        for op, key, kernel in hidden:
            op.py_kernels[key] = kernel
            op._dispatch_cache.clear()


def _is_mutating(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is not None and schema.is_mutable


def functionalize_and_decompose(
    ep: torch.export.ExportedProgram,
    dispatcher: Any = None,
    decompose: bool = True,
    verbose: int = 0,
    in_place: bool = False,
) -> tuple[torch.export.ExportedProgram, list[str]]:
    """Functionalizes ``ep`` when needed and decomposes the operators without a converter.

    With ``in_place``, the in-place operators on intermediate tensors are first made
    out-of-place in ``ep``'s own graph (:mod:`fx2onnx.convert.local_functionalize`).
    The program is re-traced (:meth:`torch.export.ExportedProgram.run_decompositions`)
    only when it still contains an operator mutating its inputs or an operator without a
    converter. Operators with a converter are never decomposed.

    :return: the program and the names of the decomposed operators
    """
    if in_place:
        replaced = functionalize_intermediates(ep)
        if verbose and replaced:
            print(f"[to_onnx] made out-of-place without re-tracing: {', '.join(replaced)}")
    decomposed: list[str] = []
    tried: set[Any] = set()
    for round_index in range(MAX_ROUNDS):
        targets = call_targets(ep)
        unsupported = unsupported_ops(ep, dispatcher)
        table = decompositions_for(unsupported - tried) if decompose else {}
        if round_index == 0:
            needed = bool(table) or any(_is_mutating(t) or not has_converter(t, dispatcher) for t in targets)
        else:
            needed = bool(table)
        if not needed:
            break
        names = sorted(target_name(op) for op in table)
        try:
            with preserving(targets - unsupported), warnings.catch_warnings():
                # torch's own deep copy of the module call graph trips its pytree deprecation (torch's code,
                # nothing the user wrote or can change)
                warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
                ep = ep.run_decompositions(table)
        except Exception as e:
            if not table:
                raise
            raise ExportError(
                f"Decomposing the operators without a converter ({', '.join(names)}) failed: "
                f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}\n"
                f"Give them a converter through fx2onnx.Dispatcher, or call to_onnx(..., "
                f"decompose=False) to get the UnsupportedOpError naming the node instead."
            ) from e
        tried.update(table)
        decomposed.extend(names)
        if verbose and names:
            print(f"[to_onnx] decomposed (no converter): {', '.join(names)}")
    return ep, decomposed
