"""Whether the attention masks of a decoder are causal on a prompt, found by running them.

:mod:`fx2onnx.optimizer.rules.cache_in_place` gives onnxruntime's ``GroupQueryAttention``
the model's mask as a bias and lets the kernel add its causal mask: the same result when the
model's own mask lets no token see a later one. A prefix LM (PaliGemma: the whole prompt attends
both ways when the cache is empty) builds its mask from shapes alone, which the graph does not
tell apart from a causal one; :func:`masks_are_causal` computes the masks on a prompt of a few
tokens, with an empty past and with a past, and looks above the diagonal.

Only the nodes the masks are computed from run: the shape of a value computed inside the graph
(the embeddings of the tokens, say) is read from its symbolic shape, evaluated on the sizes the
inputs are given, so no weight is needed (a value of unknown shape is computed: a weight larger
than 1024 values stored outside the graph answers False, as anything that cannot run).

:func:`masks_are_padding` runs them on left-padded prompts: a mask which, on and below the diagonal,
is the padding mask (``attention_mask[b, j]``, a causal LM's) can be given to the kernel as the
padding bias alone, computed in a few nodes (the kernel adds the causal part); a past of 40000 tokens
is among the probes, so that a sliding window or chunks of any usual size show.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

#: the probes: (past length, new tokens)
_PROBES = ((0, 5), (3, 4))
#: the probes of :func:`masks_are_padding`: (past length, new tokens, pads of each sequence of the batch)
_PADDED_PROBES = ((0, 5, (0, 2)), (3, 4, (2, 0)), (40000, 1, (3, 0)))


def _dims(value: ir.Value, sizes: list[int], bindings: dict[str, int]) -> None:
    for dim, size in zip(value.shape or (), sizes):
        if isinstance(dim, ir.SymbolicDim) and dim.value:
            bindings.setdefault(dim.value, size)


def _evaluate_dim(dim: Any, bindings: dict[str, int]) -> int:
    if isinstance(dim, int):
        return dim
    if not isinstance(dim, ir.SymbolicDim) or not dim.value:
        raise ValueError("an unnamed dimension")
    names = {"Max": max, "Min": min, "FloorDiv": lambda a, b: a // b, "Mod": lambda a, b: a % b}
    return int(eval(dim.value, {"__builtins__": {}}, {**names, **bindings}))  # noqa: S307 - names and operators only


def _bindings(mask_input: ir.Value, new_input: ir.Value, pasts: list[ir.Value], past: int, new: int,
              batch: int) -> dict[str, int]:
    """The sizes a probe of ``batch`` sequences binds: ``past`` tokens in the cache, ``new`` given."""
    bindings: dict[str, int] = {}
    _dims(mask_input, [batch, past + new], bindings)
    _dims(new_input, [batch, new], bindings)
    for value in pasts:
        _dims(value, [batch, value.shape[1] if isinstance(value.shape[1], int) else 1, past], bindings)
    return bindings


def _input_shape(value: ir.Value, bindings: dict[str, int]) -> list[int]:
    """The shape a probe gives the graph input ``value`` (a dimension no probe binds: 1)."""
    return [d if isinstance(d, int) else bindings.get(d.value, 1) for d in value.shape]


def _feeds(inputs: list[ir.Value], mask_input: ir.Value, bindings: dict[str, int],
           pads: tuple[int, ...] = (0,)) -> dict[str, np.ndarray]:
    """Values of ``inputs`` for a batch of ``len(pads)`` (the mask of ones after ``pads[b]`` zeros, zeros
    elsewhere): only the inputs the masks read, the pasts are not among them (a past of 40000 tokens for
    every layer would hold gigabytes)."""
    feeds = {}
    for value in inputs:
        fill = 1 if value is mask_input else 0
        feeds[value.name] = np.full(_input_shape(value, bindings), fill, dtype=value.dtype.numpy())
    if mask_input.name in feeds:
        for b, pad in enumerate(pads):
            feeds[mask_input.name][b, :pad] = 0
    return feeds


def _static_shape(value: ir.Value, bindings: dict[str, int]) -> list[int] | None:
    """The shape of ``value`` on the sizes of ``bindings``, None when unknown (its nodes then run)."""
    if value.shape is None:
        return None
    try:
        return [_evaluate_dim(d, bindings) for d in value.shape]
    except Exception:  # noqa: BLE001 - an expression of other names: computed instead
        return None


def _mask_graph(graph: ir.Graph, masks: list[ir.Value],
                bindings: dict[str, int]) -> tuple[onnx.GraphProto, list[ir.Value]]:
    """The nodes computing ``masks``, each ``Shape`` replaced by its evaluated symbolic shape (a graph
    input's: the shape the probe feeds), and the graph inputs they read."""
    nodes: list[onnx.NodeProto] = []
    inputs: dict[str, ir.Value] = {}
    initializers: dict[str, ir.Value] = {}
    seen: set[ir.Node] = set()
    todo = [m.producer() for m in masks if m.producer() is not None]
    order = {node: i for i, node in enumerate(graph)}
    kept: list[ir.Node] = []
    replaced: dict[ir.Node, onnx.NodeProto] = {}
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.graph is not graph:
            raise ValueError("a mask computed in a subgraph")
        kept.append(node)
        shape = None
        if node.op_type == "Shape":
            source = node.inputs[0]
            shape = _input_shape(source, bindings) if source.is_graph_input() else _static_shape(source, bindings)
        if shape is not None:
            start = node.attributes["start"].value if "start" in node.attributes else 0
            end = node.attributes["end"].value if "end" in node.attributes else None
            array = np.array(shape[start:end], dtype=np.int64)
            replaced[node] = onnx.helper.make_node("Constant", [], [node.outputs[0].name],
                                                   value=onnx.numpy_helper.from_array(array))
            continue
        for value in node.inputs:
            if value is None:
                continue
            if value.producer() is not None:
                todo.append(value.producer())
            elif value.is_graph_input():
                inputs[value.name] = value
            elif value.const_value is not None:
                initializers[value.name] = value
            else:
                raise ValueError(f"{value.name} has no value")
    for node in sorted(kept, key=order.__getitem__):
        nodes.append(replaced.get(node) or ir.serde.serialize_node(node))
    tensors = []
    for value in initializers.values():
        if isinstance(value.const_value, ir.ExternalTensor) and value.const_value.size > 1024:
            raise ValueError(f"{value.name} is a weight")
        tensors.append(onnx.numpy_helper.from_array(value.const_value.numpy(), value.name))
    proto = onnx.helper.make_graph(
        nodes, "masks",
        [onnx.helper.make_tensor_value_info(v.name, v.dtype.value, None) for v in inputs.values()],
        [onnx.helper.make_tensor_value_info(m.name, m.dtype.value, None) for m in masks], tensors)
    return proto, list(inputs.values())


def probe_inputs(model: ir.Model, masks: list[ir.Value], mask_input: ir.Value, new_input: ir.Value,
                 pasts: list[ir.Value], past: int, new: int,
                 pads: tuple[int, ...] = (0,)) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model computing ``masks`` alone and its inputs on a probe (see :func:`_feeds`); raises
    ValueError when the masks cannot be separated from the weights."""
    bindings = _bindings(mask_input, new_input, pasts, past, new, len(pads))
    proto, inputs = _mask_graph(model.graph, masks, bindings)
    opsets = [onnx.helper.make_opsetid(domain, version) for domain, version in model.opset_imports.items()]
    probe = onnx.helper.make_model(proto, opset_imports=opsets, ir_version=10)
    return probe, _feeds(inputs, mask_input, bindings, pads)


def _run_masks(model: ir.Model, masks: list[ir.Value], mask_input: ir.Value, new_input: ir.Value,
               pasts: list[ir.Value], past: int, new: int, pads: tuple[int, ...] = (0,)) -> list[np.ndarray] | None:
    """The values of ``masks`` on a probe (see :func:`_feeds`), None when they cannot be run."""
    import onnxruntime

    try:
        probe, feeds = probe_inputs(model, masks, mask_input, new_input, pasts, past, new, pads)
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        return session.run(None, {k: v for k, v in feeds.items() if k in names})
    except Exception:  # noqa: BLE001 - anything that cannot run
        return None


def masks_are_causal(model: ir.Model, masks: list[ir.Value], mask_input: ir.Value, new_input: ir.Value,
                     pasts: list[ir.Value]) -> bool:
    """Whether no value of ``masks`` (boolean, or an additive float bias) lets a token see a later
    one, on a prompt of a few tokens after an empty past and after a past of three."""
    for past, new in _PROBES:
        values = _run_masks(model, masks, mask_input, new_input, pasts, past, new)
        if values is None:  # what cannot be run is not known to be causal
            return False
        later = np.arange(past + new)[None, :] > past + np.arange(new)[:, None]
        for value in values:
            allowed = value if value.dtype == bool else value > np.finfo(value.dtype).min / 2
            if allowed.ndim < 2:
                return False
            try:
                allowed = np.broadcast_to(allowed, allowed.shape[:-2] + later.shape)
            except ValueError:
                return False
            if allowed[..., later].any():
                return False
    return True


def masks_are_padding(model: ir.Model, masks: list[ir.Value], mask_input: ir.Value, new_input: ir.Value,
                      pasts: list[ir.Value]) -> bool:
    """Whether every boolean mask of ``masks``, on and below the diagonal, is the padding mask
    (``attention_mask[b, j]`` for every query), on left-padded probes after pasts of 0 to 40000 tokens:
    a causal LM's mask, whose causal part a kernel masking later keys itself (``causal=1``) does not
    need. A float mask (an additive bias: ALiBi's) answers False."""
    if any(m.dtype != ir.DataType.BOOL for m in masks):
        return False
    batch = mask_input.shape[0] if mask_input.shape is not None else None
    for past, new, pads in _PADDED_PROBES:
        if isinstance(batch, int):  # a static batch: as many rows
            pads = (pads * batch)[:batch]
        values = _run_masks(model, masks, mask_input, new_input, pasts, past, new, pads)
        if values is None:
            return False
        total = past + new
        padding = np.arange(total)[None, :] >= np.array(pads)[:, None]  # (batch, total)
        seen = np.arange(total)[None, :] <= past + np.arange(new)[:, None]  # (new, total): on and below the diagonal
        for value in values:
            if value.ndim != 4:
                return False
            try:
                value = np.broadcast_to(value, (len(pads), value.shape[1], new, total))
            except ValueError:
                return False
            expected = np.broadcast_to(padding[:, None, None, :], value.shape)
            if (value != expected)[..., seen].any():
                return False
    return True
