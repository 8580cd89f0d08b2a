"""Walks an FX graph and calls one converter per node.

Each FX node becomes one or several ONNX nodes; the ONNX value keeps the FX
node's name, and every ONNX node carries metadata naming its FX node, module
path and the user's source line. Shapes and dtypes of the results are set from
``node.meta["val"]`` (what torch.export computed) and checked against what the
converter produced when it is known.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import onnx_ir as ir
import sympy
import torch

from . import ops as _builtin_converters  # noqa: F401 (registers the built-in converters)
from . import registry
from .builder import TORCH_TO_ONNX_DTYPE, GraphBuilder, onnx_dtype
from .complex_values import _value_type, involves_complex, pair_dtype  # noqa: F401
from .context import ConversionContext
from .errors import ConversionError, UnsupportedOpError, node_module_path, node_source_line, target_name


def _strip_outer_parentheses(text: str) -> str:
    """``((seq+1)//2)`` -> ``(seq+1)//2``: only when the outer pair encloses everything."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, c in enumerate(text):
            depth += c == "("
            depth -= c == ")"
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1]
    return text


class DimNamer:
    """Turns torch's symbols (``s77``) into the names the user gave (``batch``)."""

    def __init__(self, names: dict[sympy.Symbol, str] | None = None):
        self.names: dict[sympy.Symbol, str] = dict(names or {})

    def __call__(self, dim: Any) -> int | str:
        if isinstance(dim, int):
            return dim
        expr = dim.node.expr if isinstance(dim, torch.SymInt) else dim
        if isinstance(expr, (int, sympy.Integer)):
            return int(expr)
        if expr in self.names:
            return self.names[expr]
        subs = {s: sympy.Symbol(self.names[s]) for s in expr.free_symbols if s in self.names}
        text = (str(expr.xreplace(subs)) if subs else str(expr)).replace(" ", "")
        return _strip_outer_parentheses(text)

    def shape(self, fake: torch.Tensor) -> list[int | str]:
        return [self(d) for d in fake.shape]


class Interpreter:
    """Converts FX graphs into ONNX with the registered converters.

    :param dispatcher: user converters looked up before the built-in ones
    :param dim_namer: maps torch symbols to dimension names
    """

    def __init__(self, dispatcher: Any = None, dim_namer: DimNamer | None = None, verbose: int = 0):
        self.dispatcher = dispatcher
        self.dim_namer = dim_namer or DimNamer()
        self.verbose = verbose

    # helpers
    def set_value_info(self, value: ir.Value, val: Any) -> None:
        dtype, shape = _value_type(val)
        if dtype is not None and dtype in TORCH_TO_ONNX_DTYPE:
            if value.dtype is not None and value.dtype != onnx_dtype(dtype) and value.producer() is not None:
                raise ConversionError(
                    f"Converter produced dtype {value.dtype} but torch expects {dtype} for {value.name!r}."
                )
            value.dtype = onnx_dtype(dtype)
        if shape is not None:
            value.shape = ir.Shape([self.dim_namer(d) for d in shape])

    def find_converter(self, target: Any, complex_values: bool = False) -> Callable[..., Any] | None:
        """The user's converter, else the built-in one (the complex one when ``complex_values``)."""
        if self.dispatcher is not None:
            fn = self.dispatcher.find(target)
            if fn is not None:
                return fn
        if complex_values:
            return registry.lookup_complex(target)
        return registry.lookup(target)

    # graph traversal
    def run_nodes(self, builder: GraphBuilder, graph: torch.fx.Graph, env: dict[torch.fx.Node, Any], owner: Any = None) -> Any:
        """Converts every call node of ``graph``; placeholders must already be in ``env``.

        Returns the (mapped) arguments of the output node.
        """
        for node in graph.nodes:
            if node.op == "placeholder":
                if node not in env:
                    raise ConversionError("Placeholder without a value.", node)
                continue
            if node.op == "output":
                return self._map_args(node.args[0], env)
            if node.op == "get_attr":
                env[node] = self._get_attr(builder, owner, node)
                continue
            if node.op != "call_function":
                raise ConversionError(f"Unsupported FX node kind {node.op!r}.", node)
            env[node] = self.convert_node(builder, node, env)
        raise ConversionError("FX graph has no output node.")

    def _get_attr(self, builder: GraphBuilder, owner: Any, node: torch.fx.Node) -> Any:
        obj = owner
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        if isinstance(obj, torch.Tensor):
            return builder.add_initializer(str(node.target), obj)
        return obj

    def _map_args(self, args: Any, env: dict[torch.fx.Node, Any]) -> Any:
        if isinstance(args, torch.fx.Node):
            return env[args]
        if isinstance(args, (list, tuple)):
            mapped = [self._map_args(a, env) for a in args]
            return type(args)(mapped) if isinstance(args, tuple) else mapped
        if isinstance(args, dict):
            return {k: self._map_args(v, env) for k, v in args.items()}
        return args

    def convert_node(self, builder: GraphBuilder, node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> Any:
        complex_values = involves_complex(node)
        fn = self.find_converter(node.target, complex_values)
        if fn is None and complex_values and registry.lookup(node.target) is not None:
            raise ConversionError(
                f"{target_name(node.target)} has no converter for complex values (carried as real pairs, "
                f"a trailing dimension of 2): give one through fx2onnx.Dispatcher.",
                node,
            )
        if fn is None:
            raise UnsupportedOpError(node.target, node)
        args = self._map_args(node.args, env)
        kwargs = self._map_args(node.kwargs, env)
        previous = builder.metadata
        builder.metadata = _node_metadata(node)
        ctx = ConversionContext(builder, self, node)
        try:
            result = fn(ctx, node, *args, **kwargs)
        except ConversionError:
            raise
        except Exception as e:
            raise ConversionError(
                f"Converter {getattr(fn, '__name__', fn)} failed on {target_name(node.target)}: "
                f"{type(e).__name__}: {e}",
                node,
            ) from e
        finally:
            builder.metadata = previous
        return self._finalize_outputs(builder, node, result)

    def _finalize_outputs(self, builder: GraphBuilder, node: torch.fx.Node, result: Any) -> Any:
        val = node.meta.get("val")
        if isinstance(result, ir.Value):
            self._name_and_type(builder, result, node.name, val)
            return result
        if isinstance(result, (list, tuple)):
            vals = val if isinstance(val, (list, tuple)) else [None] * len(result)
            for i, (r, v) in enumerate(zip(result, vals)):
                if isinstance(r, ir.Value):
                    self._name_and_type(builder, r, f"{node.name}_{i}" if len(result) > 1 else node.name, v)
            return result
        return result  # Python constants (static ints, GraphModules) stay Python objects

    def _name_and_type(self, builder: GraphBuilder, value: ir.Value, name: str, val: Any) -> None:
        producer = value.producer()
        if producer is not None and producer.op_type != "Constant" and value.name and not value.meta.get("fx_named"):
            builder.rename(value, name)
            value.meta["fx_named"] = True
        try:
            self.set_value_info(value, val)
        except ConversionError as e:
            raise ConversionError(str(e)) from None

    # subgraphs
    def convert_subgraph(
        self,
        ctx: ConversionContext,
        graph_module: torch.fx.GraphModule,
        name: str,
        input_values: Sequence[Any] | None,
        graph_inputs: Sequence[tuple[int, Any]] | None,
    ) -> tuple[ir.Graph, list[ir.Value]]:
        sub = ctx.builder.subgraph(name)
        placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
        env: dict[torch.fx.Node, Any] = {}
        graph_input_index = {i for i, _ in graph_inputs or ()}
        outer = iter(input_values or [])
        for i, ph in enumerate(placeholders):
            if i in graph_input_index:
                val = dict(graph_inputs)[i]
                dtype, shape = _value_type(val)
                value = sub.add_input(f"{name}_{ph.name}", dtype, None if shape is None else [self.dim_namer(d) for d in shape])
                env[ph] = value
            else:
                try:
                    env[ph] = next(outer)
                except StopIteration:
                    raise ConversionError(f"Subgraph {name!r}: no value for placeholder {ph.name!r}.", ctx.node) from None
        outputs = self.run_nodes(sub, graph_module.graph, env, owner=graph_module)
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        values = []
        for o in outputs:
            if not isinstance(o, ir.Value):
                o = sub.constant(o)
            values.append(sub.add_output(o))
        return sub.to_graph(), values


def _node_metadata(node: torch.fx.Node) -> dict[str, str]:
    meta = {"fx_node": node.name, "fx_target": target_name(node.target)}
    module = node_module_path(node)
    if module:
        meta["module"] = module
    source = node_source_line(node)
    if source:
        meta["source"] = source
    return meta


__all__ = ["Interpreter", "DimNamer"]
