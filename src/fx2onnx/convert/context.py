"""The object every converter receives as ``ctx``: builder, FX node, helpers.

Converters write ONNX nodes with ``ctx.op.<OpType>(inputs..., attr=value)`` and
use the helpers below for constants, casts, shapes and subgraphs.
"""

from __future__ import annotations

from typing import Any, Sequence

import onnx_ir as ir
import torch

from .builder import ONNX_TO_TORCH_DTYPE, GraphBuilder, onnx_dtype
from .errors import ConversionError


def is_symbolic(x: Any) -> bool:
    return isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool))


class ConversionContext:
    """State shared by converters while converting one FX node."""

    def __init__(self, builder: GraphBuilder, interpreter: Any, node: torch.fx.Node | None = None):
        self.builder = builder
        self.interpreter = interpreter
        self.node = node

    @property
    def op(self):
        """``ctx.op.Add(x, y)``: creates nodes in the current graph."""
        return self.builder.op

    @property
    def opset(self) -> int:
        """The opset of the main domain the model is built for."""
        return self.builder.opset

    # information from the FX node
    def val(self, index: int | None = None) -> Any:
        """The fake value(s) torch.export computed for the current node (``node.meta['val']``)."""
        v = self.node.meta.get("val") if self.node is not None else None
        if index is not None and isinstance(v, (list, tuple)):
            return v[index]
        return v

    def out_dtype(self, index: int | None = None) -> torch.dtype:
        """The torch dtype of the (index-th) output of the current node."""
        v = self.val(index)
        if isinstance(v, (list, tuple)):
            v = v[0]
        if isinstance(v, torch.Tensor):
            return v.dtype
        if isinstance(v, (torch.SymInt, int)) and not isinstance(v, bool):
            return torch.int64
        if isinstance(v, (torch.SymFloat, float)):
            return torch.float32
        if isinstance(v, (torch.SymBool, bool)):
            return torch.bool
        raise self.error(f"Cannot infer the output dtype of node {self.node}")

    def out_rank(self, index: int | None = None) -> int:
        """The rank of the (index-th) output of the current node, 0 for a number."""
        v = self.val(index)
        return v.dim() if isinstance(v, torch.Tensor) else 0

    def error(self, message: str) -> ConversionError:
        """A ConversionError pointing at the current node (raise it)."""
        return ConversionError(message, self.node)

    # values
    @staticmethod
    def dtype(value: ir.Value) -> torch.dtype | None:
        """The torch dtype of an ONNX value when known."""
        if value is None or value.dtype is None:
            return None
        return ONNX_TO_TORCH_DTYPE.get(value.dtype)

    @staticmethod
    def rank(value: ir.Value) -> int | None:
        """The rank of an ONNX value, None when its shape is unknown."""
        return None if value.shape is None else len(value.shape)

    def const(self, value: Any, dtype: torch.dtype | ir.DataType | None = None) -> ir.Value:
        """A constant value (Constant node)."""
        return self.builder.constant(value, dtype)

    def cast(self, value: ir.Value, dtype: torch.dtype) -> ir.Value:
        """Casts ``value`` to ``dtype`` unless it already has it."""
        if self.dtype(value) == dtype:
            return value
        out = self.op.Cast(value, to=onnx_dtype(dtype))
        out.dtype = onnx_dtype(dtype)
        if value.shape is not None:
            out.shape = value.shape
        return out

    def as_value(self, x: Any, dtype: torch.dtype | None = None) -> ir.Value:
        """A Value from a Value or a Python scalar/list (cast to ``dtype`` when given)."""
        if isinstance(x, ir.Value):
            return x if dtype is None else self.cast(x, dtype)
        if dtype is None:
            if isinstance(x, bool):
                dtype = torch.bool
            elif isinstance(x, int):
                dtype = torch.int64
            else:
                dtype = torch.float32
        return self.const(x, dtype)

    def scalar_1d(self, x: Any) -> ir.Value:
        """An int64 tensor of shape [1] from an int or a 0-d/1-d value."""
        if isinstance(x, ir.Value):
            x = self.cast(x, torch.int64)
            if x.shape is not None and len(x.shape) == 1:
                return x
            return self.op.Reshape(x, self.const([1], torch.int64))
        return self.const([int(x)], torch.int64)

    def shape_value(self, dims: Sequence[Any]) -> ir.Value:
        """A 1-D int64 value from a list of ints and 0-d int values (a shape)."""
        if isinstance(dims, ir.Value):
            return self.cast(dims, torch.int64)
        if all(not isinstance(d, ir.Value) for d in dims):
            return self.const([int(d) for d in dims], torch.int64)
        parts: list[ir.Value] = []
        pending: list[int] = []
        for d in dims:
            if isinstance(d, ir.Value):
                if pending:
                    parts.append(self.const(pending, torch.int64))
                    pending = []
                parts.append(self.scalar_1d(d))
            else:
                pending.append(int(d))
        if pending:
            parts.append(self.const(pending, torch.int64))
        if len(parts) == 1:
            return parts[0]
        return self.op.Concat(*parts, axis=0)

    def dim_size(self, value: ir.Value, axis: int) -> ir.Value:
        """The size of one dimension as a 0-d int64 value."""
        s = self.op.Shape(value, start=axis, end=axis + 1 if axis != -1 else None)
        return self.op.Squeeze(s, self.const([0], torch.int64))

    def set_type(self, value: ir.Value, dtype: torch.dtype | None = None, shape: Sequence[Any] | None = None) -> ir.Value:
        """Sets the dtype and shape of an ONNX value when given; returns the value."""
        if dtype is not None:
            value.dtype = onnx_dtype(dtype)
        if shape is not None:
            value.shape = ir.Shape(list(shape))
        return value

    # subgraphs
    def subgraph(
        self,
        graph_module: torch.fx.GraphModule,
        name: str,
        input_values: Sequence[ir.Value | Any] | None = None,
        graph_inputs: Sequence[tuple[str, Any]] | None = None,
    ) -> tuple[ir.Graph, list[ir.Value]]:
        """Converts an FX GraphModule (a cond branch, a scan body...) into an ONNX subgraph.

        :param graph_module: the FX graph to convert
        :param name: base name of the subgraph
        :param input_values: values (from the outer graph) bound to the placeholders
            not listed in ``graph_inputs``; outer-scope references are legal in ONNX subgraphs
        :param graph_inputs: ``(placeholder index, fake value)`` pairs: these
            placeholders become inputs of the subgraph (Loop/Scan bodies)
        :return: the ONNX graph and its output values
        """
        return self.interpreter.convert_subgraph(self, graph_module, name, input_values, graph_inputs)

    # onnxscript functions
    def call_onnxscript(self, fn: Any, *args: Any, **kwargs: Any) -> ir.Value | tuple[ir.Value, ...]:
        """Calls an :epkg:`onnxscript` function (``@onnxscript.script()``) as a local function.

        Tensor parameters receive ``args`` (Values, or Python scalars made constants),
        the others become attributes of the call; the function is added once to the model
        (its default opset follows the model's).

        .. code-block:: python

            from onnxscript import opset18 as op
            import onnxscript

            @onnxscript.script()
            def scaled_relu(x, alpha: float):
                return op.Relu(x) * op.CastLike(alpha, x)

            def convert_myop(ctx, node, x, alpha):
                return ctx.call_onnxscript(scaled_relu, x, alpha)
        """
        import inspect

        proto = fn.to_function_proto()
        params = list(inspect.signature(fn.function).parameters.values())
        bound = inspect.signature(fn.function).bind(*args, **kwargs)
        inputs: list[ir.Value | None] = []
        attributes: dict[str, Any] = {}
        input_names, attr_names = list(proto.input), set(proto.attribute) | {a.name for a in proto.attribute_proto}
        for p in params:
            if p.name not in bound.arguments:
                if p.name in input_names:
                    inputs.append(None)
                continue
            value = bound.arguments[p.name]
            if p.name in attr_names:
                if p.annotation in (float, "float"):
                    value = float(value)
                elif p.annotation in (int, "int"):
                    value = int(value)
                attributes[p.name] = value
            else:
                inputs.append(value if value is None or isinstance(value, ir.Value) else self.as_value(value))
        key = (proto.domain, proto.name, proto.overload)
        functions = self.builder.functions
        if key not in functions:
            function = ir.serde.deserialize_function(proto)
            for domain, version in list(function.opset_imports.items()):
                if domain == "":
                    function.opset_imports[""] = self.opset
                elif domain not in self.builder.opset_imports:
                    self.builder.opset_imports[domain] = version
            functions[key] = function
        self.builder.opset_imports.setdefault(proto.domain, 1)
        return self.builder.make_node(
            proto.name, inputs, attributes, num_outputs=len(proto.output), domain=proto.domain
        )
