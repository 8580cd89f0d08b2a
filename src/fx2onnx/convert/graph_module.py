"""Converts a plain FX GraphModule (as dynamo or aot_autograd hand it) into ONNX.

:func:`fx2onnx.to_onnx` starts from an ExportedProgram whose signature tells
weights from inputs. A graph given to a ``torch.compile`` backend has no such
signature: every placeholder is an input (weights included), with an example
value (a real or a fake tensor, a SymInt, an int). This module turns such a
graph into an ONNX model with one ONNX input per tensor or symbolic placeholder.

.. code-block:: python

    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from fx2onnx.convert.graph_module import convert_graph_module

    def f(x, y):
        return torch.relu(x) + y

    x, y = torch.randn(2, 3), torch.randn(2, 3)
    gm = make_fx(f)(x, y)
    model = convert_graph_module(gm, [x, y])  # an onnx_ir.Model
"""

from __future__ import annotations

from typing import Any, Sequence

import onnx_ir as ir
import torch

from .api import _version
from .builder import DEFAULT_OPSET, GraphBuilder
from .dispatcher import Dispatcher
from .errors import ConversionError
from .interpreter import DimNamer, Interpreter

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)

aten = torch.ops.aten

#: the operators giving a view of their first argument, torch computes them without a copy
_VIEW_TARGETS = frozenset(
    {
        aten.detach.default,
        aten.alias.default,
        aten.t.default,
        aten.permute.default,
        aten.transpose.int,
        aten.view.default,
        aten._unsafe_view.default,
        aten.unsqueeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.expand.default,
    }
)


def _is_constant_arg(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_is_constant_arg(v) for v in value)
    return value is None or (isinstance(value, (int, float, bool)) and not isinstance(value, _SYMBOLIC))


def _view_chain(node: Any) -> tuple[torch.fx.Node, tuple] | None:
    """(root, chain) when ``node`` is a chain of views with constant arguments over ``root``
    (a node which is no such view); the chain lists (target, args, kwargs) from the root."""
    chain = []
    while (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target in _VIEW_TARGETS
        and isinstance(node.args[0], torch.fx.Node)
        and _is_constant_arg(list(node.args[1:]))
        and _is_constant_arg(list(node.kwargs.values()))
    ):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.is_complex():
            return None  # a complex value travels as its real pair in ONNX
        chain.append((node.target, tuple(node.args[1:]), dict(node.kwargs)))
        node = node.args[0]
    if not chain or not isinstance(node, torch.fx.Node):
        return None
    if node.op != "placeholder":
        # onnxruntime gives contiguous tensors: the views are those of the graph only when
        # the value has contiguous strides in the graph too (not a transposed attention output)
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not val.is_contiguous():
            return None
    return node, tuple(reversed(chain))


def _placeholder_value(node: torch.fx.Node, example: Any) -> Any:
    """The value describing a placeholder: its example, or the fake value in its meta."""
    if example is not None:
        return example
    return node.meta.get("val", node.meta.get("example_value"))


def storage_permutation(value: Any) -> tuple[int, ...] | None:
    """``perm`` such that ``value.permute(perm)`` is contiguous, when ``value`` is a dense
    non-contiguous permutation of a contiguous tensor (a transposed weight); None otherwise
    (contiguous, strides unknown or symbolic, overlapping or with holes)."""
    if not isinstance(value, torch.Tensor) or value.dim() < 2 or value.is_complex():
        return None
    strides = value.stride()
    if not all(type(s) is int for s in strides) or not all(type(d) is int for d in value.shape):
        return None  # symbolic: not decided at conversion time (and no guard added)
    if value.is_contiguous():
        return None
    perm = tuple(sorted(range(value.dim()), key=lambda d: -strides[d]))  # stable: ties keep their order
    if not value.permute(perm).is_contiguous():
        return None
    return perm


def _scalar_dtype(value: Any) -> torch.dtype:
    if isinstance(value, (torch.SymBool, bool)):
        return torch.bool
    if isinstance(value, (torch.SymInt, int)):
        return torch.int64
    return torch.float32


def convert_graph_module(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    static_shapes: bool = False,
    target_opset: int = DEFAULT_OPSET,
    dispatcher: Dispatcher | None = None,
    verbose: int = 0,
    view_outputs: bool = False,
    permuted_inputs: bool = False,
) -> ir.Model:
    """Converts an FX GraphModule of aten ops into an :class:`onnx_ir.Model`.

    :param gm: the graph, its nodes are aten ops (``node.meta["val"]`` holds
        their fake results, as dynamo and aot_autograd leave them)
    :param example_inputs: one value per placeholder (tensors, fake tensors,
        SymInt, int, None); a tensor or a symbolic scalar becomes an ONNX input,
        a plain Python value is kept as a constant of the model
    :param static_shapes: write the example's concrete shapes on the ONNX inputs
        (instead of the symbolic dimensions of the fake values)
    :param target_opset: ONNX opset of the main domain
    :param dispatcher: user converters (:class:`fx2onnx.Dispatcher`)
    :param verbose: verbosity
    :param view_outputs: an output which is a view (detach, transpose, view, expand...
        with constant arguments) of an input or of another computed value is left to
        the caller (``("view", ...)`` in the layout): the model does not copy it
        (aot_autograd saves many such views for backward)
    :return: the model; its inputs follow the placeholders that became inputs
        (see :func:`graph_module_input_indices`), its outputs the tensor outputs
        of the graph (see :func:`graph_module_output_layout`)
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ValueError(
            f"The graph has {len(placeholders)} placeholders but {len(example_inputs)} example inputs were given: "
            f"give one example value per placeholder."
        )
    interpreter = Interpreter(dispatcher, DimNamer(), verbose=verbose)
    builder = GraphBuilder("main_graph", target_opset)
    env: dict[torch.fx.Node, Any] = {}
    input_perms: dict[int, tuple[int, ...]] = {}
    for index, (node, example) in enumerate(zip(placeholders, example_inputs)):
        value = _placeholder_value(node, example)
        if isinstance(value, torch.Tensor):
            fake = node.meta.get("val", value)
            shape = list(value.shape) if static_shapes or not isinstance(fake, torch.Tensor) else list(fake.shape)
            dims = [interpreter.dim_namer(d) for d in shape]
            perm = storage_permutation(value) if permuted_inputs else None
            if perm is None:
                env[node] = builder.add_input(node.name, value.dtype, dims)
                continue
            input_perms[index] = perm
            stored = builder.add_input(node.name, value.dtype, [dims[p] for p in perm])
            inverse = sorted(range(len(perm)), key=lambda d: perm[d])
            env[node] = builder.op.Transpose(stored, perm=inverse)
            env[node].dtype, env[node].shape = stored.dtype, ir.Shape(dims)
        elif isinstance(value, _SYMBOLIC):
            env[node] = builder.add_input(node.name, _scalar_dtype(value), [])
        else:
            env[node] = value  # None, a static int, a float...
    outputs = interpreter.run_nodes(builder, gm.graph, env, owner=gm)
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    fx_outputs = output_node.args[0]
    if not isinstance(fx_outputs, (list, tuple)):
        fx_outputs = [fx_outputs]
    layout: list[tuple[str, Any]] = []
    given_back = [isinstance(f, torch.fx.Node) and f.op == "placeholder" and isinstance(v, ir.Value) for v, f in zip(outputs, fx_outputs)]
    views: dict[int, tuple[torch.fx.Node, tuple]] = {}
    if view_outputs:
        for i, (value, fx_out) in enumerate(zip(outputs, fx_outputs)):
            found = _view_chain(fx_out) if isinstance(value, ir.Value) else None
            if found is not None and isinstance(env.get(found[0]), ir.Value):
                views[i] = found
    computed = any(
        isinstance(v, ir.Value) and not back and (i not in views or views[i][0].op != "placeholder")
        for i, (v, back) in enumerate(zip(outputs, given_back))
    )
    if not computed:
        views.clear()  # the model keeps one output at least
        computed = any(isinstance(v, ir.Value) and not back for v, back in zip(outputs, given_back))
    onnx_index: dict[torch.fx.Node, int] = {}  # the computed outputs, by node

    def add_output(value: ir.Value, node: Any, reuse: bool = False) -> int:
        if reuse and node in onnx_index:
            return onnx_index[node]
        name = node.name if isinstance(node, torch.fx.Node) else None
        out = builder.add_output(value, name)
        if out is not value:
            out.dtype, out.shape = value.dtype, value.shape
        if isinstance(node, torch.fx.Node):
            onnx_index.setdefault(node, len(builder.outputs) - 1)
        return len(builder.outputs) - 1

    for i, (value, fx_out, back) in enumerate(zip(outputs, fx_outputs, given_back)):
        if back and computed:
            # an input given back as it is (a weight aot_autograd saves for backward): the
            # caller returns its own tensor, no copy through an Identity node (kept when the
            # model would have no output otherwise)
            layout.append(("input", placeholders.index(fx_out)))
        elif i in views:
            layout.append(("view", None))  # filled below, once the computed outputs are known
        elif isinstance(value, ir.Value):
            layout.append(("onnx", add_output(value, fx_out)))
        elif isinstance(value, (list, tuple)) and any(isinstance(v, ir.Value) for v in value):
            raise ConversionError("Nested outputs are not supported by convert_graph_module.", output_node)
        else:
            layout.append(("const", value))
    for i, (root, chain) in views.items():
        # a view of an input, or of a computed value (an ONNX output, added if it is not one yet)
        source = ("input", placeholders.index(root)) if root.op == "placeholder" else ("onnx", add_output(env[root], root, reuse=True))
        layout[i] = ("view", (source, chain))

    model = builder.to_model(producer_version=_version())
    model.meta["input_indices"] = [i for i, node in enumerate(placeholders) if isinstance(env[node], ir.Value)]
    model.meta["input_names"] = [v.name for v in model.graph.inputs]
    model.meta["output_layout"] = layout
    model.meta["input_perms"] = input_perms
    return model


def graph_module_input_indices(model: ir.Model) -> list[int]:
    """Indices of the placeholders which :func:`convert_graph_module` made ONNX inputs."""
    return list(model.meta["input_indices"])


def graph_module_input_names(model: ir.Model) -> list[str]:
    """Names of the ONNX inputs, in the order of :func:`graph_module_input_indices`."""
    return list(model.meta["input_names"])


def graph_module_output_layout(model: ir.Model) -> list[tuple[str, Any]]:
    """How the graph's outputs map to the ONNX outputs of a model built by :func:`convert_graph_module`.

    One pair per output of the FX graph: ``("onnx", k)`` for the k-th ONNX output,
    ``("input", i)`` for the i-th placeholder returned as it is (no ONNX output),
    ``("view", (source, chain))`` for a view (``view_outputs=True``): ``source`` is
    ``("onnx", k)`` or ``("input", i)``, ``chain`` the aten view operators to apply to it
    as ``(target, args, kwargs)``,
    ``("const", value)`` for a value known at conversion time (None, an int).
    """
    return list(model.meta["output_layout"])
