"""Higher-order operators: torch.cond -> If, scan -> Scan, while_loop -> Loop, map -> Scan.

torch.export keeps every branch or loop body as a GraphModule (``true_graph_0``,
``scan_combine_graph_0``...) called by a higher-order operator. Each body becomes
an ONNX subgraph; tensors the body reads from the outer graph (weights, closures,
``additional_inputs``) are referenced from the outer scope, which ONNX allows.

=====================================  ======================================
torch                                  ONNX
=====================================  ======================================
``torch.cond(pred, f, g, ops)``        ``If``
``scan(f, init, xs, add)``             ``Scan`` (carries = state, xs = scan inputs)
``while_loop(c, b, carried, add)``     ``Loop`` (the condition is computed in the body)
``map(f, xs, *args)``                  ``Scan`` without state
=====================================  ======================================

The file also converts ``auto_functionalized(_v2)``, the functional form of a custom op
mutating its inputs: the user's converter returns the new values of the mutated tensors.
"""

from __future__ import annotations

from typing import Any, Sequence

import onnx_ir as ir
import torch

from ..complex_values import _value_type
from ..errors import ConversionError, UnsupportedOpError
from ..registry import converter

hop = torch.ops.higher_order


def _placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _as_list(x: Any) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _values(ctx, items: Sequence[Any]) -> list[Any]:
    """Python ints/floats/bools (static or specialized) become constants, Values stay."""
    return [ctx.as_value(v) if isinstance(v, (int, float, bool)) else v for v in items]


def _inline(ctx, gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> list[Any]:
    """Converts ``gm`` directly into the current graph (a branch known at export time)."""
    env = dict(zip(_placeholders(gm), inputs))
    outputs = ctx.interpreter.run_nodes(ctx.builder, gm.graph, env, owner=gm)
    return _as_list(outputs)


def _body_input(ctx, sub, name: str, val: Any) -> ir.Value:
    dtype, shape = _value_type(val)
    namer = ctx.interpreter.dim_namer
    return sub.add_input(name, dtype, None if shape is None else [namer(d) for d in shape])


def _finish_body(sub, outputs: Sequence[Any]) -> ir.Graph:
    for o in outputs:
        if not isinstance(o, ir.Value):
            o = sub.constant(o)
        sub.add_output(o)
    return sub.to_graph()


def _graph_input_pairs(gm: torch.fx.GraphModule, count: int) -> list[tuple[int, Any]]:
    """The first ``count`` placeholders become subgraph inputs, typed by their fake values."""
    phs = _placeholders(gm)
    return [(i, phs[i].meta.get("val")) for i in range(count)]


# torch.cond -> If


@converter(hop.cond)
def convert_cond(ctx, node, pred, true_gm, false_gm, operands):
    """``torch.cond`` -> ``If`` (torch itself inlines a branch when the predicate is known)."""
    operands = _values(ctx, _as_list(operands))
    pred = ctx.cast(ctx.as_value(pred), torch.bool)
    if pred.shape is not None and len(pred.shape) != 0:
        pred = ctx.op.Reshape(pred, ctx.const([], torch.int64))
    then_graph, then_out = ctx.subgraph(true_gm, f"{node.name}_then", operands)
    else_graph, else_out = ctx.subgraph(false_gm, f"{node.name}_else", operands)
    if len(then_out) != len(else_out):
        raise ctx.error(f"torch.cond branches return {len(then_out)} and {len(else_out)} outputs.")
    outs = ctx.op.If(pred, then_branch=then_graph, else_branch=else_graph, _outputs=len(then_out))
    return outs if isinstance(outs, tuple) else (outs,)


# scan -> Scan


@converter(hop.scan)
def convert_scan(ctx, node, combine_gm, init, xs, additional_inputs=()):
    """``scan(f, init, xs, additional_inputs)`` -> ``Scan`` along axis 0.

    torch.export already moved the scanned dimension first and flipped the
    inputs and outputs when ``reverse=True``, so the defaults of ONNX Scan apply.
    """
    init, xs = _values(ctx, _as_list(init)), _as_list(xs)
    extra = _values(ctx, _as_list(additional_inputs))
    n_state, n_scan = len(init), len(xs)
    if n_scan == 0:
        raise ctx.error("scan without scanned inputs is not supported: ONNX Scan needs at least one.")
    graph, outputs = ctx.subgraph(
        combine_gm, f"{node.name}_body", extra, _graph_input_pairs(combine_gm, n_state + n_scan)
    )
    outs = ctx.op.Scan(*init, *xs, body=graph, num_scan_inputs=n_scan, _outputs=len(outputs))
    return outs if isinstance(outs, tuple) else (outs,)


# map -> Scan


@converter(hop.map_impl)
def convert_map(ctx, node, body_gm, xs, args=()):
    """``torch._higher_order_ops.map(f, xs, *args)`` -> ``Scan`` with no state."""
    xs, extra = _as_list(xs), _values(ctx, _as_list(args))
    graph, outputs = ctx.subgraph(body_gm, f"{node.name}_body", extra, _graph_input_pairs(body_gm, len(xs)))
    outs = ctx.op.Scan(*xs, body=graph, num_scan_inputs=len(xs), _outputs=len(outputs))
    return outs if isinstance(outs, tuple) else (outs,)


# while_loop -> Loop


@converter(hop.while_loop)
def convert_while_loop(ctx, node, cond_gm, body_gm, carried_inputs, additional_inputs=()):
    """``while_loop(cond_fn, body_fn, carried, additional)`` -> ``Loop``.

    The first condition is computed before the loop, the next ones at the end of
    the body, on the new carried values. Carried Python ints become int64 scalars.
    """
    carried = [ctx.as_value(c) if not isinstance(c, ir.Value) else c for c in _as_list(carried_inputs)]
    extra = _values(ctx, _as_list(additional_inputs))
    first = _inline(ctx, cond_gm, [*carried, *extra])
    if len(first) != 1:
        raise ctx.error("The condition of while_loop must return one boolean.")
    cond0 = _scalar_bool(ctx, first[0])

    sub = ctx.builder.subgraph(f"{node.name}_body")
    body_phs = _placeholders(body_gm)
    iteration = sub.add_input(f"{node.name}_iter", torch.int64, [])
    cond_in = sub.add_input(f"{node.name}_cond_in", torch.bool, [])
    del iteration, cond_in  # required by ONNX, unused
    loop_vars = [_body_input(ctx, sub, f"{node.name}_{ph.name}", ph.meta.get("val")) for ph in body_phs[: len(carried)]]
    _coerce_types(loop_vars, carried)
    env = dict(zip(body_phs, [*loop_vars, *extra]))
    new_values = _as_list(ctx.interpreter.run_nodes(sub, body_gm.graph, env, owner=body_gm))
    if len(new_values) != len(carried):
        raise ctx.error(f"The body of while_loop returns {len(new_values)} values for {len(carried)} carried inputs.")
    sub_ctx = type(ctx)(sub, ctx.interpreter, node)
    new_values = [sub_ctx.as_value(v) if not isinstance(v, ir.Value) else v for v in new_values]
    cond_env = dict(zip(_placeholders(cond_gm), [*new_values, *extra]))
    cond_out = _as_list(ctx.interpreter.run_nodes(sub, cond_gm.graph, cond_env, owner=cond_gm))
    cond_next = _scalar_bool(sub_ctx, cond_out[0])
    graph = _finish_body(sub, [cond_next, *[sub_ctx.cast(v, ctx.dtype(c)) for v, c in zip(new_values, carried)]])
    outs = ctx.op.Loop(None, cond0, *carried, body=graph, _outputs=len(carried))
    return outs if isinstance(outs, tuple) else (outs,)


def _scalar_bool(ctx, value: Any) -> ir.Value:
    value = ctx.cast(ctx.as_value(value), torch.bool)
    if value.shape is None or len(value.shape) != 0:
        value = ctx.op.Reshape(value, ctx.const([], torch.int64))
        value.dtype, value.shape = ir.DataType.BOOL, ir.Shape([])
    return value


def _coerce_types(loop_vars: list[ir.Value], carried: list[ir.Value]) -> None:
    """Body inputs take the dtype of the initial carried values (ints -> int64)."""
    for v, c in zip(loop_vars, carried):
        if c.dtype is not None:
            v.dtype = c.dtype
        if v.dtype is None:
            raise ConversionError(f"Unknown dtype for the loop variable {v.name!r}.")


# custom ops mutating their inputs: auto_functionalized(_v2)


def _mutated_op_call(ctx, node, op, kwargs: dict, bases: list | None):
    """Calls the converter of ``op`` on the functional form of a mutating call.

    The converter of an op with ``mutates_args`` returns the op's outputs followed
    by the new values of the mutated arguments (schema order).
    """

    fn = ctx.interpreter.find_converter(op)
    if fn is None:
        raise UnsupportedOpError(op, node)
    schema = op._schema
    mutable = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    positional, keyword = [], {}
    for a in schema.arguments:
        if a.name in mutable and bases is not None:
            index = kwargs.get(f"_{a.name}_base_index")
            if f"_{a.name}_size" in kwargs:
                raise ctx.error(
                    f"Argument {a.name!r} of {op} is a strided view of another tensor: only whole "
                    f"tensors or slices mutated in place are supported. Pass x.clone() to the op."
                )
            value = None if index is None else bases[index]
            if value is not None and f"_{a.name}_slice_dim" in kwargs:
                value = _slice(ctx, value, *_slice_info(kwargs, a.name))
        elif a.name in kwargs:
            value = kwargs[a.name]
        elif a.has_default_value():
            value = a.default_value
        else:
            raise ctx.error(f"Missing argument {a.name!r} for {op}.")
        (keyword.__setitem__(a.name, value) if a.kwarg_only else positional.append(value))
    result = fn(ctx, node, *positional, **keyword)
    result = list(result) if isinstance(result, (list, tuple)) else [result]
    n_returns = len(schema.returns)
    if len(result) != n_returns + len(mutable):
        raise ctx.error(
            f"The converter of {op} (mutates {mutable}) returned {len(result)} values: it must return "
            f"the {n_returns} output(s) of the op followed by the new value of each mutated argument."
        )
    outputs, new_values = result[:n_returns], dict(zip(mutable, result[n_returns:]))
    return outputs, mutable, new_values


@converter(hop.auto_functionalized_v2)
def convert_auto_functionalized_v2(ctx, node, op, **kwargs):
    """A custom op with ``mutates_args`` after functionalization (torch >= 2.6)."""
    bases = list(kwargs.get("_all_bases") or [])
    outputs, mutable, new_values = _mutated_op_call(ctx, node, op, kwargs, bases)
    new_bases = list(bases)
    for name in mutable:
        index = kwargs.get(f"_{name}_base_index")
        if index is None:
            continue
        if f"_{name}_slice_dim" in kwargs:  # write the slice back into its base
            dim, start, end = _slice_info(kwargs, name)
            parts = [_slice(ctx, new_bases[index], dim, 0, start), new_values[name], _slice(ctx, new_bases[index], dim, end, None)]
            new_bases[index] = ctx.op.Concat(*parts, axis=dim)
        else:
            new_bases[index] = new_values[name]
    head = outputs if outputs else [None]
    return (*head, *new_bases)


@converter(hop.auto_functionalized)
def convert_auto_functionalized(ctx, node, op, **kwargs):
    """A custom op with ``mutates_args`` after functionalization (first version)."""
    outputs, mutable, new_values = _mutated_op_call(ctx, node, op, kwargs, None)
    head = outputs if outputs else [None]
    return (*head, *[new_values[n] for n in mutable])


def _slice_info(kwargs: dict, name: str) -> tuple[int, Any, Any]:
    return kwargs[f"_{name}_slice_dim"], kwargs.get(f"_{name}_slice_start"), kwargs.get(f"_{name}_slice_end")


def _slice(ctx, value: ir.Value, dim: int, start: Any, end: Any) -> ir.Value:
    """``value.narrow`` along ``dim`` from ``start`` to ``end`` (None: the end), step 1."""
    big = 2**62
    starts = ctx.scalar_1d(0 if start is None else start)
    ends = ctx.scalar_1d(big if end is None else end)
    return ctx.op.Slice(value, starts, ends, ctx.const([dim], torch.int64))
