"""Export a deep model by capturing two of its layers: the others are stamped in ONNX.

``torch.export`` spends most of an LLM's export tracing its decoder layers one after the other
(0.7 s per layer of Qwen3-0.6B on this machine, 20 of its 39 s of export), though they all run
the same code on weights of the same shapes. When the layers of the stack repeat (:func:`layer_stack`:
same classes, attributes, parameter shapes, only the index differs, every layer alike or a pattern of
a few, Gemma 2's sliding and global layers alternating), the model is captured with two periods of
layers (:func:`short_config`), converted, and the second period's nodes are copied for the other
layers (:func:`stamp_layers`), each copy reading its own weights and cache inputs, before the graph
is optimized as a whole. First layers of another kind (DeepSeek's dense layers before its mixtures of
experts, :attr:`LayerStack.start`) are captured before the two periods, the layers left after the last
whole period (:attr:`LayerStack.remainder`) after them, renamed as the last layers of the full stack.

The copy is exact only if the layer's graph does not depend on its index: :func:`stamp_layers`
first checks that the graphs of layers 0 and 1 are the same, node for node (operators,
attributes, and every input either shared, the layer's own weight or input, or what the
previous layer computed); anything else (a node between the layers, a value of layer 0 read
after layer 1, a subgraph) raises :class:`LayersNotRepeatable` and the caller captures the
whole model. :func:`fx2onnx.deploy.export_folder` does so and checks the folder against eager
on the full model by default.

.. code-block:: python

    from fx2onnx.deploy import export_folder

    export_folder("Qwen3-0.6B", "qwen3_onnx", log=print)
    # captured 2 of the 28 layers of model.layers, the others copied in ONNX

    # by hand: a short model captured, the weights of the full one for the copies
    stack = layer_stack(full_model)  # LayerStack(path='model.layers', count=28, period=1)
    fx2onnx.to_onnx(short_model, (), inputs, dynamic_shapes=shapes,
                    after_conversion=lambda m: stamp_layers(m, stack, full_weights.__getitem__))
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import onnx_ir as ir
import torch

from ..formats import CACHE_METADATA_KEY
from .tensors import initializer_tensor

__all__ = ["LayerStack", "LayersNotRepeatable", "adopt_layer_attributes", "layer_stack", "short_config", "stamp_layers"]

#: the layers captured when they are all alike (:attr:`LayerStack.captured` in general): layer 1 is the
#: template, layer 0 proves it does not depend on its index
CAPTURED_LAYERS = 2


class LayersNotRepeatable(ValueError):
    """The layers of a model cannot be stamped from two captured ones (the reason in the message)."""


@dataclass(frozen=True)
class LayerStack:
    """The decoder layers of a model: ``path`` of their ModuleList, ``count`` layers, repeating every
    ``period`` layers (1: all alike; 2: Gemma 2's sliding and global layers alternating)."""

    path: str
    count: int
    period: int = 1
    #: the layers before the repeated ones, captured as they are (DeepSeek's ``first_k_dense_replace`` dense
    #: layers before the mixtures of experts)
    start: int = 0

    @property
    def captured(self) -> int:
        """The layers captured: the first ``start``, then two periods, the second one the template, the first one
        the proof that the template does not depend on its place, then the ``remainder``."""
        return self.start + 2 * self.period + self.remainder

    @property
    def blocks(self) -> int:
        """The number of whole periods in the repeated part of the stack."""
        return (self.count - self.start) // self.period

    @property
    def remainder(self) -> int:
        """The layers after the last whole period (Gemma 3's 26 layers in periods of 6 leave 2), captured after
        the two periods, their weights and cache renamed as the last layers of the full stack."""
        return (self.count - self.start) % self.period


def _plain_attributes(module: torch.nn.Module) -> dict[str, Any]:
    """The attributes of a module which are plain values (the layer's index excepted)."""
    return {k: v for k, v in vars(module).items()
            if not k.startswith("_") and k != "layer_idx" and isinstance(v, (bool, int, float, str, type(None), tuple))}


def _signature(module: torch.nn.Module) -> list:
    """What makes two layers compute the same thing: the classes of the submodules, their
    parameters' and buffers' shapes and types, their plain attributes (the index excepted)."""
    items = []
    for name, sub in module.named_modules():
        attributes = _plain_attributes(sub)
        tensors = [(n, tuple(t.shape), t.dtype) for n, t in list(sub.named_parameters(recurse=False)) +
                   list(sub.named_buffers(recurse=False))]
        items.append((name, type(sub).__qualname__, sorted(attributes.items(), key=str), tensors))
    return items


def layer_stack(model: torch.nn.Module, config: Any = None, max_period: int = 8, max_start: int = 4) -> LayerStack | None:
    """The stack of decoder layers of ``model`` (the ModuleList of ``num_hidden_layers`` modules)
    which repeat with the shortest period (1: all alike; 2: sliding and global layers alternating),
    after the fewest first layers (at most ``max_start``: DeepSeek's dense layers before its mixtures of experts),
    the layers after the last whole period the start of one (Gemma 3's five sliding layers for one global in 26:
    four periods, two sliding layers left), or None when there is none: no such list, a per-layer list of the
    config that does not repeat, fewer than three periods."""
    config = config if config is not None else getattr(model, "config", None)
    count = getattr(config, "num_hidden_layers", None)
    if not isinstance(count, int) or count <= 2:
        return None
    stacks = [(name, m) for name, m in model.named_modules()
              if isinstance(m, torch.nn.ModuleList) and len(m) == count]
    if len(stacks) != 1:
        return None
    path, layers = stacks[0]
    # per-layer lists of the config (layer types...); a list of every layer's index (Llama 4's moe_layers when all
    # are mixtures of experts) names layers, it is no per-layer value
    lists = [v for v in vars(config).values() if isinstance(v, (list, tuple)) and len(v) == count
             and list(v) != list(range(count))]
    signatures = [_signature(layer) for layer in layers]
    for start in range(0, max_start + 1):
        repeated = count - start
        for period in range(1, min(max_period, repeated // 3) + 1):
            same = [(i, start + (i - start) % period) for i in range(start, count)]
            if all(signatures[i] == signatures[j] for i, j in same) and \
                    all(repr(v[i]) == repr(v[j]) for v in lists for i, j in same):
                return LayerStack(path, count, period, start)
    return None


def short_config(config: Any, layers: int = CAPTURED_LAYERS) -> Any:
    """A copy of ``config`` with ``layers`` layers (its per-layer lists cut to that length)."""
    count = config.num_hidden_layers
    short = copy.deepcopy(config)
    for key, value in vars(config).items():
        if isinstance(value, (list, tuple)) and len(value) == count:
            setattr(short, key, type(value)(value[:layers]))
    short.num_hidden_layers = layers
    return short


def adopt_layer_attributes(short_model: torch.nn.Module, model: torch.nn.Module, stack: LayerStack) -> list[str]:
    """Gives the captured layers of ``short_model`` (built from :func:`short_config`) the plain attributes of the
    same layers of the full ``model`` where they differ: a constant a layer derives from the number of layers
    (MiniCPM3 scales each residual branch by ``scale_depth / sqrt(num_hidden_layers)``) is then the full model's
    in the captured graph, and in its copies. Returns the attributes set (``model.layers.0.residual_scale``)."""
    short_layers = short_model.get_submodule(stack.path)
    layers = model.get_submodule(stack.path)
    adopted = []
    for i in range(min(stack.captured, len(short_layers))):
        full = dict(layers[i].named_modules())
        for name, sub in short_layers[i].named_modules():
            other = full.get(name)
            if other is None or type(other) is not type(sub):
                continue
            mine = _plain_attributes(sub)
            for key, value in _plain_attributes(other).items():
                if key in mine and mine[key] != value:
                    setattr(sub, key, value)
                    adopted.append(".".join(p for p in (stack.path, str(i), name, key) if p))
    return adopted


def _blocks_name(period: int) -> str:
    return "layers 0 and 1" if period == 1 else f"layers 0-{period - 1} and {period}-{2 * period - 1}"


def _layer_index(node: ir.Node, pattern: re.Pattern) -> int | None:
    match = pattern.match(node.metadata_props.get("module", ""))
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class _Numbered:
    """Names numbered by layer: ``prefix{first + k * step}suffix`` is the name of layer (block) k."""

    prefix: str
    first: int
    step: int
    suffix: str

    def __call__(self, k: int) -> str:
        return f"{self.prefix}{self.first + k * self.step}{self.suffix}"


def _renamer(name0: str, name1: str) -> _Numbered | None:
    """The numbering of the names of layers 0 and 1, which differ by one number:
    ``model.layers.0.mlp`` / ``model.layers.1.mlp``, ``past_key_values_1`` / ``past_key_values_3``
    (the value of layer k is ``1 + 2 k``); None when they differ otherwise."""
    tokens0, tokens1 = re.split(r"(\d+)", name0), re.split(r"(\d+)", name1)
    if len(tokens0) != len(tokens1):
        return None
    differ = [i for i, (t0, t1) in enumerate(zip(tokens0, tokens1)) if t0 != t1]
    if len(differ) != 1 or differ[0] % 2 == 0:
        return None
    i = differ[0]
    x0, x1 = int(tokens0[i]), int(tokens1[i])
    if x1 <= x0 or tokens0[i] != str(x0) or tokens1[i] != str(x1):
        return None
    return _Numbered("".join(tokens0[:i]), x0, x1 - x0, "".join(tokens0[i + 1:]))


#: operators of size computations: their values depend on shapes, not on the tensors' values
_SIZE_OPERATORS = {"Shape", "Size", "Constant", "Gather", "Concat", "Squeeze", "Unsqueeze", "Reshape", "Cast",
                   "Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Neg", "Abs", "Slice", "Identity", "Equal",
                   "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Where", "Expand",
                   "Range", "ConstantOfShape"}


#: operators whose two inputs can be exchanged (a layer's sum of sizes may be traced in the other order)
_COMMUTATIVE = {"Add", "Mul", "Max", "Min", "Equal", "And", "Or", "Xor"}


def _shared_sizes(layer0: list[ir.Node], in0: set, in1: set) -> set[ir.Node]:
    """The nodes of layer 0 computing a size read after it as it is (by layer 1, or by what follows the
    layers: the count of tokens a sliding cache has seen): each of them a size operator whose inputs are
    shapes (``Shape``), constants or other such nodes."""
    memo: dict[ir.Node, bool] = {}

    def size_only(node: ir.Node) -> bool:
        if node not in memo:
            memo[node] = False
            ok = node.domain == "" and node.op_type in _SIZE_OPERATORS
            if ok and node.op_type not in ("Shape", "Size"):
                for value in node.inputs:
                    if value is None or value.const_value is not None:
                        continue
                    producer = value.producer()
                    if producer is None or not size_only(producer):
                        ok = False
                        break
            memo[node] = ok
        return memo[node]

    shared: set[ir.Node] = set()
    for node in layer0:
        if any(use.node not in in0 for out in node.outputs for use in out.uses()) and size_only(node):
            stack = [node]
            while stack:
                current = stack.pop()
                if current in shared or current not in in0:
                    continue
                shared.add(current)
                if current.op_type not in ("Shape", "Size"):
                    stack.extend(v.producer() for v in current.inputs if v is not None and v.producer() is not None)
    return shared


def _same_constant(a: ir.Value, b: ir.Value) -> bool:
    ta, tb = a.const_value, b.const_value
    if ta is None or tb is None or ta.dtype != tb.dtype or tuple(ta.shape) != tuple(tb.shape) or ta.size > 1024:
        return False
    return bool(np.array_equal(ta.numpy(), tb.numpy()))


def _built_alike(a: ir.Value, b: ir.Value) -> bool:
    """Whether the initializers ``a`` and ``b`` of two captured layers hold the same values (a buffer computed by
    the layer's constructor, not read from the checkpoint: GPT-J's sinusoidal positions, Falcon-H1's mup_vector)."""
    ta, tb = a.const_value, b.const_value
    if ta is None or tb is None or ta.dtype != tb.dtype or tuple(ta.shape) != tuple(tb.shape):
        return False
    return bool(np.array_equal(ta.numpy(), tb.numpy()))


def _same_attributes(n0: ir.Node, n1: ir.Node) -> bool:
    if set(n0.attributes) != set(n1.attributes):
        return False
    for name, a0 in n0.attributes.items():
        a1 = n1.attributes[name]
        if a0.type != a1.type:
            return False
        if a0.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            return False  # a subgraph: not compared, not stamped
        if a0.type == ir.AttributeType.TENSOR:
            if not np.array_equal(a0.value.numpy(), a1.value.numpy()):
                return False
        elif a0.value != a1.value:
            return False
    return True


def stamp_layers(model: ir.Model, stack: LayerStack, weight: Callable[[str], Any]) -> int:
    """Copies layer 1 of ``model`` (captured with two layers of ``stack``) into layers 2 to
    ``stack.count - 1``, in place; returns the nodes added. With a period p (``stack.period``) the
    unit is a block of p layers: layers p to 2p-1 are copied into each following block, layers 0
    to p-1 prove them independent of their place. The first ``stack.start`` layers (dense layers before
    mixtures of experts) are captured as they are, the blocks counted after them.

    Each copy reads its own weights (``weight(name)``: the tensor of ``model.layers.k...``,
    :func:`fx2onnx.weights.initializer_tensor` accepts it; a KeyError for a buffer the checkpoint does not hold, which
    the layer's constructor computes: the copies share layer 1's when layer 0's is equal), its own graph inputs and outputs
    (``past_key_values_key_k``, ``present_key_k``, added in order beside those of layer 1, the
    cache pairs in the metadata extended) and what the previous copy computed; what layer 1 gave
    the rest of the graph (the last hidden state) now comes from the last copy.

    :raises LayersNotRepeatable: the graphs of layers 0 and 1 differ, or a value crosses the
        stack other than from one layer to the next
    """
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    RemoveUnusedNodesPass()(model)  # a size traced in one layer and read by none (the optimizer removes it too)
    graph = model.graph
    pattern = re.compile(rf"^{re.escape(stack.path)}\.(\d+)(?:\.|$)")
    nodes = list(graph)
    period = stack.period
    # the block of a node: 0 for layers start .. start+period-1, 1 for the next period (the template), None outside
    # (the first ``start`` layers included: captured as they are, before the repeated ones)
    index = {node: _layer_index(node, pattern) for node in nodes}
    repeated = range(stack.start, stack.start + 2 * period)  # the captured layers of the two periods
    index = {node: None if i is None or i not in repeated else (i - stack.start) // period
             for node, i in index.items()}
    layer0 = [n for n in nodes if index[n] == 0]
    layer1 = [n for n in nodes if index[n] == 1]
    in0, in1 = set(layer0), set(layer1)
    # sizes layer 0 computed first and every layer reads (torch.export traces a symbolic size once)
    sizes = _shared_sizes(layer0, in0, in1)
    layer0 = [n for n in layer0 if n not in sizes]
    if not layer0 or len(layer0) != len(layer1):
        raise LayersNotRepeatable(f"{_blocks_name(period)} have {len(layer0)} and {len(layer1)} nodes")
    graph_inputs = set(graph.inputs)

    # nodes before the layers computing from a layer's own input (the length of its past), copied with it
    before: set[ir.Node] = set()

    def match_outside(a: ir.Value, b: ir.Value) -> bool:
        """Whether layers 0 and 1 read ``a`` and ``b`` from outside in the same way (registers the
        weights, inputs and nodes before the layers which belong to layer 1)."""
        if a is b:
            return a.producer() is None or index.get(a.producer()) is None
        if a in graph_inputs or b in graph_inputs:
            numbered = _renamer(a.name, b.name) if a in graph_inputs and b in graph_inputs else None
            if numbered:
                per_layer_inputs[b] = numbered
            return numbered is not None
        if a.is_initializer() and b.is_initializer() and (numbered := _renamer(a.name, b.name)):
            weights[b.name] = numbered
            weights0[b.name] = a
            return True
        pa, pb = a.producer(), b.producer()
        if pa is None or pb is None:
            return pa is None and pb is None and _same_constant(a, b)
        if index.get(pa) is not None or index.get(pb) is not None or pb.domain != "" or \
                pb.op_type not in _SIZE_OPERATORS or (pa.domain, pa.op_type, len(pa.inputs)) != \
                (pb.domain, pb.op_type, len(pb.inputs)) or not _same_attributes(pa, pb) or a.index() != b.index():
            return False
        if all(x is y if x is None or y is None else match_outside(x, y) for x, y in zip(pa.inputs, pb.inputs)):
            before.add(pb)
            return True
        return False

    # node-for-node correspondence of layers 0 and 1: value of layer 0 -> value of layer 1
    same: dict[ir.Value, ir.Value] = {}
    carried: dict[ir.Value, ir.Value] = {}  # value of layer 0 read by layer 1 -> what layer 0 read instead
    weights: dict[str, _Numbered] = {}  # name of a weight of layer 1 -> the names of its copies
    weights0: dict[str, ir.Value] = {}  # name of a weight of layer 1 -> the same weight of layer 0
    per_layer_inputs: dict[ir.Value, _Numbered] = {}  # input of layer 1 -> the names of its copies
    def read_alike(n0: ir.Node, inputs1: list[ir.Value | None]) -> str | None:
        """None when node ``n0`` of layer 0 and the node of layer 1 reading ``inputs1`` read the same values
        (the correspondences recorded), else the reason they do not."""
        for a, b in zip(n0.inputs, inputs1):
            if a is b:
                if a is not None and a.producer() in in0 and a.producer() not in sizes:
                    return f"layer 1 reads {a.name} as layer 0 does"
                continue
            if a is None or b is None:
                return "an input is missing in one layer only"
            if a.producer() in in0:
                if same.get(a) is not b:
                    return f"it reads {b.name}, not the copy of {a.name}"
            elif b.producer() in in0:
                if carried.setdefault(b, a) is not a:
                    return f"{b.name} of layer 0 stands for two inputs of layer 0"
            elif not match_outside(a, b):
                return f"layer 1 reads {b.name} where layer 0 reads {a.name}"
        return None

    for n0, n1 in zip(layer0, layer1):
        if (n0.domain, n0.op_type, n0.overload, len(n0.inputs), len(n0.outputs)) != \
                (n1.domain, n1.op_type, n1.overload, len(n1.inputs), len(n1.outputs)) or not _same_attributes(n0, n1):
            raise LayersNotRepeatable(f"node {n1.name} ({n1.op_type}) of layer 1 differs from {n0.name} of layer 0")
        recorded = (dict(carried), dict(weights), dict(per_layer_inputs), set(before))
        reason = read_alike(n0, list(n1.inputs))
        if reason and n1.domain == "" and n1.op_type in _COMMUTATIVE and len(n1.inputs) == 2:
            # a sum of two sizes traced in either order (torch.export orders a sum's terms by their symbols'
            # names, which differ from layer to layer: Gemma 3's past + seq, seq + past): read the other way
            for kept, saved in zip((carried, weights, per_layer_inputs, before), recorded):
                kept.clear()
                kept.update(saved)
            swapped = [n1.inputs[1], n1.inputs[0]]
            if read_alike(n0, swapped) is None:
                n1.replace_input_with(0, swapped[0])
                n1.replace_input_with(1, swapped[1])
                reason = None
        if reason:
            raise LayersNotRepeatable(f"{n1.name} ({n1.op_type}) of layer 1: {reason}")
        same.update(zip(n0.outputs, n1.outputs))
    # a dimension named apart in each layer (a size read from data, torch.export's unbacked u0, u1...) is
    # left unnamed in the copies: one name for all of them would say they are equal, and an optimizer
    # could read one layer's size for another's
    per_layer_dims = {d1 for v0, v1 in same.items() if v0.shape is not None and v1.shape is not None
                      for d0, d1 in zip(v0.shape, v1.shape) if not isinstance(d1, int) and str(d0) != str(d1)}

    # what crosses the stack: layer 0 only feeds layer 1 and its own outputs; layer 1 feeds what follows
    outputs = list(graph.outputs)
    per_layer_outputs: dict[ir.Value, _Numbered] = {}  # output of layer 1 -> the names of its copies
    for v0, v1 in same.items():
        if v0 in outputs:
            numbered = _renamer(v0.name, v1.name) if v1 in outputs else None
            if numbered is None:
                raise LayersNotRepeatable(f"{v0.name} is an output of the model, {v1.name} is not")
            per_layer_outputs[v1] = numbered
        for use in v0.uses():
            if use.node not in in0 and use.node not in in1:
                raise LayersNotRepeatable(f"{v0.name} of layer 0 is read by {use.node.name} after the layers")
    for v1 in same.values():
        if v1 in outputs and v1 not in per_layer_outputs:
            continue  # the last layer's value, rerouted below
        for use in v1.uses():
            if use.node in in0:
                raise LayersNotRepeatable(f"{v1.name} of layer 1 is read by layer 0")
    position = {node: i for i, node in enumerate(nodes)}
    first_after = min((position[u.node] for v1 in same.values() for u in v1.uses() if u.node not in in1),
                      default=len(nodes))
    if first_after < position[layer1[-1]] or position[layer1[0]] < position[layer0[-1]]:
        raise LayersNotRepeatable("a node outside the layers reads layer 1 before its end, or the layers interleave")

    _rename_remainder(graph, stack, weight)

    # the copies
    def layer_name(text: str, k: int) -> str:
        return re.sub(rf"^{re.escape(stack.path)}\.(\d+)(?=\.|$)",
                      lambda m: f"{stack.path}.{k * period + int(m.group(1)) - period}", text)

    added = 0
    previous: dict[ir.Value, ir.Value] = {v: v for v in same.values()}  # layer 1 value -> its copy in layer k-1
    anchor = layer1[-1]
    new_inputs: list[list[ir.Value]] = []
    new_outputs: list[list[ir.Value]] = []

    input_position = {value: i for i, value in enumerate(graph.inputs)}
    output_position = {value: i for i, value in enumerate(graph.outputs)}
    for k in range(2, stack.blocks):
        current: dict[ir.Value, ir.Value] = {}
        inputs_k: dict[ir.Value, ir.Value] = {}
        copies: list[ir.Node] = []

        def resolve(b: ir.Value | None) -> ir.Value | None:
            if b is None:
                return None
            if b in current:
                return current[b]
            if b in carried:
                return previous[same[b]]
            if b.name in weights and b.is_initializer():
                name = weights[b.name](k)
                if name not in graph.initializers:
                    try:
                        tensor = initializer_tensor(name, weight(name))
                    except KeyError:
                        if _built_alike(weights0[b.name], b):
                            return b  # a buffer the layer's constructor computes, the same in every layer: shared
                        raise LayersNotRepeatable(f"{name} is not in the checkpoint and {b.name} differs from "
                                                  f"{weights0[b.name].name}") from None
                    if tuple(tensor.shape) != tuple(b.shape) or tensor.dtype != b.dtype:
                        raise LayersNotRepeatable(f"{name} is {tensor.dtype} {tuple(tensor.shape)}, "
                                                  f"{b.name} is {b.dtype} {tuple(b.shape)}")
                    graph.register_initializer(ir.Value(name=name, shape=ir.Shape(tensor.shape),
                                                        type=ir.TensorType(tensor.dtype), const_value=tensor))
                return graph.initializers[name]
            if b in per_layer_inputs:
                if b not in inputs_k:
                    inputs_k[b] = ir.Value(name=per_layer_inputs[b](k), shape=ir.Shape(list(b.shape)), type=b.type)
                return inputs_k[b]
            if b.producer() in before:
                copy_node(b.producer())
                return current[b]
            return b  # shared: computed before the layers, a graph input, a constant

        def copy_node(n1: ir.Node) -> None:
            inputs = [resolve(b) for b in n1.inputs]
            node = ir.Node(
                n1.domain, n1.op_type, inputs, attributes=[copy.copy(a) for a in n1.attributes.values()],
                overload=n1.overload, num_outputs=len(n1.outputs), version=n1.version,
                name=f"{n1.name}_layer{k}", metadata_props={key: layer_name(v, k) if key == "module" else v
                                                             for key, v in n1.metadata_props.items()},
            )
            for out1, out in zip(n1.outputs, node.outputs):
                out.name = f"{out1.name}_layer{k}" if out1.name else None
                out.type = out1.type
                if out1.shape is not None:
                    out.shape = ir.Shape([None if d in per_layer_dims else d for d in out1.shape])
                current[out1] = out
            copies.append(node)

        for n1 in layer1:
            copy_node(n1)
        graph.insert_after(anchor, copies)
        anchor = copies[-1]
        added += len(copies)
        new_inputs.append([inputs_k[b] for b in sorted(inputs_k, key=input_position.__getitem__)])
        outs_k = []
        # in the order of layer 1's outputs, not of the nodes computing them (CodeGen's value before its key)
        for v1, numbered in sorted(per_layer_outputs.items(), key=lambda item: output_position[item[0]]):
            out = current[v1]
            out.name = numbered(k)
            outs_k.append(out)
        new_outputs.append(outs_k)
        previous = current

    # what follows the stack reads the last copy
    last = {v1: previous[v1] for v1 in same.values() if v1 not in per_layer_outputs}
    for v1, vk in last.items():
        for use in list(v1.uses()):
            if use.node not in in1 and index.get(use.node, -1) is None:
                use.node.replace_input_with(use.idx, vk)
        if v1 in graph.outputs:
            name = v1.name
            position = list(graph.outputs).index(v1)
            v1.name = f"{name}_layer1"
            vk.name = name
            graph.outputs[position] = vk

    # the inputs and outputs of the copies, in order after those of layer 1
    shifted = _shift_following_names(graph, {**per_layer_inputs, **per_layer_outputs}, stack.blocks)
    _insert_after(graph.inputs, list(per_layer_inputs), [v for group in new_inputs for v in group])
    _insert_after(graph.outputs, list(per_layer_outputs), [v for group in new_outputs for v in group])
    for values in (graph.inputs, graph.outputs):
        names = [v.name for v in values]
        if len(set(names)) != len(names):
            raise LayersNotRepeatable(f"two inputs or outputs of the stamped model have the same name: {names}")
    _extend_cache_pairs(model, per_layer_inputs, per_layer_outputs, stack.blocks, shifted)
    _order_initializers(graph, stack)
    return added


def _rename_remainder(graph: ir.Graph, stack: LayerStack, weight: Callable[[str], Any]) -> None:
    """The layers captured after the two periods are the last ones of the full stack: their weights take the
    names and values of those (``model.layers.4.*`` of a short model is ``model.layers.6.*`` of seven layers),
    their nodes the module paths. Their cache inputs and outputs are renamed with the names following the
    stack's (:func:`_shift_following_names`)."""
    if not stack.remainder:
        return
    first = stack.start + 2 * stack.period
    shift = (stack.blocks - 2) * stack.period
    pattern = re.compile(rf"^{re.escape(stack.path)}\.(\d+)(?=\.|$)")

    def renamed(text: str) -> str | None:
        match = pattern.match(text)
        if match is None or int(match.group(1)) < first:
            return None
        return f"{stack.path}.{int(match.group(1)) + shift}{text[match.end():]}"

    for value in list(graph.initializers.values()):
        name = renamed(value.name or "")
        if name is None:
            continue
        try:
            tensor = initializer_tensor(name, weight(name))
        except KeyError:  # a buffer the layer's constructor computes, not in the checkpoint: the captured one
            tensor = None
        if tensor is not None and (tuple(tensor.shape) != tuple(value.shape) or tensor.dtype != value.dtype):
            raise LayersNotRepeatable(f"{name} is {tensor.dtype} {tuple(tensor.shape)}, "
                                      f"{value.name} is {value.dtype} {tuple(value.shape)}")
        graph.initializers.pop(value.name)
        value.name = name
        if tensor is not None:
            value.const_value = tensor
        graph.register_initializer(value)
    for node in graph:
        module = renamed(node.metadata_props.get("module", ""))
        if module is not None:
            node.metadata_props["module"] = module


def _shift_following_names(graph: ir.Graph, per_layer: dict[ir.Value, _Numbered], blocks: int) -> dict[str, str]:
    """Renames the inputs and outputs numbered after those of the layers as a full capture numbers them:
    the count of tokens a sliding cache has seen is ``past_key_values_4`` after two layers, ``..._8``
    after four. Returns the renames."""
    families: dict[tuple[str, str], tuple[int, int]] = {}  # (prefix, suffix) -> (last number in layer 1, step)
    for numbered in per_layer.values():
        key = (numbered.prefix, numbered.suffix)
        last, step = families.get(key, (-1, 0))
        families[key] = (max(last, numbered.first + numbered.step), max(step, numbered.step))
    renames = {}
    for values in (graph.inputs, graph.outputs):
        for value in values:
            if value in per_layer or not value.name:
                continue
            for (prefix, suffix), (last, step) in families.items():
                match = re.fullmatch(re.escape(prefix) + r"(\d+)" + re.escape(suffix), value.name)
                if match and int(match.group(1)) > last:
                    renames[value.name] = f"{prefix}{int(match.group(1)) + step * (blocks - 2)}{suffix}"
                    value.name = renames[value.name]
                    break
    return renames


def _order_initializers(graph: ir.Graph, stack: LayerStack) -> None:
    """The weights in the order of a full capture (layer by layer, then what follows the stack):
    the file of the weights is written in this order."""
    pattern = re.compile(rf"^{re.escape(stack.path)}\.(\d+)\.")
    keys, layer = {}, -1
    for position, name in enumerate(graph.initializers):
        match = pattern.match(name)
        if match:
            layer = int(match.group(1))
            keys[name] = (layer, position)
        else:
            keys[name] = (stack.count if layer in (stack.captured - 1, stack.count - 1) else layer, position)
    values = sorted(graph.initializers.values(), key=lambda v: keys[v.name])
    graph.initializers.clear()
    for value in values:
        graph.register_initializer(value)


def _insert_after(values: Any, anchors: list[ir.Value], new: list[ir.Value]) -> None:
    if not new:
        return
    position = max(list(values).index(a) for a in anchors) + 1
    for offset, value in enumerate(new):
        values.insert(position + offset, value)


def _extend_cache_pairs(model: ir.Model, per_layer_inputs: dict, per_layer_outputs: dict, blocks: int,
                        shifted: dict[str, str]) -> None:
    """The metadata pairing each cache input with its output (``fx2onnx.cache``) for every layer."""
    import json

    if CACHE_METADATA_KEY not in model.metadata_props:
        return
    pairs: dict[str, str] = {shifted.get(i, i): shifted.get(o, o)
                             for i, o in json.loads(model.metadata_props[CACHE_METADATA_KEY]).items()}
    renames = {b.name: numbered for b, numbered in {**per_layer_inputs, **per_layer_outputs}.items()}
    layer1 = [(i, o) for i, o in pairs.items() if i in renames and o in renames]
    extended = dict(pairs)
    for k in range(2, blocks):
        for i, o in layer1:
            extended[renames[i](k)] = renames[o](k)
    # in the order of the graph's inputs
    order = {v.name: n for n, v in enumerate(model.graph.inputs)}
    model.metadata_props[CACHE_METADATA_KEY] = json.dumps(
        dict(sorted(extended.items(), key=lambda item: order.get(item[0], len(order)))))
