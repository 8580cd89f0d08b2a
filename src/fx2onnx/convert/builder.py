"""A thin layer over :epkg:`onnx-ir` to build graphs, subgraphs and functions.

.. code-block:: python

    import onnx_ir as ir
    from fx2onnx.convert.builder import GraphBuilder

    g = GraphBuilder("demo", opset=18)
    x = g.add_input("x", ir.DataType.FLOAT, ["batch", 4])
    y = g.op.Relu(x)
    g.add_output(y, "y")
    model = g.to_model()
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import onnx_ir as ir
import torch

from ..validation import to_numpy
from ..weights.tensors import initializer_tensor

TORCH_TO_ONNX_DTYPE: dict[torch.dtype, ir.DataType] = {
    torch.float32: ir.DataType.FLOAT,
    torch.float16: ir.DataType.FLOAT16,
    torch.bfloat16: ir.DataType.BFLOAT16,
    torch.float64: ir.DataType.DOUBLE,
    torch.int64: ir.DataType.INT64,
    torch.int32: ir.DataType.INT32,
    torch.int16: ir.DataType.INT16,
    torch.int8: ir.DataType.INT8,
    torch.uint8: ir.DataType.UINT8,
    torch.uint16: ir.DataType.UINT16,
    torch.uint32: ir.DataType.UINT32,
    torch.uint64: ir.DataType.UINT64,
    torch.bool: ir.DataType.BOOL,
    torch.complex64: ir.DataType.COMPLEX64,
    torch.complex128: ir.DataType.COMPLEX128,
    torch.float8_e4m3fn: ir.DataType.FLOAT8E4M3FN,
    torch.float8_e5m2: ir.DataType.FLOAT8E5M2,
}
ONNX_TO_TORCH_DTYPE = {v: k for k, v in TORCH_TO_ONNX_DTYPE.items()}


def onnx_dtype(dtype: torch.dtype | ir.DataType | int) -> ir.DataType:
    """Converts a torch dtype (or an ONNX enum) into an :class:`onnx_ir.DataType`."""
    if isinstance(dtype, ir.DataType):
        return dtype
    if isinstance(dtype, int):
        return ir.DataType(dtype)
    if dtype not in TORCH_TO_ONNX_DTYPE:
        raise TypeError(f"torch dtype {dtype} has no ONNX equivalent.")
    return TORCH_TO_ONNX_DTYPE[dtype]


class _OpNamespace:
    """``builder.op.Add(x, y)`` creates an Add node; keyword arguments become attributes.

    Special keywords: ``_outputs`` (number of outputs, returns a tuple when > 1),
    ``_domain`` (operator domain), ``_name`` (node name).
    """

    def __init__(self, builder: "GraphBuilder"):
        self._builder = builder

    def __getattr__(self, op_type: str):
        if op_type.startswith("__"):
            raise AttributeError(op_type)

        def make(*inputs: Any, _outputs: int = 1, _domain: str = "", _name: str | None = None, **attributes: Any):
            return self._builder.make_node(
                op_type, inputs, attributes, num_outputs=_outputs, domain=_domain, name=_name
            )

        make.__name__ = op_type
        return make


#: the opset of the main domain when none is given: the one torch.onnx.export uses (standard
#: ``Gelu`` and others exist from opset 20)
DEFAULT_OPSET = 20


class GraphBuilder:
    """Creates nodes, inputs, initializers and outputs of one ONNX graph.

    Subgraphs (``If`` branches, ``Loop`` and ``Scan`` bodies) are built by a child
    builder (:meth:`subgraph`) sharing the name scope of its parent, so that every
    name stays unique in the whole model.
    """

    def __init__(
        self,
        name: str = "main_graph",
        opset: int = DEFAULT_OPSET,
        parent: "GraphBuilder | None" = None,
    ):
        self.name = name
        self.opset = opset
        self.parent = parent
        self.inputs: list[ir.Value] = []
        self.outputs: list[ir.Value] = []
        self.nodes: list[ir.Node] = []
        self.initializers: dict[str, ir.Value] = {} if parent is None else parent.initializers
        self.opset_imports: dict[str, int] = {"": opset} if parent is None else parent.opset_imports
        self.functions: dict[tuple[str, str, str], ir.Function] = {} if parent is None else parent.functions
        self._used_names: set[str] = set() if parent is None else parent._used_names
        self._constant_cache: dict[tuple, ir.Value] = {}
        self.metadata: dict[str, str] = {}
        self.op = _OpNamespace(self)

    # names
    def unique_name(self, base: str) -> str:
        """Returns ``base`` or ``base_N``, never returned before in this model."""
        base = base or "v"
        name, i = base, 0
        while name in self._used_names:
            i += 1
            name = f"{base}_{i}"
        self._used_names.add(name)
        return name

    def rename(self, value: ir.Value, name: str) -> None:
        """Gives ``value`` the name ``name`` (made unique)."""
        if value.name == name:
            return
        if value.name in self._used_names:
            self._used_names.discard(value.name)
        value.name = self.unique_name(name)

    # graph inputs, outputs, initializers
    def add_input(self, name: str, dtype: torch.dtype | ir.DataType | None, shape: Sequence[Any] | None) -> ir.Value:
        value = ir.Value(name=self.unique_name(name))
        if isinstance(dtype, torch.dtype) and dtype.is_complex:
            # a complex input is carried as a real pair (torch.view_as_real): trailing dimension 2
            dtype = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, torch.float16)
            shape = None if shape is None else [*shape, 2]
        if dtype is not None:
            value.dtype = onnx_dtype(dtype)
        if shape is not None:
            value.shape = ir.Shape(list(shape))
        self.inputs.append(value)
        return value

    def add_output(self, value: ir.Value, name: str | None = None) -> ir.Value:
        """Marks ``value`` as an output; inserts an Identity when it is already an input or output."""
        producer = value.producer()
        if (
            producer is None  # a graph input, an initializer or an outer-scope value
            or any(value is o for o in self.outputs)
            or (self.parent is not None and not any(producer is n for n in self.nodes))
        ):
            value = self.op.Identity(value)
        if name is not None:
            self.rename(value, name)
        self.outputs.append(value)
        return value

    def add_initializer(self, name: str, tensor: torch.Tensor | np.ndarray | ir.TensorProtocol) -> ir.Value:
        """Adds a weight, kept as an initializer named ``name`` over the tensor's memory
        (see :func:`fx2onnx.weights.initializer_tensor`: no copy)."""

        root = self.root()
        if name in root.initializers:
            return root.initializers[name]
        ir_tensor = initializer_tensor(name, tensor)
        value = ir.Value(name=root.unique_name(name), shape=ir.Shape(ir_tensor.shape), type=ir.TensorType(ir_tensor.dtype), const_value=ir_tensor)
        root.initializers[value.name] = value
        return value

    def root(self) -> "GraphBuilder":
        b = self
        while b.parent is not None:
            b = b.parent
        return b

    # nodes
    def make_node(
        self,
        op_type: str,
        inputs: Iterable[ir.Value | None],
        attributes: dict[str, Any] | None = None,
        *,
        num_outputs: int = 1,
        domain: str = "",
        name: str | None = None,
    ) -> ir.Value | tuple[ir.Value, ...]:
        """Appends a node and returns its output value(s)."""
        ins = []
        for v in inputs:
            if v is not None and not isinstance(v, ir.Value):
                raise TypeError(f"Input of {op_type} must be an onnx_ir.Value or None, not {type(v)}: {v!r}")
            ins.append(v)
        while ins and ins[-1] is None:  # trailing optional inputs are omitted (some rewriters expect it)
            ins.pop()
        attrs = ir.convenience.convert_attributes({k: v for k, v in (attributes or {}).items() if v is not None})
        base = self.metadata.get("fx_node", op_type.lower())
        node = ir.Node(
            domain,
            op_type,
            ins,
            attrs,
            num_outputs=num_outputs,
            name=self.unique_name(name or f"{base}_{op_type}"),
            metadata_props=dict(self.metadata) if self.metadata else None,
        )
        for out in node.outputs:
            out.name = self.unique_name(f"{base}_{op_type.lower()}")
        if domain and domain not in self.opset_imports:
            self.opset_imports[domain] = 1
        self.nodes.append(node)
        return node.outputs[0] if num_outputs == 1 else tuple(node.outputs)

    def constant(self, value: Any, dtype: torch.dtype | ir.DataType | None = None) -> ir.Value:
        """A small constant (Python scalar, list, numpy array or tensor) as a Constant node.

        Constants are cached by value within a graph.
        """
        if isinstance(value, torch.Tensor):
            array = to_numpy(value)
        else:
            array = np.asarray(value)
        if dtype is not None:
            target = onnx_dtype(dtype)
            if target == ir.DataType.BFLOAT16:
                import ml_dtypes

                array = array.astype(ml_dtypes.bfloat16)
            else:
                array = array.astype(target.numpy())
        elif array.dtype == np.float64 and not isinstance(value, np.ndarray):
            array = array.astype(np.float32)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key in self._constant_cache:
            return self._constant_cache[key]
        tensor = ir.tensor(array)
        out = self.make_node("Constant", [], {"value": tensor})
        out.dtype = tensor.dtype
        out.shape = ir.Shape(array.shape)
        out.const_value = tensor
        self._constant_cache[key] = out
        return out

    # subgraphs and model
    def subgraph(self, name: str) -> "GraphBuilder":
        """A child builder for a subgraph (If branch, Loop or Scan body)."""
        return GraphBuilder(self.unique_name(name), self.opset, parent=self)

    def to_graph(self) -> ir.Graph:
        initializers = list(self.initializers.values()) if self.parent is None else []
        return ir.Graph(
            self.inputs,
            self.outputs,
            nodes=self.nodes,
            initializers=initializers,
            opset_imports=dict(self.opset_imports) if self.parent is None else None,
            name=self.name,
        )

    def to_model(self, producer_version: str = "") -> ir.Model:
        graph = self.to_graph()
        return ir.Model(
            graph,
            ir_version=10 if self.opset >= 21 else 9 if self.opset >= 19 else 8,
            producer_name="fx2onnx",
            producer_version=producer_version,
            functions=list(self.functions.values()),
        )
