"""The kv cache updated in place: every ``Attention`` with a past into onnxruntime's
``com.microsoft.GroupQueryAttention`` reading the past from a buffer of any capacity.

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
* ``seqlens_k`` is ``total - 1`` for every sequence: the pads stay in the buffer as they
  stayed in the concatenated cache.

onnxruntime refuses a past with more than one new token on a batch larger than one
(chunked prefill of a batch): an error, not a different result. The rule applies to the
whole graph or not at all: a cache input it cannot rewrite (a recurrent state, an
attention without a mask) leaves the model unchanged. Off by default; the checkpoint
folders of :func:`fx2onnx.deploy.export_folder` turn it on.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ._graph import attr, ensure_opset, initializer, nodes_of, rank, replace

#: the model metadata the rule writes; the generation loop binds the cache in place when set
IN_PLACE_METADATA_KEY = "fx2onnx.cache_in_place"
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
    q, _, _, mask, past_key, past_value = node.inputs
    heads, kv_heads = attr(node, "q_num_heads"), attr(node, "kv_num_heads")
    if heads is None or kv_heads is None or heads % kv_heads or rank(q) != 3:
        return False
    if q.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16) or rank(mask) != 4:
        return False
    if mask.dtype != ir.DataType.BOOL and mask.dtype != q.dtype:
        return False
    # the presents are only returned: read in the graph, a buffer bound in place would not be a concatenation
    presents = node.outputs[1:3]
    return past_key in past_inputs and past_value in past_inputs and all(p in outputs and not p.uses() for p in presents) \
        and not any(u for u in node.outputs[3:] if u.uses())


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


def cache_in_place(model: ir.Model) -> int:
    """Rewrites every ``Attention`` with a past (see the module); returns how many (0: unchanged)."""
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
    others = [v for v in inputs - pasts if v is not mask_input and v is not new_input and v.name != "position_ids"]
    if others:
        return 0
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

    biases: dict[ir.Value, ir.Value] = {}
    for node in attentions:
        q, k, v, mask, past_key, past_value = node.inputs
        if mask not in biases:  # one bias per mask, shared by the layers reading it
            biases[mask] = _bias(graph, node, mask, q.dtype)
        bias = biases[mask]
        attributes = {"num_heads": attr(node, "q_num_heads"), "kv_num_heads": attr(node, "kv_num_heads"), "causal": 1}
        if attr(node, "scale") is not None:
            attributes["scale"] = attr(node, "scale")
        if attr(node, "softcap", 0.0):
            attributes["softcap"] = attr(node, "softcap")
        gqa = ir.node("GroupQueryAttention", [q, k, v, past_key, past_value, seqlens.outputs[0], total.outputs[0],
                                              None, None, None, bias],
                      attributes=attributes, domain="com.microsoft", num_outputs=3)
        replace(graph, node, [gqa], list(node.outputs[:3]), list(gqa.outputs), metadata_from=node)
        graph.remove(node, safe=True)
    for past in pasts:  # a buffer: its capacity is not the past length
        past.shape = ir.Shape([past.shape[0], past.shape[1], "cache_capacity", past.shape[3]])
    for value in graph.outputs:  # the buffer itself, or the concatenation when not bound to it
        if value.producer() is not None and value.producer().op_type == "GroupQueryAttention" and value.shape:
            value.shape = ir.Shape([value.shape[0], value.shape[1], None, value.shape[3]])
    ensure_opset(model, "com.microsoft", 1)
    model.metadata_props[IN_PLACE_METADATA_KEY] = "1"
    return len(attentions)
