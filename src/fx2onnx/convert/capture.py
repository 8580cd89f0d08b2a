"""Captures a model with :func:`torch.export.export` (no decompositions).

Dynamic shapes may be given as in torch.export or with strings
(``{0: "batch"}``); the strings become ``Dim.DYNAMIC`` for torch and the
names are kept to label the ONNX dimensions.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Iterator

import sympy
import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

from ..frozen import MODEL_GUARDS, squeezes_a_kept_size_one
from ..patches.cache_check import CacheStateLostError, check_cache_round_trip
from ..patches.caches import carries_token_count
from .complex_values import check_no_complex
from .decompose import functionalize_and_decompose
from .errors import ExportError
from .gc_pace import fewer_collections
from .meta_kernels import capture_kernels
from .specializations import (
    data_dependent_line,
    dimensions_in,
    record_specializations,
    specialization_hint,
)


def _tensor_spec(spec: Any, tensor: torch.Tensor, where: str) -> tuple[Any, dict[int, str | None]]:
    """Converts the spec of one tensor; returns (spec for torch, {axis: user name})."""
    if spec is None:
        return None, {}
    if isinstance(spec, (list, tuple)):
        spec = {i: s for i, s in enumerate(spec) if s is not None}
    if not isinstance(spec, dict):
        raise ValueError(
            f"dynamic_shapes for input {where} must be a dict {{axis: name}} or a list per axis, "
            f"got {spec!r}."
        )
    converted: dict[int, Any] = {}
    names: dict[int, str | None] = {}
    for axis, dim in spec.items():
        if not isinstance(axis, int) or not (-tensor.dim() <= axis < tensor.dim()):
            raise ValueError(
                f"dynamic_shapes for input {where}: axis {axis!r} does not exist, the tensor has "
                f"shape {tuple(tensor.shape)}. Use an axis in [0, {tensor.dim() - 1}]."
            )
        axis = axis % tensor.dim()
        if isinstance(dim, str):
            converted[axis] = Dim.DYNAMIC
            names[axis] = dim
        else:
            converted[axis] = dim
            name = getattr(dim, "__name__", None)
            names[axis] = name if isinstance(name, str) and not name.startswith("_") else None
    return converted, names


def _walk(value: Any, spec: Any, where: str, names: dict[int, dict[int, str | None]]) -> Any:
    """Walks inputs and their dynamic shapes together, converting strings."""
    if isinstance(value, torch.Tensor):
        converted, axis_names = _tensor_spec(spec, value, where)
        names[id(value)] = axis_names
        return converted
    if isinstance(value, int) and not isinstance(value, bool) and spec is not None and spec is not Dim.STATIC:
        # a dynamic int becomes a SymInt input; torch takes no named Dim for ints
        return Dim.DYNAMIC
    if spec is None:
        if isinstance(value, (list, tuple)):
            # torch wants the structure of a list even when nothing in it is dynamic
            return type(value)(_walk(v, None, f"{where}[{i}]", names) for i, v in enumerate(value))
        return None
    if isinstance(value, (list, tuple)):
        if not isinstance(spec, (list, tuple)) or len(spec) != len(value):
            raise ValueError(
                f"dynamic_shapes for input {where} must be a list of {len(value)} specs like the "
                f"input, got {spec!r}."
            )
        return type(spec)(_walk(v, s, f"{where}[{i}]", names) for i, (v, s) in enumerate(zip(value, spec)))
    if isinstance(value, dict):
        if not isinstance(spec, dict):
            raise ValueError(f"dynamic_shapes for input {where} must be a dict like the input, got {spec!r}.")
        unknown = set(spec) - set(value)
        if unknown:
            raise ValueError(f"dynamic_shapes for input {where} names keys {sorted(unknown)} absent from the input.")
        return {k: _walk(value[k], spec.get(k), f"{where}[{k!r}]", names) for k in spec}
    if type(value) in pytree.SUPPORTED_NODES:
        children, _ = pytree.SUPPORTED_NODES[type(value)].flatten_fn(value)
        if isinstance(spec, (list, tuple)) and len(spec) == len(children) - 1:
            spec = _with_token_count_spec(value, spec)
        if isinstance(spec, (list, tuple)) and len(spec) == len(children):
            return type(spec)(_walk(v, s, f"{where}[{i}]", names) for i, (v, s) in enumerate(zip(children, spec)))
        if isinstance(spec, (list, tuple)):
            raise ValueError(_node_arity_message(value, spec, children, where))
        return spec
    return spec


def _with_token_count_spec(value: Any, spec: Any) -> Any:
    """The spec of a cache made only of sliding-window layers given for its keys and values only,
    as for any other decoder (``[{0: "batch", 2: "past"}] * (2 * layers)``), completed with the spec
    of its last tensor, ``tokens_seen`` (see :func:`fx2onnx.patches.caches.carries_token_count`):
    ``{1: "tokens_seen"}`` when a cache length is dynamic, None when none is. Any other spec is
    returned as it is."""

    if not carries_token_count(value):
        return spec

    def length_is_dynamic(item: Any) -> bool:
        if isinstance(item, dict):
            return any(axis in (2, -2) and dim is not None for axis, dim in item.items())
        if isinstance(item, (list, tuple)):
            return len(item) > 2 and item[2] is not None
        return False

    dynamic = any(length_is_dynamic(item) for item in spec)
    return type(spec)([*spec, {1: "tokens_seen"} if dynamic else None])


def _node_arity_message(value: Any, spec: Any, children: list[Any], where: str) -> str:
    """Why a list of dynamic shapes does not fit a pytree node (a cache), and the fix."""

    message = (
        f"dynamic_shapes for input {where} (a {type(value).__name__}) must be a list of {len(children)} "
        f"specs, one per tensor it flattens into, got {len(spec)}."
    )
    if carries_token_count(value):
        message += (
            f" This cache is made only of sliding-window layers: its last tensor, 'tokens_seen', is an "
            f"empty tensor of shape (0, tokens seen) carrying how many tokens came before (the layers keep "
            f"the last sliding_window - 1 only). Give one spec per key and value ({len(children) - 1}, "
            f"the spec of 'tokens_seen' is derived) or add {{1: 'tokens_seen'}} at the end of the list."
        )
    return message


def prepare_dynamic_shapes(
    model: Any, args: tuple, kwargs: dict, dynamic_shapes: Any
) -> tuple[Any, dict[int, dict[int, str | None]]]:
    """Checks ``dynamic_shapes`` against the inputs and converts strings into Dim.DYNAMIC.

    :return: the dynamic shapes for torch.export and ``{id(tensor): {axis: name}}``
    """
    names: dict[int, dict[int, str | None]] = {}
    if dynamic_shapes is None:
        return None, names
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        bound = inspect.signature(forward).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"The inputs do not match the signature of {type(model).__name__}.forward: {e}") from e
    combined: dict[str, Any] = {}
    var_keyword: tuple[str, list[str]] | None = None  # forward(**name): its name and the keys received
    for name, value in bound.arguments.items():
        kind = inspect.signature(forward).parameters[name].kind
        if kind == inspect.Parameter.VAR_KEYWORD:
            combined.update(value)
            var_keyword = (name, list(value))
        else:
            combined[name] = value
    if var_keyword and isinstance(dynamic_shapes, dict) and isinstance(dynamic_shapes.get(var_keyword[0]), dict) \
            and var_keyword[0] not in combined:
        # torch.export's nested form {"kwargs": {"x": ...}}: flattened like the inputs
        dynamic_shapes = {**{k: v for k, v in dynamic_shapes.items() if k != var_keyword[0]},
                          **dynamic_shapes[var_keyword[0]]}
    # flat, by input name: capture gives forward(**kwargs) an explicit signature (explicit_keywords)
    return _convert_specs(combined, dynamic_shapes, names), names


@contextlib.contextmanager
def explicit_keywords(model: torch.nn.Module, args: tuple, kwargs: dict) -> Iterator[None]:
    """Gives ``model.forward(..., **kwargs)`` a signature naming the keyword inputs received, while
    torch.export runs. torch.export cannot apply dynamic shapes to the entries of ``**kwargs``
    (``AssertionError: Must provide a tree_name``); with named parameters it can, the dynamic
    shapes being given by input name like for any other forward."""
    forward = model.forward
    signature = inspect.signature(forward)
    params = list(signature.parameters.values())
    var = [p for p in params if p.kind == inspect.Parameter.VAR_KEYWORD]
    extra = [k for k in kwargs if k not in signature.parameters]
    if not var or not extra:
        yield
        return
    named = [p for p in params if p.kind != inspect.Parameter.VAR_KEYWORD]
    named += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in extra]

    def forward_with_names(*a: Any, **kw: Any) -> Any:
        return forward(*a, **kw)

    forward_with_names.__signature__ = signature.replace(parameters=named)  # type: ignore[attr-defined]
    had_attribute = "forward" in model.__dict__
    model.forward = forward_with_names  # type: ignore[method-assign]
    try:
        yield
    finally:
        if had_attribute:
            model.forward = forward  # type: ignore[method-assign]
        else:
            del model.forward


def _convert_specs(combined: dict[str, Any], dynamic_shapes: Any, names: dict[int, dict[int, str | None]]) -> Any:
    """The specs of ``dynamic_shapes`` (a dict by input name or a sequence in the order of
    ``combined``) with strings replaced by Dim.DYNAMIC, checked against the inputs."""
    if isinstance(dynamic_shapes, dict):
        unknown = set(dynamic_shapes) - set(combined)
        if unknown:
            raise ValueError(
                f"dynamic_shapes names {sorted(unknown)} but the model received inputs "
                f"{list(combined)}. Use the argument names of forward, or a tuple in the order of the inputs."
            )
        converted = {k: _walk(combined[k], spec, k, names) for k, spec in dynamic_shapes.items()}
    elif isinstance(dynamic_shapes, (list, tuple)):
        values = list(combined.values())
        if len(dynamic_shapes) != len(values):
            raise ValueError(
                f"dynamic_shapes has {len(dynamic_shapes)} entries but the model received "
                f"{len(values)} inputs {list(combined)}."
            )
        converted = type(dynamic_shapes)(
            _walk(v, s, k, names) for (k, v), s in zip(combined.items(), dynamic_shapes)
        )
    else:
        raise ValueError(f"dynamic_shapes must be a dict, a tuple or a list, got {type(dynamic_shapes).__name__}.")
    return converted


def symbol_names(
    ep: torch.export.ExportedProgram, args: tuple, kwargs: dict, axis_names: dict[int, dict[int, str | None]]
) -> dict[sympy.Symbol, str]:
    """Maps torch's symbols to the names the user gave, or ``<input>_dim<axis>``."""
    leaves, _ = pytree.tree_flatten((tuple(args), dict(kwargs)))
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    user = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    by_name = {p.name: p for p in placeholders}
    mapping: dict[sympy.Symbol, str] = {}
    fallback: dict[sympy.Symbol, str] = {}
    sizes: dict[str, int] = {}
    for leaf, ph_name in zip(leaves, user):
        ph = by_name.get(ph_name)
        val = ph.meta.get("val") if ph is not None else None
        if not isinstance(val, torch.Tensor) or not isinstance(leaf, torch.Tensor):
            if isinstance(val, torch.SymInt) and isinstance(val.node.expr, sympy.Symbol):
                fallback.setdefault(val.node.expr, ph_name)
            continue
        given = axis_names.get(id(leaf), {})
        for axis, d in enumerate(val.shape):
            if isinstance(d, torch.SymInt) and isinstance(d.node.expr, sympy.Symbol):
                sym = d.node.expr
                if given.get(axis):
                    if sym not in mapping:
                        mapping[sym] = _distinct_name(given[axis], int(leaf.shape[axis]), sizes)
                else:
                    fallback.setdefault(sym, f"{ph_name}_dim{axis}")
    for sym, name in fallback.items():
        mapping.setdefault(sym, name)
    return mapping


def _distinct_name(name: str, size: int, sizes: dict[str, int]) -> str:
    """The user's name for a dimension, suffixed when torch kept apart two dimensions given
    the same name whose example sizes differ (the sliding and the full layers of a cache):
    one ONNX name for both would declare them equal."""
    candidate, k = name, 1
    while candidate in sizes and sizes[candidate] != size:
        candidate, k = f"{name}_{k}", k + 1
    sizes.setdefault(candidate, size)
    return candidate


def _first_lines(e: BaseException, n: int = 4) -> str:
    """The first non-empty lines of an exception message (torch's messages can be very long)."""
    lines = [line.rstrip() for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    return "\n".join(lines[:n]) + ("\n..." if len(lines) > n else "")


def _dimension_label(name: str, axis: int, model: Any, args: tuple, kwargs: dict, axis_names: dict) -> str:
    """Input ``x``, axis 0 -> ``'batch' (x, axis 0)`` with the name the user gave, else ``x, axis 0``."""
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    except TypeError:
        bound = {}
    value = bound.get(name, kwargs.get(name))
    user = axis_names.get(id(value), {}).get(axis) if isinstance(value, torch.Tensor) else None
    return f"{user!r} ({name}, axis {axis})" if user else f"{name}, axis {axis}"


def _specialized_dims_hint(message: str, model: Any, args: tuple, kwargs: dict, axis_names: dict) -> str:
    """Names the user's dimensions torch specialized (``L['x'].size()[1]`` or
    ``inputs['x'].shape[1]`` -> ``'seq'``)."""
    if "specialized" not in message and "static shape" not in message:
        return ""
    found = []
    for name, axis in dimensions_in(message):
        label = _dimension_label(name, axis, model, args, kwargs, axis_names)
        if label not in found:
            found.append(label)
    if not found:
        return ""
    return (
        f"The model's code makes dimension(s) {', '.join(found)} static. Remove them from "
        f"dynamic_shapes, or use torch.export.Dim.AUTO to let torch decide.\n"
    )


class _DropUnmatchedSymbolNotice:
    """A logging filter: torch's notice that it found no user variable for an unbacked symbol."""

    def filter(self, record: Any) -> bool:
        return not str(record.msg).startswith("Unable to find user code corresponding to")


@contextlib.contextmanager
def quiet_failed_attempts() -> Iterator[None]:
    """Silences what torch.export prints on stderr when it fails: the graph traced so far, and a notice
    about unbacked symbols. fx2onnx may capture again another way (the plain capture after the
    size-oblivious one, the ``if`` statements rewritten) and reports a failure in its own error."""
    import logging

    import torch.export._trace as trace

    shadowed = "print" in vars(trace)
    trace.print = lambda *args, **kwargs: None  # its only print: the partial graph of a failure
    notice = _DropUnmatchedSymbolNotice()
    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)
        if not shadowed:
            del trace.print


def _export_size_oblivious_first(model: Any, args: tuple, kwargs: dict, ds: Any, strict: bool) -> tuple[Any, bool]:
    """torch.export.export with size-oblivious input sizes, as torch.onnx.export captures, then
    without them if that fails; returns the program and whether its sizes are size-oblivious.

    Size-oblivious sizes (``backed_size_oblivious``) are reasoned about for every value the
    dimension may take (0 and 1 included) instead of the example's: the symbolic expressions
    stay small where padding to a window multiplies them (timm's Swin at a dynamic image size:
    38 s instead of 303 s), sympy is not asked to solve guards it cannot (timm's CPUBone:
    ``H // 16 % 2``), and an example of size 1 does not make its dimension static. Where a
    decision on such a size cannot be made for every value, torch takes the example's value
    and records the condition, which the export reports as it does any other. One decision is
    made for every size regardless of the example: ``squeeze`` keeps a dynamic axis; when the
    example's size there is 1 the program would be wrong on its own example, and the plain
    capture runs instead (the dimension becomes static 1, or torch says why it cannot).

    The decompositions which follow must trace with the same setting (:func:`capture`): traced
    without it, they rebuild the large expressions and record conditions of their own, layout
    decisions the captured program did not make (Swin: 20 s instead of minutes, no false condition).
    """
    try:
        with torch.fx.experimental._config.patch(backed_size_oblivious=True):
            ep = torch.export.export(model, args, kwargs=kwargs, dynamic_shapes=ds, strict=strict)
        if not squeezes_a_kept_size_one(ep):
            return ep, True
        # a squeeze kept an axis of size 1 in the example: wrong on its own example, the plain capture
        # takes the example's 1 (a static dimension, or torch's error naming it)
    except Exception:  # noqa: BLE001 - the plain capture says what fails, with its own message
        if not _has_dynamic_dimension(ds):
            raise
    return torch.export.export(model, args, kwargs=kwargs, dynamic_shapes=ds, strict=strict), False


def _has_dynamic_dimension(ds: Any) -> bool:
    """Tells if the dynamic shapes given to torch.export name any dimension."""
    from torch.utils import _pytree as pytree

    leaves = pytree.tree_leaves(ds, is_leaf=lambda v: isinstance(v, dict) and all(isinstance(k, int) for k in v))
    return any(leaf is not None and not (isinstance(leaf, dict) and not leaf) for leaf in leaves)


def capture(
    model: Any,
    args: tuple,
    kwargs: dict,
    dynamic_shapes: Any,
    strict: bool,
    *,
    dispatcher: Any = None,
    decompose: bool = True,
    verbose: int = 0,
) -> tuple[torch.export.ExportedProgram, dict[sympy.Symbol, str]]:
    """Runs torch.export.export and, when needed, functionalizes the graph.

    Operators with a converter (built-in or in ``dispatcher``) are kept as they
    are; when ``decompose`` is True, the others are decomposed with torch's
    decompositions (see :mod:`fx2onnx.convert.decompose`).
    """
    oblivious = False  # a program given by the user is decomposed as torch.export would
    if isinstance(model, torch.export.ExportedProgram):
        ep = model
        axis_names: dict = {}
    else:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"to_onnx expects a torch.nn.Module or a torch.export.ExportedProgram, got "
                f"{type(model).__name__}. Wrap a function in a module: "
                f"class M(torch.nn.Module): def forward(self, *args): return f(*args)"
            )
        args, kwargs = without_views(args, kwargs)
        ds, axis_names = prepare_dynamic_shapes(model, args, kwargs, dynamic_shapes)
        _check_caches(args, kwargs)
        try:
            with (
                fewer_collections(),
                capture_kernels(),
                quiet_failed_attempts(),
                record_specializations() as specialized,
                explicit_keywords(model, args, kwargs),
            ):
                ep, oblivious = _export_size_oblivious_first(model, tuple(args), dict(kwargs), ds, strict)
        except Exception as e:
            first = _first_lines(e)
            hint = _specialized_dims_hint(str(e), model, args, kwargs, axis_names)
            scripted: list[str] = []
            for name, module in model.named_modules():
                if isinstance(module, torch.jit.ScriptModule) and not any(name.startswith(f"{s}.") for s in scripted):
                    scripted.append(name)
            if scripted:
                hint += (
                    f"Submodule(s) {', '.join(repr(n) for n in scripted[:5])} are TorchScript modules (torch.jit.script "
                    f"or torch.jit.trace): torch.export does not run TorchScript. Export the Python modules before "
                    f"scripting them.\n"
                )
            line = data_dependent_line(e)
            if line:
                hint += (
                    f"The model reads a Python value from a tensor's data at {line}: an `if` on a tensor, int(), "
                    f"float(), .item() or .tolist() there cannot be captured. Keep the value a tensor (torch.where, "
                    f"tensor arithmetic) or use torch.cond (`if` statements of forward methods are rewritten into "
                    f"torch.cond by to_onnx itself unless patches=False).\n"
                )
            if hint:
                hint += specialization_hint(
                    specialized, str(e), lambda name, axis: _dimension_label(name, axis, model, args, kwargs, axis_names)
                )
            raise ExportError(
                f"Step 'capture' failed: torch.export.export(strict={strict}) could not capture "
                f"{type(model).__name__}: {type(e).__name__}: {first}\n{hint}"
                f"This happens before any ONNX conversion. Common fixes: for transformers models "
                f"keep patches='auto' (the default) or wrap the export in "
                f"`with fx2onnx.torch_export_patches(patch_transformers=True):`; "
                f"rewrite data-dependent Python control flow with torch.cond; check the "
                f"dynamic_shapes. See the 'Frequent exceptions' page of the documentation."
            ) from e
    captured_guards = list(getattr(ep, "_guards_code", None) or [])
    try:
        with fewer_collections(), capture_kernels(), \
                torch.fx.experimental._config.patch(backed_size_oblivious=oblivious):
            # the program torch.export returned is ours to change; one given by the user is not
            ep, decomposed = functionalize_and_decompose(
                ep, dispatcher, decompose=decompose, verbose=verbose,
                in_place=not isinstance(model, torch.export.ExportedProgram),
            )
        if not decomposed:
            # re-traced, not decomposed: the same aten operators, whose re-derived shape checks (a view after
            # a crop, timm's Twins) are no branch of the model; a decomposition may branch: its guards are kept
            setattr(ep, MODEL_GUARDS, captured_guards)
    except ExportError:
        raise
    except Exception as e:
        raise ExportError(
            f"Step 'functionalization' failed (ExportedProgram.run_decompositions): "
            f"{type(e).__name__}: {_first_lines(e)}"
        ) from e
    check_no_complex(ep, dispatcher)
    names = symbol_names(ep, tuple(args), dict(kwargs), axis_names) if not isinstance(model, torch.export.ExportedProgram) else {}
    if not names:
        names = _names_from_placeholders(ep)
    return ep, names


def without_views(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The inputs with every tensor which is a view of another (``ids[:, :3]``, ``x.t()``) replaced by
    a copy owning its memory (same values, same strides when they are dense).

    torch.export gives the base of a view input its own symbolic sizes and may guard on them
    (``L['input_ids']._base.size()[1] != L['input_ids'].size()[1]``, seen with the decoders taking
    a cache); the exported program has no base and the check of that guard fails, in
    ``run_decompositions`` or at capture (``'NoneType' object has no attribute 'size'``).
    The values are the same and an ONNX model has no strides nor aliasing: the copy changes nothing
    in the exported graph. The inputs are returned unchanged (the same objects) without a view.
    """
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    if not any(isinstance(leaf, torch.Tensor) and leaf._base is not None for leaf in leaves):
        return args, kwargs
    copies = [
        leaf.clone(memory_format=torch.preserve_format)
        if isinstance(leaf, torch.Tensor) and leaf._base is not None
        else leaf
        for leaf in leaves
    ]
    new_args, new_kwargs = pytree.tree_unflatten(copies, spec)
    return tuple(new_args), dict(new_kwargs)


def _check_caches(args: tuple, kwargs: dict) -> None:
    """A cache losing tensors when flattened (pytree) fails before torch.export, naming them."""

    inputs = {f"args[{i}]": a for i, a in enumerate(args)}
    inputs.update(kwargs)
    try:
        check_cache_round_trip(inputs)
    except CacheStateLostError as e:
        raise ExportError(f"Step 'capture' failed: {e}") from e


def _names_from_placeholders(ep: torch.export.ExportedProgram) -> dict[sympy.Symbol, str]:
    names: dict[sympy.Symbol, str] = {}
    user = {s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"}
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name in user and isinstance(n.meta.get("val"), torch.Tensor):
            for axis, d in enumerate(n.meta["val"].shape):
                if isinstance(d, torch.SymInt) and isinstance(d.node.expr, sympy.Symbol):
                    names.setdefault(d.node.expr, f"{n.name}_dim{axis}")
    return names
