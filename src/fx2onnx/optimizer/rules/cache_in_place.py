"""The kv cache updated in place: every ``Attention`` with a past into onnxruntime's
``com.microsoft.GroupQueryAttention`` reading the past from a buffer of any capacity (an
attention on 4-D inputs, heads apart, gets its inputs and output reshaped to the kernel's 3-D).

The standard ``Attention`` concatenates the past and the new keys: each decode step
copies the whole cache into a new output (28 layers of Qwen3-0.6B at a context of 1000
tokens: 229 MB a step). ``GroupQueryAttention`` writes the new keys into the past's buffer
when the caller binds the present output to the same buffer as the past input
(``IOBinding``, what :class:`fx2onnx.runtime.generate.OnnxGenerator` and
onnxruntime-genai with ``past_present_share_buffer`` do); a caller that does not gets
the concatenation, as before.

The rewrite keeps the model's meaning for every input it accepts:

* ``attention_mask`` (``(batch, total length)``) gives the length; the past holds the
  first ``total - new`` positions of a buffer of any capacity (rows after are ignored);
  a shape of the past read elsewhere in the graph along the sequence axis becomes
  ``total - new``;
* the model's own mask is the attention bias: left padding means what it meant; the kernel
  adds its causal mask (``causal=1``: with ``causal=0`` onnxruntime 1.31 takes a path twice
  as slow, 45.5 against 21.6 ms for 28 layers of Qwen3-0.6B at a context of 1000). A causal
  LM's mask holds the causal part already, so the result is the same; a model whose mask
  lets a token see later ones (a prefix LM) would differ on its prompt, which is why the
  folders check the rewritten model against eager on a prompt with an empty cache
  (:func:`fx2onnx.deploy.check.in_place_input_sets`). One new token sees every key before it
  either way;
* a boolean mask which is, on and below the diagonal, the padding mask (transformers' causal mask and
  ``attention_mask``, found by running it on left-padded probes:
  :func:`fx2onnx.optimizer.rules._mask_probe.masks_are_padding`) becomes the padding bias alone,
  ``Where(attention_mask[:, None, None, :], 0, lowest)`` expanded to the new tokens: the kernel adds the
  causal part, the values it reads are the same, and a step runs 5 nodes instead of the ~20 of the
  model's mask (the indices, the comparisons and the gather of transformers' mask functions);
* ``seqlens_k`` is ``total - 1`` for every sequence: the pads stay in the buffer as they
  stayed in the concatenated cache;
* the mask of every attention is computed from ``attention_mask`` alone (and from shapes): a
  mask reading the values of the token ids (Gemma 3's image tokens attending to each other in
  both directions, marked from the ids) is not causal on a prompt, and a mask made from shapes
  is run on a short prompt (:func:`fx2onnx.optimizer.rules._mask_probe.masks_are_causal`:
  PaliGemma's prompt attends both ways); either leaves the model unchanged;
* inputs besides the tokens, the mask, the positions and the cache are refused, but for those
  the caller names in ``constant_inputs``: values fed unchanged at every step (the image
  features of an image-text decoder), which the attentions read as any other value.

onnxruntime refuses a past with more than one new token on a batch larger than one
(chunked prefill of a batch): an error, not a different result. The rule applies to the
whole graph or not at all: a cache input it cannot rewrite (a recurrent state, an
attention without a mask) leaves the model unchanged. Off by default; the checkpoint
folders of :func:`fx2onnx.deploy.export_folder` turn it on.
"""

from __future__ import annotations

from typing import Collection

import numpy as np
import onnx_ir as ir
from onnx_ir.passes import common

from ...formats import IN_PLACE_METADATA_KEY  # noqa: F401 (the metadata the rule writes; the loop binds the cache in place when set)
from ._graph import attr, ensure_opset, initializer, nodes_of, rank, replace
from ._mask_probe import masks_are_causal, masks_are_padding

#: the attributes of the standard ``Attention`` the rewrite carries over or accepts as defaults
_KNOWN = {"q_num_heads", "kv_num_heads", "scale", "softcap", "is_causal", "softmax_precision"}


def _new_length(graph: ir.Graph) -> ir.Value | None:
    for value in graph.inputs:
        if value.name == "input_ids" and rank(value) == 2 or value.name == "inputs_embeds" and rank(value) == 3:
            return value
    return None


def _convertible(node: ir.Node, past_inputs: set[ir.Value], outputs: set[ir.Value]) -> bool:
    if len(node.inputs) != 6 or len(node.outputs) < 3 or any(v is None for v in node.inputs):
        return False
    if set(node.attributes) - _KNOWN or attr(node, "is_causal", 0):
        return False
    q, k, v, mask, past_key, past_value = node.inputs
    heads, kv_heads = _heads(node)
    if heads is None or kv_heads is None or heads % kv_heads or rank(q) not in (3, 4):
        return False
    if rank(q) == 4 and not (rank(k) == rank(v) == 4 and isinstance(q.shape[3], int)
                             and q.shape[3] == k.shape[3] == v.shape[3]):
        return False
    if q.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16) or rank(mask) != 4:
        return False
    if mask.dtype != ir.DataType.BOOL and mask.dtype != q.dtype:
        return False
    # the presents are only returned: read in the graph, a buffer bound in place would not be a concatenation
    presents = node.outputs[1:3]
    return past_key in past_inputs and past_value in past_inputs and all(p in outputs and not p.uses() for p in presents) \
        and not any(u for u in node.outputs[3:] if u.uses())


def _heads(node: ir.Node) -> tuple[int | None, int | None]:
    """The query and key heads of an ``Attention``: its attributes (3-D inputs), the static second
    dimension of its 4-D query and key (the heads already apart, as Qwen-VL's multimodal rotary leaves them)."""
    q, k = node.inputs[0], node.inputs[1]
    if rank(q) == 4 and rank(k) == 4:
        heads, kv_heads = q.shape[1], k.shape[1]
        return (heads, kv_heads) if isinstance(heads, int) and isinstance(kv_heads, int) else (None, None)
    return attr(node, "q_num_heads"), attr(node, "kv_num_heads")


def _to_3d(graph: ir.Graph, before: ir.Node, value: ir.Value) -> ir.Value:
    """``(batch, heads, seq, dim) -> (batch, seq, heads * dim)``, inserted before ``before``."""
    to_last = initializer(graph, "cache_in_place_keep2", np.array([0, 0, -1], dtype=np.int64))
    transpose = ir.node("Transpose", [value], attributes={"perm": [0, 2, 1, 3]})
    reshape = ir.node("Reshape", [transpose.outputs[0], to_last])
    reshape.outputs[0].dtype = value.dtype
    reshape.outputs[0].shape = ir.Shape([value.shape[0], value.shape[2], value.shape[1] * value.shape[3]]) \
        if isinstance(value.shape[1], int) else None
    graph.insert_before(before, [transpose, reshape])
    return reshape.outputs[0]


def _to_4d(graph: ir.Graph, value: ir.Value, heads: int, dim: int) -> list[ir.Node]:
    """The nodes of ``(batch, seq, heads * dim) -> (batch, heads, seq, dim)``."""
    split = initializer(graph, f"cache_in_place_heads_{heads}_{dim}", np.array([0, 0, heads, dim], dtype=np.int64))
    reshape = ir.node("Reshape", [value, split])
    transpose = ir.node("Transpose", [reshape.outputs[0]], attributes={"perm": [0, 2, 1, 3]})
    return [reshape, transpose]


def _bias(graph: ir.Graph, before: ir.Node, mask: ir.Value, dtype: ir.DataType) -> ir.Value:
    """The attention bias of ``mask``: itself when it is a float mask, ``Where(mask, 0, lowest)``
    for a boolean one (inserted before ``before``)."""
    if mask.dtype != ir.DataType.BOOL:
        return mask
    np_type = np.float32 if dtype == ir.DataType.FLOAT else np.float16
    zero = initializer(graph, f"cache_in_place_zero_{np_type.__name__}", np.array(0, dtype=np_type))
    low = initializer(graph, f"cache_in_place_low_{np_type.__name__}", np.array(np.finfo(np_type).min, dtype=np_type))
    where = ir.node("Where", [mask, zero, low])
    where.outputs[0].dtype, where.outputs[0].shape = dtype, mask.shape
    graph.insert_before(before, where)
    return where.outputs[0]


def _padding_bias(graph: ir.Graph, before: ir.Node, mask_input: ir.Value, batch: ir.Node, new: ir.Node,
                  total: ir.Node, dtype: ir.DataType) -> ir.Value:
    """``Where(attention_mask[:, None, None, :], 0, lowest)`` expanded to ``(batch, 1, new, total)`` (the
    kernel takes a bias of one row per query), inserted before ``before``."""
    np_type = np.float32 if dtype == ir.DataType.FLOAT else np.float16
    zero = initializer(graph, f"cache_in_place_zero_{np_type.__name__}", np.array(0, dtype=np_type))
    low = initializer(graph, f"cache_in_place_low_{np_type.__name__}", np.array(np.finfo(np_type).min, dtype=np_type))
    axes = initializer(graph, "cache_in_place_axes_1_2", np.array([1, 2], dtype=np.int64))
    one = initializer(graph, "cache_in_place_one_int64", np.array([1], dtype=np.int64))
    keep = ir.node("Cast", [mask_input], attributes={"to": ir.DataType.BOOL})
    keep4 = ir.node("Unsqueeze", [keep.outputs[0], axes])
    where = ir.node("Where", [keep4.outputs[0], zero, low])
    shape = ir.node("Concat", [batch.outputs[0], one, new.outputs[0], total.outputs[0]], attributes={"axis": 0})
    bias = ir.node("Expand", [where.outputs[0], shape.outputs[0]])
    nodes = [keep, keep4, where, shape, bias]
    for node, name in zip(nodes, ["keep", "keep_4d", "padding_bias_row", "bias_shape", "padding_bias"]):
        node.outputs[0].name = f"cache_in_place_{name}_{np_type.__name__}"
    keep.outputs[0].dtype, keep.outputs[0].shape = ir.DataType.BOOL, mask_input.shape
    where.outputs[0].dtype = bias.outputs[0].dtype = dtype
    shape.outputs[0].dtype, shape.outputs[0].shape = ir.DataType.INT64, ir.Shape([4])
    batch_dim, total_dim = (mask_input.shape[0], mask_input.shape[1]) if mask_input.shape is not None else (None, None)
    bias.outputs[0].shape = ir.Shape([batch_dim, 1, None, total_dim])
    graph.insert_before(before, nodes)
    return bias.outputs[0]


def _reads_only(value: ir.Value, allowed: ir.Value) -> bool:
    """Whether ``value`` is computed from the values of ``allowed``, constants and shapes alone
    (the inputs of ``Shape`` and ``Size`` are not read; a node holding a subgraph is refused)."""
    seen: set[ir.Node] = set()
    todo = [value]
    while todo:
        current = todo.pop()
        node = current.producer()
        if node is None:
            if current is not allowed and current.const_value is None and not current.is_initializer():
                return False
            continue
        if node in seen or node.op_type in ("Shape", "Size"):
            continue
        seen.add(node)
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            return False
        todo.extend(v for v in node.inputs if v is not None)
    return True


def cache_in_place(model: ir.Model, constant_inputs: Collection[str] = ()) -> int:
    """Rewrites every ``Attention`` with a past (see the module); returns how many (0: unchanged).
    ``constant_inputs``: the names of inputs fed the same value at every step, accepted beside
    the tokens, the mask, the positions and the cache."""
    graph = model.graph
    mask_input = next((v for v in graph.inputs if v.name == "attention_mask" and rank(v) == 2), None)
    new_input = _new_length(graph)
    attentions = nodes_of(graph, "Attention")
    if mask_input is None or new_input is None or not attentions:
        return 0
    inputs, outputs = set(graph.inputs), set(graph.outputs)
    if not all(_convertible(n, inputs, outputs) for n in attentions):
        return 0
    pasts = {v for n in attentions for v in n.inputs[4:6]}
    if len(pasts) != 2 * len(attentions):  # a past read by two attentions (shared layers): one buffer, two writers
        return 0
    # every other input of the graph is a token input, not a cache this rule leaves concatenated
    others = [v for v in inputs - pasts if v is not mask_input and v is not new_input and v.name != "position_ids"
              and v.name not in constant_inputs]
    if others:
        return 0
    # the kernel's mask is causal: a mask reading the token values (a prefix attending both ways) is not
    if not all(_reads_only(n.inputs[3], mask_input) for n in attentions):
        return 0
    # nor is a mask made from shapes letting a prompt attend both ways (a prefix LM): the masks are run
    masks = list(dict.fromkeys(n.inputs[3] for n in attentions))
    if not masks_are_causal(model, masks, mask_input, new_input, [n.inputs[4] for n in attentions]):
        return 0
    # a causal LM's mask: the padding mask on and below the diagonal, the kernel masks the keys above
    padding_only = masks_are_padding(model, masks, mask_input, new_input, [n.inputs[4] for n in attentions])
    # the past is read elsewhere only through its shape, along the batch or the sequence
    shapes = []
    for past in pasts:
        for user, _ in past.uses():
            if user.op_type == "Attention":
                continue
            if user.op_type != "Shape":
                return 0
            start, end = attr(user, "start", 0), attr(user, "end", None)
            if (start, end) == (2, 3):
                shapes.append(user)
            elif end is None or end > 2 or start < 0 or end < 0:
                return 0

    first = graph.node(0)
    int32 = ir.DataType.INT32
    one = initializer(graph, "cache_in_place_one", np.array([1], dtype=np.int32))
    total64 = ir.node("Shape", [mask_input], attributes={"start": 1, "end": 2})
    new64 = ir.node("Shape", [new_input], attributes={"start": 1, "end": 2})
    past_len = ir.node("Sub", [total64.outputs[0], new64.outputs[0]])
    total32 = ir.node("Cast", [total64.outputs[0]], attributes={"to": int32})
    total = ir.node("Squeeze", [total32.outputs[0]])
    last = ir.node("Sub", [total32.outputs[0], one])
    batch = ir.node("Shape", [mask_input], attributes={"start": 0, "end": 1})
    seqlens = ir.node("Expand", [last.outputs[0], batch.outputs[0]])
    lengths = [total64, new64, past_len, total32, total, last, batch, seqlens]
    for node, name in zip(lengths, ["total_length", "new_length", "past_length", "total_length_int32",
                                    "total_sequence_length", "last_position", "batch_size", "seqlens_k"]):
        node.outputs[0].name = f"cache_in_place_{name}"
    graph.insert_before(first, lengths)
    total.outputs[0].dtype, seqlens.outputs[0].dtype = int32, int32
    total.outputs[0].shape, seqlens.outputs[0].shape = ir.Shape([]), ir.Shape([None])
    past_len.outputs[0].dtype, past_len.outputs[0].shape = ir.DataType.INT64, ir.Shape([1])
    for shape in shapes:  # the buffer's capacity is not the past length: its shape is read no more
        ir.convenience.replace_all_uses_with(shape.outputs[0], past_len.outputs[0])
        graph.remove(shape, safe=True)

    biases: dict[ir.Value | ir.DataType, ir.Value] = {}
    for node in attentions:
        q, k, v, mask, past_key, past_value = node.inputs
        key = q.dtype if padding_only else mask  # one bias per mask (or type), shared by the layers reading it
        if key not in biases:
            biases[key] = _padding_bias(graph, first, mask_input, batch, new64, total64, q.dtype) \
                if padding_only else _bias(graph, node, mask, q.dtype)
        bias = biases[key]
        heads, kv_heads = _heads(node)
        attributes = {"num_heads": heads, "kv_num_heads": kv_heads, "causal": 1}
        if attr(node, "scale") is not None:
            attributes["scale"] = attr(node, "scale")
        if attr(node, "softcap", 0.0):
            attributes["softcap"] = attr(node, "softcap")
        four_d = rank(q) == 4
        if four_d:  # the kernel takes (batch, seq, heads * dim) and returns its output so
            q, k, v = (_to_3d(graph, node, x) for x in (q, k, v))
        gqa = ir.node("GroupQueryAttention", [q, k, v, past_key, past_value, seqlens.outputs[0], total.outputs[0],
                                              None, None, None, bias],
                      attributes=attributes, domain="com.microsoft", num_outputs=3)
        new_nodes, output = [gqa], gqa.outputs[0]
        if four_d:
            back = _to_4d(graph, gqa.outputs[0], heads, node.inputs[2].shape[3])
            new_nodes, output = new_nodes + back, back[-1].outputs[0]
        replace(graph, node, new_nodes, list(node.outputs[:3]), [output, *gqa.outputs[1:]], metadata_from=node)
        graph.remove(node, safe=True)
    for past in pasts:  # a buffer: its capacity is not the past length
        past.shape = ir.Shape([past.shape[0], past.shape[1], "cache_capacity", past.shape[3]])
    for value in graph.outputs:  # the buffer itself, or the concatenation when not bound to it
        node = value.producer()
        if node is not None and node.op_type == "GroupQueryAttention" and value in node.outputs[1:] and value.shape:
            value.shape = ir.Shape([value.shape[0], value.shape[1], None, value.shape[3]])
    ensure_opset(model, "com.microsoft", 1)
    model.metadata_props[IN_PLACE_METADATA_KEY] = "1"
    if padding_only:  # the model's mask is read no more (a caller saving the model runs no clean-up)
        common.RemoveUnusedNodesPass()(model)
    return len(attentions)
