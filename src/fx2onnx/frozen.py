"""Inputs :func:`torch.export.export` froze: recorded in the ONNX model, reported, checked.

torch.export turns a Python scalar argument (``int``, ``float``, ``bool``,
``str``) into a constant of the graph and a list argument into one input per
element: the ONNX model then computes with the exported value whatever is given
later, and takes lists of that length only. :func:`fx2onnx.to_onnx` records them
in the model's metadata (key :data:`METADATA_KEY`, a JSON dictionary
``{name: {"kind": "int", "value": 3}}`` or ``{name: {"kind": "list", "length":
3, "inputs": [onnx input names]}}``) and warns with :class:`FrozenInputWarning`;
:func:`fx2onnx.validate` refuses inputs which differ with :class:`FrozenInputError`.
A constant the user declared in ``dynamic_shapes`` (``Dim.STATIC``, or ``None`` for a
``bool`` or a ``str``: ``use_cache=False``, ``return_dict=False``) is recorded with
``"declared_static": true`` and checked the same way, but not warned about.

An ``int`` stays dynamic when ``dynamic_shapes`` marks it (``Dim.DYNAMIC`` or a
name): it becomes an int64 scalar input of the ONNX model. If the model's code
uses it as a Python int all the same (``x[..., i] = y``), torch.export
specializes it to its example value: it is recorded as frozen too, with
``"declared_dynamic": true`` (see :func:`specialized_int_inputs`).

A transformers cache made only of sliding-window layers freezes nothing: its
flattening carries the number of tokens seen (see :mod:`fx2onnx.patches.caches`).

A dynamic dimension torch.export bounded above (a Python branch on a size,
``if seq_len >= 4:``, not taken at export) holds one branch only: it is
recorded as ``{"kind": "dim_range", "min": 2, "max": 3, ...}`` under the key
``"<input>.shape[<axis>]"`` (see :func:`narrowed_dimensions`), warned about
unless the bound is the size of a weight (a table of positions), and validate
refuses sizes outside the range. Dimensions declared independent (``Dim.DYNAMIC``,
different names) to which torch.export gave one symbol (the code compared them,
``if height == width:``) are recorded as ``{"kind": "dim_equal", ...}`` (see
:func:`merged_dimensions`), warned about, and validate refuses different sizes.
Other conditions on sizes torch.export assumed and no range expresses, a modulo
(``x.shape[2] % 4 == 0``: padding taken or not), two dimensions differing or a computed
size compared with a constant (``(h // 14) * (w // 14) == 16``: a number of patches), are
recorded as ``{"kind": "size_condition", ...}`` (see :func:`size_conditions`),
warned about, and validate evaluates them on its inputs.

.. code-block:: python

    import torch, fx2onnx

    class Scale(torch.nn.Module):
        def forward(self, x, n: int):
            return x * n

    x = torch.randn(2, 3)
    frozen = fx2onnx.to_onnx(Scale(), (x, 3))  # FrozenInputWarning: 'n' frozen to 3
    dynamic = fx2onnx.to_onnx(Scale(), (x, 3), dynamic_shapes={"x": {0: "batch"}, "n": "n"})
"""

from __future__ import annotations

import ast
import inspect
import json
import operator
import os
import re
import warnings
from typing import Any, Iterator, Sequence

import torch

from .flatten import flatten_inputs

#: key of the ONNX model's metadata_props holding the frozen inputs (JSON)
METADATA_KEY = "fx2onnx.frozen_inputs"

_SCALARS = (bool, int, float, str)


#: attribute of a re-traced program holding the guards of its capture (:func:`fx2onnx.convert.capture.capture`,
#: when no operator was decomposed): the conditions the model's code branched on, without the shape checks
#: the re-tracing re-derives
MODEL_GUARDS = "_fx2onnx_model_guards"


class FrozenInputWarning(UserWarning):
    """torch.export froze an input (a Python scalar's value, a list's length) at export."""


class FrozenInputError(ValueError):
    """An input differs from what the ONNX model froze at export."""


def named_inputs(model: Any, args: Sequence[Any], kwargs: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """``(name, value)`` of the inputs in the order exporters flatten them:
    positional arguments named after the signature of ``forward``, then the keywords."""
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        params = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names: list[tuple[str, Any]] = []
    for i, value in enumerate(args):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
            names.append((params[i].name, value))
        else:
            names.append((f"args[{i}]", value))
    names.extend((kwargs or {}).items())
    return names


def _user_inputs(ep: torch.export.ExportedProgram) -> Iterator[tuple[int, Any, Any]]:
    """``(position, input spec, placeholder node or None)`` of the user inputs which are not constants,
    the position counting them in order (tensors and dynamic ints: the ONNX inputs)."""
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    position = 0
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name != "USER_INPUT" or isinstance(spec.arg, torch.export.graph_signature.ConstantArgument):
            continue
        yield position, spec, placeholders.get(spec.arg.name)
        position += 1


def _symbolic_axes(node: Any) -> Iterator[tuple[int, Any]]:
    """``(axis, sympy expression)`` of the symbolic dimensions of a placeholder's tensor."""
    val = node.meta.get("val") if node is not None else None
    if isinstance(val, torch.Tensor):
        for axis, size in enumerate(val.shape):
            if isinstance(size, torch.SymInt):
                yield axis, size.node.expr


def _argument_tensors(
    model: Any, args: Sequence[Any], kwargs: dict[str, Any] | None, dynamic_shapes: Any
) -> dict[str, tuple[int, torch.Tensor, Any]]:
    """The tensors given directly as arguments: ``{name: (position, tensor, its dynamic shape)}``,
    the position as :func:`_user_inputs` counts."""
    tensors = {}
    position = 0
    for index, (name, value) in enumerate(named_inputs(model, args, kwargs)):
        spec = _spec_of(dynamic_shapes, index, name)
        if isinstance(value, torch.Tensor):
            tensors[name] = (position, value, spec)
        position += _count_inputs(value, spec)
    return tensors


def specialized_int_inputs(ep: torch.export.ExportedProgram) -> dict[int, int]:
    """The int inputs marked dynamic which torch.export specialized all the same.

    Such an input stays a placeholder (an ONNX input) but its SymInt became a
    constant, or its range a single value: the graph computes with that value.

    :return: ``{position: value}``, the position counting the user inputs which are
        not constants (tensors and dynamic ints, the order :func:`describe_frozen_inputs` counts)
    """
    found: dict[int, int] = {}
    for position, spec, node in _user_inputs(ep):
        if isinstance(spec.arg, torch.export.graph_signature.SymIntArgument) and node is not None:
            value = _fixed_int(node.meta.get("val"), ep.range_constraints)
            if value is not None:
                found[position] = value
    return found


def _fixed_int(val: Any, ranges: dict[Any, Any]) -> int | None:
    if isinstance(val, int) and not isinstance(val, bool):
        return val
    if not isinstance(val, torch.SymInt):
        return None
    expr = val.node.expr
    if expr.is_number:
        return int(expr)
    bounds = ranges.get(expr)
    if bounds is not None and bounds.lower == bounds.upper:
        return int(bounds.lower)
    return None


def narrowed_dimensions(ep: torch.export.ExportedProgram, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The dynamic dimensions to which torch.export gave an upper bound (a Python branch on a
    size, ``if seq_len >= 4:``, not taken at export): the graph holds one branch only.

    :param names: the ONNX input names, one per user input which is not a constant
    :return: ``{"<input>.shape[<axis>]": {"kind": "dim_range", "position": p, "axis": a,
        "min": lo, "max": hi, "weight_bound": b}}``, one entry per narrowed symbol; ``weight_bound``
        tells the bound is a size of a weight (a position table): checked but not warned
    """
    from torch.utils._sympy.numbers import int_oo

    # a bound equal to a size of a weight is a table's length (position embeddings): not warned
    weight_sizes = {int(d) for t in [*ep.state_dict.values(), *ep.constants.values()]
                    if isinstance(t, torch.Tensor) for d in t.shape}
    found: dict[str, dict[str, Any]] = {}
    seen: set[Any] = set()
    for position, _, node in _user_inputs(ep):
        for axis, expr in _symbolic_axes(node):
            bounds = ep.range_constraints.get(expr) if expr.is_Symbol else None
            if bounds is None or expr in seen or bounds.lower == bounds.upper:
                continue
            upper = None if bounds.upper in (int_oo, float("inf")) or not bounds.upper.is_finite else int(bounds.upper)
            if upper is None:  # a raised lower bound mostly comes from a relation (total = past + seq)
                continue
            seen.add(expr)
            found[f"{_input_name(names, position)}.shape[{axis}]"] = {
                "kind": "dim_range", "position": position, "axis": axis, "min": int(bounds.lower), "max": upper,
                "weight_bound": upper in weight_sizes,
            }
    return found


#: operators whose result depends on whether a dimension is 1 (the axis is removed or kept)
_SQUEEZES = frozenset(
    getattr(packet, overload)
    for packet in (torch.ops.aten.squeeze, torch.ops.aten.squeeze_copy)
    for overload in ("default", "dim", "dims")
)
_SQUEEZE_REASON = "squeeze kept the axis"


def size_one_assumptions(ep: torch.export.ExportedProgram, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The dynamic dimensions a ``squeeze`` kept, assuming they are never 1.

    ``x.squeeze(0)`` removes the axis only when it is 1; torch.export decides with the example
    (or for every size, size-oblivious) and the graph keeps the axis: on a size of 1 the ONNX
    model would return one axis too many. Such a dimension is recorded as narrowed to
    ``[2, inf]``, checked by :func:`check_frozen_inputs` and warned about.
    """
    symbols: dict[Any, tuple[int, int]] = {}
    for position, _, node in _user_inputs(ep):
        for axis, expr in _symbolic_axes(node):
            symbols.setdefault(expr, (position, axis))
    found: dict[str, dict[str, Any]] = {}
    for size in _sizes_kept_by_squeezes(ep):
        if not isinstance(size, torch.SymInt) or size.node.expr not in symbols:
            continue
        position, input_axis = symbols[size.node.expr]
        found[f"{_input_name(names, position)}.shape[{input_axis}]"] = {
            "kind": "dim_range", "position": position, "axis": input_axis, "min": 2, "max": None,
            "weight_bound": False, "reason": _SQUEEZE_REASON,
        }
    return found


def _sizes_kept_by_squeezes(ep: torch.export.ExportedProgram) -> Iterator[Any]:
    """The sizes of the axes a ``squeeze`` was asked to remove and kept (the axis was not 1 for the capture)."""
    for gm in ep.graph_module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        for node in gm.graph.nodes:
            if node.op != "call_function" or node.target not in _SQUEEZES:
                continue
            source, result = node.args[0].meta.get("val"), node.meta.get("val")
            if not isinstance(source, torch.Tensor) or not isinstance(result, torch.Tensor):
                continue
            if source.dim() != result.dim():
                continue  # an axis was removed: its size was 1 for every input the graph accepts
            axes = node.args[1] if len(node.args) > 1 else range(source.dim())
            for axis in [axes] if isinstance(axes, int) else axes:
                yield source.shape[axis]


def squeezes_a_kept_size_one(ep: torch.export.ExportedProgram) -> bool:
    """Tells if a ``squeeze`` kept an axis whose size is 1 in the example the program was captured with.

    A size-oblivious capture reasons for every size, so ``x.squeeze()`` keeps a dynamic axis even when the
    example's size is 1: the program is then wrong on its own example (one axis too many).
    """
    return any(isinstance(d, torch.SymInt) and d.node.hint == 1 for d in _sizes_kept_by_squeezes(ep))


def _input_name(names: Sequence[str], position: int) -> str:
    return names[position] if position < len(names) else f"input{position}"


def _axis_identity(spec: Any, axis: int) -> Any:
    """How the user declared one axis: a name (shared on purpose), a fresh object for ``Dim.DYNAMIC`` /
    ``Dim.AUTO`` (independent of every other axis), None when unknown."""
    axis_spec = spec.get(axis) if isinstance(spec, dict) else (
        spec[axis] if isinstance(spec, (list, tuple)) and axis < len(spec) else None)
    if isinstance(axis_spec, str):
        return axis_spec
    if axis_spec in (torch.export.Dim.DYNAMIC, torch.export.Dim.AUTO):
        return object()
    return getattr(axis_spec, "__name__", None)


def merged_dimensions(
    ep: torch.export.ExportedProgram, names: Sequence[str], model: Any, args: Sequence[Any],
    kwargs: dict[str, Any] | None, dynamic_shapes: Any,
) -> dict[str, dict[str, Any]]:
    """Dynamic dimensions declared independent (``Dim.DYNAMIC``, or different names) which torch.export
    gave one symbol: the model's code compared them (``if height == width:``) and the graph holds the
    branch taken for equal sizes. Only the tensors given directly as arguments are looked at.

    :return: ``{"<a>.shape[i] == <b>.shape[j]": {"kind": "dim_equal", "dims": [[position, axis], ...],
        "paths": [...]}}``
    """
    declared = {position: spec for position, _, spec in _argument_tensors(model, args, kwargs, dynamic_shapes).values()}
    groups: dict[Any, list[tuple[int, int, Any]]] = {}
    for position, _, node in _user_inputs(ep):
        if position in declared:
            for axis, expr in _symbolic_axes(node):
                if expr.is_Symbol:
                    groups.setdefault(expr, []).append((position, axis, _axis_identity(declared[position], axis)))
    found: dict[str, dict[str, Any]] = {}
    for dims in groups.values():
        identities = [identity for _, _, identity in dims if identity is not None]
        if len(identities) < 2 or len({id(i) if not isinstance(i, str) else i for i in identities}) < 2:
            continue
        paths = [f"{_input_name(names, p)}.shape[{a}]" for p, a, _ in dims]
        found[" == ".join(paths)] = {"kind": "dim_equal", "dims": [[p, a] for p, a, _ in dims], "paths": paths}
    return found


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Mod: operator.mod}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_FUNCTIONS = {"max": max, "min": min}


def _size_read(node: ast.AST) -> tuple[str, int] | None:
    """``(input, axis)`` for ``L['x'].size()[axis]``, None otherwise."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) and not node.value.args):
        return None
    func = node.value.func
    owner = func.value if isinstance(func, ast.Attribute) and func.attr == "size" else None
    if (isinstance(owner, ast.Subscript) and isinstance(owner.value, ast.Name) and owner.value.id == "L"
            and isinstance(owner.slice, ast.Constant) and isinstance(owner.slice.value, str)
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
        return owner.slice.value, node.slice.value
    return None


def _evaluate_guard(node: ast.AST, sizes: dict[tuple[str, int], int]) -> Any:
    """Evaluates a guard on sizes; raises KeyError or TypeError on anything but sizes, integers,
    arithmetic, comparisons, ``max`` and ``min``."""
    read = _size_read(node)
    if read is not None:
        return sizes[read]
    if isinstance(node, ast.Expression):
        return _evaluate_guard(node.body, sizes)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_evaluate_guard(node.left, sizes), _evaluate_guard(node.right, sizes))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        value = _evaluate_guard(node.operand, sizes)
        return -value if isinstance(node.op, ast.USub) else not value
    if isinstance(node, ast.BoolOp):
        values = [_evaluate_guard(v, sizes) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        return _FUNCTIONS[node.func.id](*(_evaluate_guard(a, sizes) for a in node.args))
    if isinstance(node, ast.Compare):
        left = _evaluate_guard(node.left, sizes)
        for op, right in zip(node.ops, node.comparators):
            value = _evaluate_guard(right, sizes)
            if not _COMPARE[type(op)](left, value):
                return False
            left = value
        return True
    raise TypeError(f"unsupported guard element {type(node).__name__}")


def _guard_text(code: str) -> str:
    return re.sub(r"L\['([^']+)'\]\.size\(\)\[(\d+)\]", r"\1.shape[\2]", code)


def _guard_sizes(tree: ast.AST, tensors: dict[str, Any]) -> dict[tuple[str, int], int] | None:
    """The sizes a guard reads (``L['x'].size()[1]``) taken from ``tensors`` by name, None when one of
    them is not a tensor given directly (nested in a list or a cache) or the guard reads none."""
    sizes = {}
    for name, axis in {r for r in map(_size_read, ast.walk(tree)) if r is not None}:
        value = tensors.get(name)
        if not isinstance(value, torch.Tensor) or value.dim() <= axis:
            return None
        sizes[(name, axis)] = int(value.shape[axis])
    return sizes or None


def size_conditions(
    ep: torch.export.ExportedProgram, model: Any, args: Sequence[Any], kwargs: dict[str, Any] | None,
    dynamic_shapes: Any,
) -> dict[str, dict[str, Any]]:
    """The guards of torch.export on input sizes which no range expresses and which other sizes break:
    a remainder (``x.shape[2] % 4 == 0``: the model pads, or not, when a size is not a multiple), two
    dimensions differing (``x.shape[2] != x.shape[3]``) or a computed size equal (or not) to a constant
    (``(h // 14) * (w // 14) == 16``: a number of patches). The graph holds the branch taken at export.
    The guards are those of the capture (:data:`MODEL_GUARDS` when the program was decomposed since).
    Other guards are left out: the size-1 and positivity assumptions torch.export makes on every dynamic
    dimension, the strides it compares to choose a memory layout (:func:`is_a_stride_condition`), and conditions of branches that compute the same thing either way (``if pad > 0: pad``).

    :return: ``{"<condition on the inputs' shapes>": {"kind": "size_condition", "guard": "<torch's code>"}}``
    """
    tensors = _argument_tensors(model, args, kwargs, dynamic_shapes)
    example = {name: tensor for name, (_, tensor, _) in tensors.items()}
    # (input, axis) -> symbol: two dimensions torch.export gave one symbol always have the same size
    nodes = {position: node for position, _, node in _user_inputs(ep)}
    symbols = {(name, axis): expr for name, (position, _, _) in tensors.items()
               for axis, expr in _symbolic_axes(nodes.get(position))}
    found: dict[str, dict[str, Any]] = {}
    for code in getattr(ep, MODEL_GUARDS, None) or getattr(ep, "_guards_code", None) or []:
        try:
            tree = ast.parse(code, mode="eval")
        except SyntaxError:
            continue
        sizes = _guard_sizes(tree, example)
        if sizes is None or not _is_a_branch(tree.body) or is_a_stride_condition(code):
            continue
        try:
            holds = _evaluate_guard(tree, sizes)
        except (KeyError, TypeError, ZeroDivisionError):
            continue
        if holds and _can_fail(tree, sizes, symbols):  # kept: true at export, false for other sizes
            found[_guard_text(code)] = {"kind": "size_condition", "guard": code}
    return found


def is_a_stride_condition(code: str) -> bool:
    """Whether a guard compares strides: torch computes a contiguous tensor's strides with
    ``max(1, size)``, and a guard holding one decides a memory layout (a ``view`` where the
    strides allow it, a copy otherwise: timm's Swin, ``5376*max(1, windows) == 5376``), which
    changes no value and which ONNX does not have."""
    return "max(1, " in code


def _is_a_branch(body: ast.AST) -> bool:
    """Whether a guard looks like the condition of a branch of the model: one comparison, a remainder by a
    constant (``(expr % k) == 0`` or ``!= 0``, ``(expr % k) <= 0``: padding taken or not; not a
    stride check), two dimensions
    differing, or a computed size compared with a constant; never the size-1 or positivity assumptions
    torch.export makes about every dynamic dimension (``expr != 1``, ``expr >= 2``)."""
    if not (isinstance(body, ast.Compare) and len(body.ops) == 1) or _size_one_assumption(body):
        return False
    sides = (body.left, body.comparators[0])
    remainder = any(
        isinstance(a, ast.BinOp) and isinstance(a.op, ast.Mod) and isinstance(a.right, ast.Constant) for a in sides
    )
    modulo = remainder and (
        (isinstance(body.ops[0], (ast.Eq, ast.NotEq)) and any(isinstance(a, ast.Constant) for a in sides))
        # a padding skipped: ``if pad > 0:`` false at export (``pad = (k - n % k) % k``), which torch writes
        # ``pad <= 0``; the graph lacks the padding other sizes need. Taken at export (``pad > 0``), the graph
        # pads by the symbolic amount, nothing at a multiple: no condition
        or (isinstance(body.ops[0], ast.LtE) and isinstance(body.comparators[0], ast.Constant)
            and body.comparators[0].value == 0)
    )
    two_dims = isinstance(body.ops[0], ast.NotEq) and all(_size_read(a) is not None for a in sides)
    return modulo or two_dims or _equals_a_constant(body)


def _size_one_assumption(body: ast.Compare) -> bool:
    """``expr != 1`` or ``k * expr != k``: torch.export assumes a size it broadcasts is not 1 (LED's
    padding ``(8 - n % 8) % 8 != 1``), the model computes the same when it is. A parity, ``n % 2 != 1``,
    is ``n % 2 == 0``: a branch of the model (padding odd sizes), kept."""
    if not isinstance(body.ops[0], ast.NotEq):
        return False
    for expr, other in ((body.left, body.comparators[0]), (body.comparators[0], body.left)):
        if not isinstance(other, ast.Constant):
            continue
        if other.value == 1:
            parity = isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod) and \
                isinstance(expr.right, ast.Constant) and expr.right.value == 2
            return not parity
        factors = (expr.left, expr.right) if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult) else ()
        if any(isinstance(f, ast.Constant) and f.value == other.value for f in factors):
            return True
    return False


def _equals_a_constant(body: ast.Compare) -> bool:
    """``expr == k`` or ``expr != k`` for a constant k other than 0 and 1 (torch.export's own size-1 and
    emptiness checks): a branch of the model on a computed size, ``if num_patches == 16:``, that torch.export
    could not turn into a range or a specialization (a product, a floor division)."""
    if not isinstance(body.ops[0], (ast.Eq, ast.NotEq)):
        return False
    sides = (body.left, body.comparators[0])
    constants = [a.value for a in sides if isinstance(a, ast.Constant)]
    return len(constants) == 1 and isinstance(constants[0], int) and constants[0] not in (0, 1)


def _can_fail(tree: ast.AST, sizes: dict[tuple[str, int], int], symbols: dict[tuple[str, int], Any]) -> bool:
    """Whether the guard is false for some sizes (a few hundred seeded draws around the example's),
    the dimensions sharing a symbol keeping one size: ``(b * s) % b == 0`` on one batch never is."""
    import random

    rng = random.Random(0)
    keys = list(sizes)
    for _ in range(300):
        values: dict[Any, int] = {}
        trial = {}
        for key in keys:
            if key not in symbols:  # a static dimension keeps its size
                trial[key] = sizes[key]
                continue
            if symbols[key] not in values:
                values[symbols[key]] = max(1, sizes[key] + rng.randint(-sizes[key] + 1, 3 * sizes[key] + 8))
            trial[key] = values[symbols[key]]
        try:
            if not _evaluate_guard(tree, trial):
                return True
        except ZeroDivisionError:
            return True
    return False


def _check_size_condition(path: str, entry: dict[str, Any], model: Any, args: Sequence[Any],
                          kwargs: dict[str, Any] | None) -> None:
    tree = ast.parse(entry["guard"], mode="eval")
    sizes = _guard_sizes(tree, dict(named_inputs(model, args, kwargs)))
    if sizes is None:  # not given as tensors: not checked
        return
    try:
        holds = _evaluate_guard(tree, sizes)
    except ZeroDivisionError:
        holds = False
    if not holds:
        shown = ", ".join(f"{n}.shape[{a}] = {v}" for (n, a), v in sorted(sizes.items()))
        raise FrozenInputError(
            f"The export assumed {path} (the model's code branched on these sizes and the ONNX model holds the "
            f"branch taken then), got {shown}. Export with an example of such sizes, or write the branch with "
            f"torch.cond."
        )


def _check_dim_equal(path: str, entry: dict[str, Any], args: Sequence[Any], kwargs: dict[str, Any] | None) -> None:
    leaves = flatten_inputs(args, kwargs)
    sizes = [int(leaves[p].shape[a]) for p, a in entry["dims"]
             if p < len(leaves) and isinstance(leaves[p], torch.Tensor) and leaves[p].dim() > a]
    if len(set(sizes)) > 1:
        given = ", ".join(f"{name} = {size}" for name, size in zip(entry["paths"], sizes))
        raise FrozenInputError(
            f"Dimensions {path} were declared independent but torch.export gave them one size (the model's "
            f"code compared them, such as `if height == width:`), got {given}: the ONNX model holds the branch "
            f"taken for equal sizes. Export with an example where they differ, or write the branch with torch.cond."
        )


def _check_dim_range(path: str, entry: dict[str, Any], args: Sequence[Any], kwargs: dict[str, Any] | None) -> None:
    leaves = flatten_inputs(args, kwargs)
    value = leaves[entry["position"]] if entry["position"] < len(leaves) else None
    if not isinstance(value, torch.Tensor) or value.dim() <= entry["axis"]:
        return
    size = int(value.shape[entry["axis"]])
    if size < entry["min"] and entry.get("reason") == _SQUEEZE_REASON:
        raise FrozenInputError(
            f"Dimension {path} is {size} but a squeeze of the model kept this axis at export (size "
            f"{_range_text(entry)}): on a size of 1, torch removes the axis and the ONNX model does not."
        )
    if size < entry["min"] or (entry["max"] is not None and size > entry["max"]):
        raise FrozenInputError(
            f"Dimension {path} is {size} but the export narrowed it to {_range_text(entry)}: the model's code "
            f"branched on this size at export and the ONNX model holds the branch taken then; it is wrong "
            f"outside that range. Export with an example of the sizes you need, or write the branch with "
            f"torch.cond."
        )


def _range_text(entry: dict[str, Any]) -> str:
    return f"[{entry['min']}, {entry['max'] if entry['max'] is not None else 'inf'}]"


def _is_dynamic_spec(spec: Any) -> bool:
    return spec is not None and spec is not torch.export.Dim.STATIC


def _spec_of(dynamic_shapes: Any, index: int, name: str) -> Any:
    if isinstance(dynamic_shapes, dict):
        return dynamic_shapes.get(name)
    if isinstance(dynamic_shapes, (list, tuple)) and index < len(dynamic_shapes):
        return dynamic_shapes[index]
    return None


def _walk(name: str, value: Any, spec: Any) -> Iterator[tuple[str, Any, Any]]:
    """Pre-order walk over lists, tuples and dicts: ``(path, value, spec)``."""
    yield name, value, spec
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            sub = spec[i] if isinstance(spec, (list, tuple)) and i < len(spec) else None
            yield from _walk(f"{name}[{i}]", item, sub)
    elif isinstance(value, dict):
        for key, item in value.items():
            sub = spec.get(key) if isinstance(spec, dict) else None
            yield from _walk(f"{name}[{key!r}]", item, sub)


def _count_inputs(value: Any, spec: Any) -> int:
    """How many ONNX inputs ``value`` becomes (tensors and dynamic scalars)."""
    if value is None:
        return 0
    if isinstance(value, torch.Tensor):
        return 1
    if isinstance(value, _SCALARS):
        return int(_is_dynamic_spec(spec) and isinstance(value, int) and not isinstance(value, bool))
    if isinstance(value, (list, tuple)):
        return sum(
            _count_inputs(v, spec[i] if isinstance(spec, (list, tuple)) and i < len(spec) else None)
            for i, v in enumerate(value)
        )
    if isinstance(value, dict):
        return sum(_count_inputs(v, spec.get(k) if isinstance(spec, dict) else None) for k, v in value.items())
    return sum(isinstance(leaf, torch.Tensor) for leaf in flatten_inputs((value,)))


def describe_frozen_inputs(
    model: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    dynamic_shapes: Any = None,
    onnx_input_names: Sequence[str] | None = None,
    specialized: dict[int, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """The inputs torch.export freezes: scalars not marked dynamic, lengths of lists and tuples,
    dynamic ints it specialized.

    :param onnx_input_names: the inputs of the ONNX model, to name the inputs a list became
    :param specialized: the dynamic ints torch.export specialized (:func:`specialized_int_inputs`)
    :return: ``{path: {"kind": ..., "value": ...}}`` or ``{path: {"kind": "list", "length": n, "inputs": [...]}}``
    """
    frozen: dict[str, dict[str, Any]] = {}
    position = 0
    for index, (name, value) in enumerate(named_inputs(model, args, kwargs)):
        spec = _spec_of(dynamic_shapes, index, name)
        for path, item, sub in _walk(name, value, spec):
            if isinstance(item, (list, tuple)):
                entry: dict[str, Any] = {"kind": type(item).__name__, "length": len(item)}
                if onnx_input_names is not None:
                    start = position + _inputs_before(value, spec, path, name)
                    entry["inputs"] = list(onnx_input_names[start : start + _count_inputs(item, sub)])
                frozen[path] = entry
            elif isinstance(item, _SCALARS) and not (
                _is_dynamic_spec(sub) and isinstance(item, int) and not isinstance(item, bool)
            ):
                frozen[path] = {"kind": type(item).__name__, "value": item}
                if dynamic_shapes is not None and _declared_constant(item, sub):
                    frozen[path]["declared_static"] = True
            elif isinstance(item, int) and specialized:
                if position + _inputs_before(value, spec, path, name) in specialized:
                    frozen[path] = {"kind": "int", "value": item, "declared_dynamic": True}
        position += _count_inputs(value, spec)
    return frozen


def _declared_constant(value: Any, spec: Any) -> bool:
    """Tells if the user said a scalar is a constant: ``Dim.STATIC``, or ``None`` for a ``bool``
    or a ``str`` (a flag, a mode: no dynamic form exists, ``None`` is the only way to say it).
    ``None`` for an ``int`` or a ``float`` is what one writes without thinking of it: warned."""
    return spec is torch.export.Dim.STATIC or (spec is None and isinstance(value, (bool, str)))


def _inputs_before(value: Any, spec: Any, target: str, name: str) -> int:
    """ONNX inputs coming from the leaves of ``value`` met before the node at path ``target``."""
    count = 0
    for path, item, sub in _walk(name, value, spec):
        if path == target:
            return count
        if not isinstance(item, (list, tuple, dict)):
            count += _count_inputs(item, sub)
    return count


def frozen_message(path: str, entry: dict[str, Any]) -> str:
    """The warning for one frozen input: what was frozen and how to keep it dynamic."""
    if entry["kind"] in ("list", "tuple"):
        inputs = entry.get("inputs")
        names = f" ({', '.join(inputs)})" if inputs else ""
        return (
            f"torch.export froze the length of input {path!r}: a {entry['kind']} of {entry['length']} "
            f"element(s) becomes {entry['length']} separate value(s){names}, the ONNX model takes no other "
            f"length. To vary the count, stack the elements into one tensor with a dynamic dimension."
        )
    if entry["kind"] == "size_condition":
        return (
            f"torch.export assumed {path} (a branch on these sizes, such as padding when a size is not a "
            f"multiple): the ONNX model holds the branch taken at export and is wrong for sizes where it does not "
            f"hold; fx2onnx.validate refuses them (metadata {METADATA_KEY!r}). Export with an example of the sizes "
            f"you need or write the branch with torch.cond."
        )
    if entry["kind"] == "dim_equal":
        return (
            f"torch.export gave one size to the dimensions {', '.join(entry['paths'])}, declared independent: the "
            f"model's code compared them (such as `if height == width:`) and the ONNX model holds the branch taken "
            f"for equal sizes; fx2onnx.validate refuses other inputs (metadata {METADATA_KEY!r}). Export with an "
            f"example where they differ, or write the branch with torch.cond."
        )
    if entry["kind"] == "dim_range" and entry.get("reason") == _SQUEEZE_REASON:
        return (
            f"A squeeze kept the axis of the dynamic dimension {path} (its size was not 1 at export): the ONNX "
            f"model assumes it is never 1 and would return one axis too many; fx2onnx.validate refuses a size "
            f"of 1 (metadata {METADATA_KEY!r}). Squeeze a dimension which is always 1, or export with "
            f"an example where it is 1 and a static dimension."
        )
    if entry["kind"] == "dim_range":
        return (
            f"torch.export narrowed the dynamic dimension {path} to {_range_text(entry)} (a Python branch on "
            f"this size, such as `if seq_len >= n:`, or a declared bound): the ONNX model holds the branch "
            f"taken at export and is wrong for other sizes; fx2onnx.validate refuses them (metadata "
            f"{METADATA_KEY!r}). Export with an example of the sizes you need or write the branch with torch.cond."
        )
    value, kind = entry["value"], entry["kind"]
    if entry.get("declared_dynamic"):
        return (
            f"Input {path!r} was declared dynamic in dynamic_shapes but torch.export specialized it to "
            f"{value!r}: the model's code uses it as a Python int (an index such as x[..., {path}] = y, a "
            f"shape, a condition), so the ONNX model keeps an input {path!r} it ignores and computes with "
            f"{value!r} whatever value is given later. To keep it dynamic, pass a tensor index "
            f"(torch.tensor({path})) and use index_put, index_select or torch.where instead of Python indexing."
        )
    how = (
        f"mark it dynamic in dynamic_shapes ({{{path!r}: torch.export.Dim.DYNAMIC}} or a name "
        f"{{{path!r}: {path!r}}}: it becomes an int64 input) or pass a tensor"
        if kind == "int"
        else f"pass a tensor (torch.tensor({value!r})) instead of a Python {kind}"
        if kind in ("float", "bool")
        else "export one model per value"
    )
    return (
        f"torch.export froze input {path!r} to {value!r} ({kind}): the ONNX model has no input for it "
        f"and computes with {value!r} whatever value is given later. To keep it dynamic, {how}. If it is "
        f"a constant, say so with torch.export.Dim.STATIC in dynamic_shapes: it is recorded, not warned about."
    )


def warn_frozen_inputs(frozen: dict[str, dict[str, Any]], stacklevel: int = 3) -> None:
    """One :class:`FrozenInputWarning` per frozen input."""
    conditions = [path for path, entry in frozen.items() if entry["kind"] == "size_condition"]
    for path, entry in frozen.items():
        # a table's length (BERT's 512 positions), a constant the user declared (a flag given None in
        # dynamic_shapes): checked, not warned; the size conditions: warned below
        if entry.get("weight_bound") or entry.get("declared_static") or entry["kind"] == "size_condition":
            continue
        warnings.warn(frozen_message(path, entry), FrozenInputWarning, stacklevel=stacklevel)
    if conditions:  # one warning for all of them: a model chunking its input has dozens
        shown = "; ".join(conditions[:3]) + (f"; and {len(conditions) - 3} more" if len(conditions) > 3 else "")
        warnings.warn(frozen_message(shown, {"kind": "size_condition"}), FrozenInputWarning, stacklevel=stacklevel)


def read_frozen_inputs(onnx_model: Any) -> dict[str, dict[str, Any]] | None:
    """The frozen inputs recorded in a ModelProto, a path or an onnxruntime session (None if absent)."""
    import onnx

    if hasattr(onnx_model, "get_modelmeta"):
        props = dict(onnx_model.get_modelmeta().custom_metadata_map)
    else:
        if isinstance(onnx_model, (str, os.PathLike)):
            onnx_model = onnx.load(str(onnx_model), load_external_data=False)
        props = {p.key: p.value for p in getattr(onnx_model, "metadata_props", [])}
    text = props.get(METADATA_KEY)
    return json.loads(text) if text is not None else None


def check_frozen_inputs(
    frozen: dict[str, dict[str, Any]], model: Any, args: Sequence[Any], kwargs: dict[str, Any] | None
) -> None:
    """Raises :class:`FrozenInputError` if an input differs from what the ONNX model froze."""
    given: dict[str, Any] = {}
    for name, value in named_inputs(model, args, kwargs):
        for path, item, _ in _walk(name, value, None):
            given[path] = item
    for path, entry in frozen.items():
        if entry["kind"] == "dim_range":
            _check_dim_range(path, entry, args, kwargs)
            continue
        if entry["kind"] == "dim_equal":
            _check_dim_equal(path, entry, args, kwargs)
            continue
        if entry["kind"] == "size_condition":
            _check_size_condition(path, entry, model, args, kwargs)
            continue
        if path not in given:
            raise FrozenInputError(
                f"Input {path!r} was frozen at export ({_frozen_text(entry)}) but is not given: the ONNX "
                f"model computes with the exported value. Give the same inputs as at export."
            )
        value = given[path]
        if entry["kind"] in ("list", "tuple"):
            if not isinstance(value, (list, tuple)) or len(value) != entry["length"]:
                got = f"length {len(value)}" if isinstance(value, (list, tuple)) else repr(value)
                raise FrozenInputError(
                    f"Input {path!r} was frozen to a {entry['kind']} of length {entry['length']} at export, "
                    f"got {got}: the ONNX model takes {entry['length']} element(s) only. Export again with "
                    f"this length, or stack the elements into one tensor with a dynamic dimension."
                )
        elif type(value).__name__ != entry["kind"] or value != entry["value"]:
            how = (
                "pass a tensor index (torch.tensor(i)) and use index_put or torch.where: torch.export "
                "specialized this int although dynamic_shapes marked it dynamic"
                if entry.get("declared_dynamic")
                else "keep the input dynamic (an int marked in dynamic_shapes, or a tensor)"
            )
            raise FrozenInputError(
                f"Input {path!r} was frozen to {entry['value']!r} ({entry['kind']}) at export, got "
                f"{value!r}: the ONNX model would compute with {entry['value']!r}. Export again with "
                f"this value, or {how}."
            )


def _frozen_text(entry: dict[str, Any]) -> str:
    if entry["kind"] in ("list", "tuple"):
        return f"a {entry['kind']} of length {entry['length']}"
    return f"{entry['value']!r}"
