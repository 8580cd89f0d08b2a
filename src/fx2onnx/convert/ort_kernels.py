"""Casts around the nodes whose types onnxruntime's CPU kernels do not take.

Torch runs ``max`` on bool tensors, ``conv2d`` on int64 tensors, ``floor`` on integers;
ONNX allows most of these types but onnxruntime's CPU provider has no kernel for
them, so the model fails to load (``Type Error: Type 'tensor(bool)' of input
parameter ... is invalid``). Rather than one special case per converter, this pass
reads onnxruntime's kernel registry (``get_all_opkernel_def``) and, for a node no CPU
kernel takes, casts the inputs bound to the offending type constraint to a wider
type a kernel takes, and the outputs bound to it back:

* bool -> int32 (``Max``, ``Greater``, ``Where``...), small integers -> int32;
* int64 -> double (``Conv``, ``Gemm``, pooling): exact while the values and the
  accumulated products stay below 2**53;
* float16 / bfloat16 -> float.

A float64 node is never computed in float32: a lower precision would not be said.

.. code-block:: python

    import onnx_ir as ir
    from fx2onnx.convert.ort_kernels import cast_to_kernel_types

    count = cast_to_kernel_types(model)  # an onnx_ir.Model, edited in place
"""

from __future__ import annotations

import functools
import warnings
from typing import Iterator

import onnx
import onnx_ir as ir

#: wider types tried in order for a type no kernel takes
CARRIERS: dict[ir.DataType, tuple[ir.DataType, ...]] = {
    ir.DataType.BOOL: (ir.DataType.INT32, ir.DataType.INT64, ir.DataType.UINT8, ir.DataType.FLOAT),
    ir.DataType.INT8: (ir.DataType.INT32, ir.DataType.INT64, ir.DataType.FLOAT),
    ir.DataType.UINT8: (ir.DataType.INT32, ir.DataType.INT64, ir.DataType.FLOAT),
    ir.DataType.INT16: (ir.DataType.INT32, ir.DataType.INT64, ir.DataType.FLOAT),
    ir.DataType.UINT16: (ir.DataType.INT32, ir.DataType.INT64, ir.DataType.FLOAT),
    ir.DataType.INT32: (ir.DataType.INT64, ir.DataType.DOUBLE),
    ir.DataType.UINT32: (ir.DataType.INT64, ir.DataType.DOUBLE),
    ir.DataType.INT64: (ir.DataType.DOUBLE,),
    ir.DataType.UINT64: (ir.DataType.DOUBLE,),
    ir.DataType.FLOAT16: (ir.DataType.FLOAT, ir.DataType.DOUBLE),
    ir.DataType.BFLOAT16: (ir.DataType.FLOAT, ir.DataType.DOUBLE),
    ir.DataType.FLOAT: (ir.DataType.DOUBLE,),
}

_Kernel = dict[str, frozenset[str]]


@functools.lru_cache(maxsize=1)
def _cpu_kernels() -> dict[tuple[str, str], list[tuple[int, int, _Kernel]]]:
    """(domain, op_type) -> [(first version, last version, constraint -> type strings)]."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as C

        definitions = C.get_all_opkernel_def()
    except (ImportError, AttributeError):
        return {}
    kernels: dict[tuple[str, str], list[tuple[int, int, _Kernel]]] = {}
    for d in definitions:
        if d.provider != "CPUExecutionProvider":
            continue
        low, high = d.version_range
        constraints = {name: frozenset(types) for name, types in d.type_constraints.items()}
        kernels.setdefault((d.domain, d.op_name), []).append((low, high, constraints))
    return kernels


@functools.lru_cache(maxsize=None)
def _formal_constraints(op_type: str, version: int, domain: str) -> tuple[tuple, tuple, int, dict, _Kernel] | None:
    """Constraint names of the inputs and outputs (the last one repeated when variadic),
    the schema's version, the constraints allowing a single type and the types each allows."""
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return None
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    inputs = tuple((p.type_str, p.option == variadic) for p in schema.inputs)
    outputs = tuple((p.type_str, p.option == variadic) for p in schema.outputs)
    single = {c.type_param_str: c.allowed_type_strs[0] for c in schema.type_constraints if len(c.allowed_type_strs) == 1}
    allowed = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    return inputs, outputs, schema.since_version, single, allowed


def _domain(node: ir.Node) -> str:
    return "" if node.domain == "ai.onnx" else node.domain


def _schema_of(node: ir.Node, opsets: dict[str, int]) -> tuple[tuple, tuple, int, dict, _Kernel] | None:
    domain = _domain(node)
    version = node.version or opsets.get(domain)
    return None if version is None else _formal_constraints(node.op_type, version, domain)


def _from_type_string(text: str) -> ir.DataType | None:
    for dtype in CARRIERS.keys() | {ir.DataType.DOUBLE}:
        if _type_string(dtype) == text:
            return dtype
    return None


def _infer_types(node: ir.Node, opsets: dict[str, int]) -> None:
    """Sets the element type of the outputs the converters left untyped, from the
    schema: an output shares its constraint with a typed input, or the constraint
    allows one type (the bool of a comparison), or it is a Cast."""
    untyped = [o for o in node.outputs if o.type is None]
    if not untyped:
        return
    if node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
        to = node.attributes.get("to")
        if to is not None:
            node.outputs[0].type = ir.TensorType(ir.DataType(to.value))
        return
    schema = _schema_of(node, opsets)
    if schema is None:
        return
    input_formals, output_formals, _, single, _ = schema
    known: dict[str, ir.DataType] = {}
    for name, value in zip(_bind(input_formals, len(node.inputs)), node.inputs):
        if name is not None and value is not None and value.dtype is not None:
            known.setdefault(name, value.dtype)
    for name, value in zip(_bind(output_formals, len(node.outputs)), node.outputs):
        if value.type is not None or name is None:
            continue
        dtype = known.get(name) or (_from_type_string(single[name]) if name in single else None)
        if dtype is not None:
            value.type = ir.TensorType(dtype)


def _bind(formals: tuple, count: int) -> list[str | None]:
    names: list[str | None] = []
    for i in range(count):
        if i < len(formals):
            names.append(formals[i][0])
        elif formals and formals[-1][1]:
            names.append(formals[-1][0])
        else:
            names.append(None)
    return names


def _type_string(dtype: ir.DataType) -> str:
    return f"tensor({onnx.helper.tensor_dtype_to_string(dtype.value).replace('TensorProto.', '').lower()})"


def _accepts(kernel: _Kernel, bound: dict[str, ir.DataType]) -> bool:
    return all(c not in kernel or _type_string(t) in kernel[c] for c, t in bound.items())


def _carriers_for(kernel: _Kernel, bound: dict[str, ir.DataType], input_constraints: set[str]) -> dict[str, ir.DataType] | None:
    """The carrier type of each constraint the kernel refuses, None if one cannot be cast."""
    changes = {}
    for c, t in bound.items():
        if c not in kernel or _type_string(t) in kernel[c]:
            continue
        if c not in input_constraints:
            return None
        carrier = next((w for w in CARRIERS.get(t, ()) if _type_string(w) in kernel[c]), None)
        if carrier is None:
            return None
        changes[c] = carrier
    return changes


def _nodes(model: ir.Model) -> Iterator[tuple[ir.Node, dict[str, int]]]:
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        yield node, model.opset_imports
    for function in model.functions.values():
        for node in ir.traversal.RecursiveGraphIterator(function):
            yield node, function.opset_imports


def _runtime_limits(node: ir.Node) -> _Kernel:
    """Types a kernel registers but refuses at run time for these attributes."""
    reduction = node.attributes.get("reduction")
    if node.op_type in ("ScatterElements", "ScatterND") and reduction is not None and reduction.value != "none":
        # "MLFloat16 data type is not supported with ScatterElements when reduction is 'add'", bool min/max
        return {"T": frozenset(_type_string(t) for t in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.INT32, ir.DataType.INT64))}
    return {}


def _candidate_kernels(node: ir.Node, since: int, allowed: _Kernel) -> list[_Kernel]:
    """The type constraints of every CPU kernel of the node's version, restricted to the types the
    schema allows (a kernel may register more) and run time accepts; the schema alone for an
    operator onnxruntime runs as its function body (HardSwish, Mish...)."""
    kernels = _cpu_kernels().get((_domain(node), node.op_type))
    if not _cpu_kernels():
        return []  # onnxruntime is not installed: nothing to adapt to
    registered = [k for low, high, k in kernels or [] if low <= since <= high] or ([] if kernels else [allowed])
    limits = _runtime_limits(node)
    candidates = []
    for kernel in registered:
        merged = dict(kernel)
        for c, types in {**allowed, **limits}.items():
            merged[c] = (merged[c] & types) if c in merged else types
        candidates.append(merged)
    return candidates


def _plan(node: ir.Node, opsets: dict[str, int]) -> dict[str, tuple[ir.DataType, ir.DataType]] | None:
    """Constraint -> (its type, the carrier) for a node no kernel takes, None otherwise."""
    formals = _schema_of(node, opsets)
    if formals is None:
        return None
    input_formals, output_formals, since, _, allowed = formals
    candidates = _candidate_kernels(node, since, allowed)
    if not candidates:
        return None
    bound: dict[str, ir.DataType] = {}
    input_constraints = set()
    for name, value in zip(_bind(input_formals, len(node.inputs)), node.inputs):
        if name is not None and value is not None and value.dtype is not None:
            bound.setdefault(name, value.dtype)
            input_constraints.add(name)
    for name, value in zip(_bind(output_formals, len(node.outputs)), node.outputs):
        if name is not None and value.dtype is not None:
            bound.setdefault(name, value.dtype)
    if any(_accepts(k, bound) for k in candidates):
        return None
    plans = [p for p in (_carriers_for(k, bound, input_constraints) for k in candidates) if p]
    if not plans:
        return {}  # no kernel, no exact carrier: said by cast_to_kernel_types
    # the fewest casts, then the nearest carriers (bool -> int32 before float)
    best = min(plans, key=lambda p: (len(p), sum(CARRIERS[bound[c]].index(t) for c, t in p.items())))
    return {c: (bound[c], t) for c, t in best.items()}


def _cast(value: ir.Value, dtype: ir.DataType, name: str) -> ir.Node:
    return ir.node("Cast", [value], {"to": int(dtype)}, outputs=[ir.Value(name=name, type=ir.TensorType(dtype), shape=value.shape)])


def _apply(node: ir.Node, changes: dict[str, tuple[ir.DataType, ir.DataType]], opsets: dict[str, int]) -> None:
    input_formals, output_formals, _, _, _ = _schema_of(node, opsets)  # type: ignore[misc]
    graph = node.graph
    base = node.name or node.op_type
    for i, (name, value) in enumerate(zip(_bind(input_formals, len(node.inputs)), node.inputs)):
        if value is None or name not in changes:
            continue
        carrier = changes[name][1]
        cast = _cast(value, carrier, f"{base}_in{i}_as_{carrier.name.lower()}")
        graph.insert_before(node, cast)
        node.replace_input_with(i, cast.outputs[0])
    for name, value in zip(_bind(output_formals, len(node.outputs)), node.outputs):
        if name not in changes or not value.name:
            continue
        original, carrier = changes[name]
        restored = ir.Value(type=ir.TensorType(original), shape=value.shape)
        value_name = value.name
        ir.convenience.replace_all_uses_with(value, restored, replace_graph_outputs=True)
        value.name = f"{value_name}_as_{carrier.name.lower()}"
        restored.name = value_name
        value.type = ir.TensorType(carrier)
        graph.insert_after(node, ir.node("Cast", [value], {"to": int(original)}, outputs=[restored]))


def _function_body(node: ir.Node, opsets: dict[str, int]) -> onnx.FunctionProto | None:
    """The ONNX function defining the node's operator in terms of others (Elu, Softplus,
    HardSwish...), for the model's opset; None when the operator has none."""
    domain = _domain(node)
    version = node.version or opsets.get(domain)
    try:
        schema = onnx.defs.get_schema(node.op_type, version, domain)
    except onnx.defs.SchemaError:
        return None
    versions = [v for v in getattr(schema, "function_opset_versions", []) if v <= version]
    if not schema.has_function or not versions:
        return None
    body = onnx.FunctionProto()
    body.ParseFromString(schema.get_function_with_opset_version(max(versions)))
    return body


def _runs_as_function(node: ir.Node) -> bool:
    """onnxruntime has no kernel for the operator at all (Mish): it would expand the body itself,
    without the casts its nodes may need."""
    return bool(_cpu_kernels()) and (_domain(node), node.op_type) not in _cpu_kernels()


def _expand(node: ir.Node, body: onnx.FunctionProto, opsets: dict[str, int]) -> None:
    """Replaces the node by the nodes of its function body (every value renamed, attribute
    references bound to the node's attributes or the schema's defaults)."""
    schema = onnx.defs.get_schema(node.op_type, node.version or opsets.get(_domain(node)), _domain(node))
    attributes = {name: a.default_value for name, a in schema.attributes.items() if a.default_value.type}
    attributes.update({name: ir.serde.serialize_attribute(a) for name, a in node.attributes.items()})
    values: dict[str, ir.Value | None] = {name: v for name, v in zip(body.input, node.inputs)}
    base = node.name or node.op_type
    graph = node.graph
    for k, inner in enumerate(body.node):
        attrs = []
        for a in inner.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name not in attributes:
                    continue
                bound = onnx.AttributeProto()
                bound.CopyFrom(attributes[a.ref_attr_name])
                bound.name = a.name
                a = bound
            attrs.append(ir.serde.deserialize_attribute(a))
        outputs = [ir.Value(name=f"{base}_{name}") for name in inner.output]
        new = ir.Node(inner.domain, inner.op_type, [values.get(i) if i else None for i in inner.input], attrs, outputs=outputs, name=f"{base}_{k}_{inner.op_type}")
        graph.insert_before(node, new)
        values.update(zip(inner.output, outputs))
    for formal, value in zip(body.output, node.outputs):
        produced = values[formal]
        produced.type, produced.shape = value.type, value.shape
        ir.convenience.replace_all_uses_with(value, produced, replace_graph_outputs=True)
        name = value.name
        value.name = None
        produced.name = name
    graph.remove(node, safe=True)


def cast_to_kernel_types(model: ir.Model) -> int:
    """Casts around every node no onnxruntime CPU kernel takes with its types;
    a node no wider exact type helps is replaced by its ONNX function body when its
    operator has one (float64 ``Elu``, ``Softplus``, ``HardSwish``...: onnxruntime has
    float kernels only, the body's operators take float64). Returns how many nodes were
    changed (none if onnxruntime is not installed) and warns about the nodes left."""
    count = 0
    for _ in range(4):  # a body may use an operator to expand as well (HardSwish -> HardSigmoid)
        planned = []
        for node, opsets in _nodes(model):
            _infer_types(node, opsets)
            planned.append((node, opsets, _plan(node, opsets)))
        expanded = 0
        for node, opsets, changes in planned:
            if changes and node.graph is not None:
                _apply(node, changes, opsets)
                count += 1
            elif (changes == {} or _runs_as_function(node)) and node.graph is not None and (body := _function_body(node, opsets)) is not None:
                _expand(node, body, opsets)
                expanded += 1
        count += expanded
        if not expanded:
            break
    refused = sorted(
        {f"{n.op_type}({', '.join(str(v.dtype).lower() for v in n.inputs if v is not None)})" for n, _, c in planned if c == {}}
    )
    if refused:
        warnings.warn(
            f"onnxruntime's CPU provider has no kernel for {', '.join(refused)} and no exact wider type "
            f"to compute them in: the model is valid ONNX but onnxruntime will refuse to load it. "
            f"Cast the tensors to float in the model (integer convolutions and pooling are the usual cause).",
            UserWarning,
            stacklevel=2,
        )
    return count


_REDUCTIONS = {
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
}


def _constant_ints(value: ir.Value | None) -> list[int] | None:
    """The integers of an initializer or a Constant node's output, None otherwise."""
    tensor = None if value is None else ir.convenience.get_const_tensor(value)
    return None if tensor is None else [int(v) for v in tensor.numpy().reshape(-1)]


def positive_reduction_axes(model: ir.Model) -> int:
    """Rewrites the negative constant axes of the reductions into positive ones; returns how many.

    onnxruntime does not reduce an empty tensor along a negative axis: ``ReduceSum`` of a
    (3, 0) tensor over ``[-1]`` returns (3, 0) instead of (3,) (Sum, Max, Prod, L2... alike).
    The rank of an input the converters left without a shape comes from ONNX shape inference.
    """
    def negative_reductions() -> list[tuple[ir.Node, list[int]]]:
        found = []
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            if node.op_type in _REDUCTIONS and node.domain in ("", "ai.onnx") and len(node.inputs) > 1:
                axes = _constant_ints(node.inputs[1])
                if axes and min(axes) < 0:
                    found.append((node, axes))
        return found

    found = negative_reductions()
    if any(node.inputs[0].shape is None for node, _ in found):
        from onnx_ir.passes.common import ShapeInferencePass

        try:
            ShapeInferencePass(check_type=False, strict_mode=False, data_prop=False)(model)
        except Exception:  # noqa: BLE001 - the ranks stay unknown, the axes as they are
            pass
        found = negative_reductions()
    count = 0
    for node, axes in found:
        shape = node.inputs[0].shape
        if shape is None:
            continue
        rank = len(shape)
        positive = ir.node(
            "Constant", [], {"value": ir.tensor([a + rank if a < 0 else a for a in axes], dtype=ir.DataType.INT64)}
        )
        node.graph.insert_before(node, positive)
        node.replace_input_with(1, positive.outputs[0])
        count += 1
    return count
