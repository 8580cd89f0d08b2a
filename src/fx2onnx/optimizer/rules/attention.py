"""Attention with its kv cache into one standard ``Attention`` node (opset 23).

The pattern (``scaled_dot_product_attention`` converted by fx2onnx, the cache
concatenation and transformers' ``repeat_kv`` before it)::

    K = Concat(past_key, key, axis=2)            # present_key, a graph output
    Kr = Reshape(Expand(Unsqueeze(K, 2), ...))   # repeat_kv, grouped-query attention
    scores = Mul(MatMul(Q, Transpose(Kr, [0, 1, 3, 2])), scale) [+ Where(mask, 0, -inf) | + bias]
    probs = Softmax(scores) [-> Where(IsNaN(probs), 0, probs)]
    Y = MatMul(probs, Vr)

becomes ``Y, present_key, present_value = Attention(Q, key, value, mask, past_key,
past_value, scale=scale)``: no Concat, no repeated heads, no score tensor left. The sum with the
mask broadcasts, onnxruntime's ``Attention`` does not (``attention_helper.h``): the mask's last two
dimensions must be the number of queries and of keys (past and new): a dimension of 1 there is expanded
to it (a padding mask ``[batch, 1, 1, keys]``, BERT's and LayoutLM's), a mask of another length leaves
the attention unfused, as a mask of another number of heads than the kv heads. The product of the query
and the keys broadcasts their batches too, the ``Attention`` does not: a query of another batch than the
keys (Granite Speech's projector: learned queries of batch 1 against every block of the audio) stays as
it is.
onnxruntime's own ``GroupQueryAttention`` refuses batch > 1 with a past and more than
one new token, and ``MultiHeadAttention`` needs as many kv heads as query heads, so
the level ``onnxruntime`` uses the standard operator too (onnxruntime >= 1.23 runs it
on CPU); it needs the model's opset >= 23.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from ._graph import attr, const_array, const_ints, const_scalar, initializer, producer, rank, replace, static_dim, users


def _unrepeat(value: ir.Value, heads: int) -> ir.Value | None:
    """The kv tensor before ``repeat_kv`` (or value itself when it has ``heads`` heads)."""
    if static_dim(value, 1) == heads:
        reshape = producer(value, "Reshape")
        expand = producer(reshape.inputs[0], "Expand") if reshape else None
        unsq = producer(expand.inputs[0], "Unsqueeze") if expand else None
        if unsq is not None and const_ints(unsq.inputs[1]) == [2] and rank(unsq.inputs[0]) == 4:
            kv_heads = static_dim(unsq.inputs[0], 1)
            if kv_heads is not None and heads % kv_heads == 0:
                return unsq.inputs[0]
        return value
    return None


def _split_cache(kv: ir.Value) -> tuple[ir.Value | None, ir.Value]:
    """(past, new) if kv = Concat(past, new, axis=2), else (None, kv)."""
    cat = producer(kv, "Concat")
    if cat is not None and len(cat.inputs) == 2 and attr(cat, "axis") in (2, -2):
        return cat.inputs[0], cat.inputs[1]
    return None, kv


def _match(softmax: ir.Node):
    if attr(softmax, "axis", -1) not in (-1, 3):
        return None
    scores = softmax.inputs[0]
    mask = None
    add = producer(scores, "Add")
    if add is not None:
        for s, m in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
            if producer(s, "Mul") is not None:
                scores, mask = s, m
                break
        else:
            return None
    mul = producer(scores, "Mul")
    if mul is None:
        return None
    for mm, sc in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])):
        scale = const_scalar(sc)
        matmul = producer(mm, "MatMul")
        if scale is not None and matmul is not None:
            break
    else:
        return None
    q = matmul.inputs[0]
    tr = producer(matmul.inputs[1], "Transpose")
    if tr is None or attr(tr, "perm") != [0, 1, 3, 2] or rank(q) != 4 or q.dtype != ir.DataType.FLOAT:
        return None
    heads = static_dim(q, 1)
    if heads is None:
        return None
    # the probabilities, possibly with the NaN guard of a boolean mask
    probs = softmax.outputs[0]
    uses = users(probs)
    if len(uses) == 2 and {n.op_type for n in uses} == {"IsNaN", "Where"}:
        where = next(n for n in uses if n.op_type == "Where")
        isnan = next(n for n in uses if n.op_type == "IsNaN")
        if where.inputs[0] is not isnan.outputs[0] or where.inputs[2] is not probs or const_scalar(where.inputs[1]) != 0.0:
            return None
        probs = where.outputs[0]
        uses = users(probs)
    if len(uses) != 1 or uses[0].op_type != "MatMul" or uses[0].inputs[0] is not probs:
        return None
    out_matmul = uses[0]
    k = _unrepeat(tr.inputs[0], heads)
    v = _unrepeat(out_matmul.inputs[1], heads)
    if k is None or v is None or static_dim(k, 1) != static_dim(v, 1):
        return None
    if _may_broadcast(q.shape[0], k.shape[0]) or _may_broadcast(q.shape[0], v.shape[0]):
        return None
    # the mask: Where(bool_mask, 0, -inf) or a float bias
    if mask is not None:
        where = producer(mask, "Where")
        if where is not None and const_scalar(where.inputs[1]) == 0.0 and const_scalar(where.inputs[2]) == float("-inf"):
            mask = where.inputs[0]
        elif mask.dtype != q.dtype:
            return None
    return q, k, v, mask, scale, out_matmul


def fuse_attention(model: ir.Model) -> int:
    """Replaces each attention (and its cache Concat) by one ``Attention`` node; returns the count.
    Does nothing on a model of opset < 23."""
    if model.graph.opset_imports.get("", 0) < 23:
        return 0
    graph = model.graph
    count = 0
    expanded: dict[tuple, ir.Value] = {}  # the masks already expanded, shared by the layers
    for softmax in [n for n in graph if n.op_type == "Softmax" and n.domain == ""]:
        found = _match(softmax)
        if found is None:
            continue
        q, k, v, mask, scale, out_matmul = found
        past_k, new_k = _split_cache(k)
        past_v, new_v = _split_cache(v)
        if (past_k is None) != (past_v is None) or (past_k is not None and not _both_outputs(graph, k, v)):
            # a cache that keeps something else than the concatenation (a sliding window keeps its last
            # positions): the Concat stays, the Attention takes all the keys and values, no past
            past_k, new_k, past_v, new_v = None, k, None, v
        mask_nodes: list[ir.Node] = []
        if mask is not None:
            mask = _mask_for_attention(graph, mask, q, k, past_k, new_k, mask_nodes, expanded)
            if mask is None:  # a mask of another length than the queries or the keys: the attention stays as it is
                continue
        inputs = [q, new_k, new_v, mask]
        if past_k is not None:
            inputs += [past_k, past_v]
        fused = ir.node(
            "Attention", inputs, {"scale": float(scale)}, num_outputs=3 if past_k is not None else 1,
            name=f"Attention_{count}",
        )
        replace(graph, out_matmul, [*mask_nodes, fused], [out_matmul.outputs[0]], [fused.outputs[0]])
        if past_k is not None:
            _take_graph_output(graph, k, fused.outputs[1])
            _take_graph_output(graph, v, fused.outputs[2])
        count += 1
    return count


#: the nodes which only place the values of their first input: a mask made of one value stays so through them
_PLACING_OPS = ("Expand", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Identity")


def _keeps_every_score(mask: ir.Value) -> bool:
    """Whether ``mask`` is a constant letting every score through unchanged (a boolean of True only, a float bias
    of zeros only), possibly expanded or reshaped."""
    node = mask.producer()
    while node is not None and node.op_type in _PLACING_OPS and node.domain in ("", "ai.onnx"):
        mask = node.inputs[0]
        node = mask.producer()
    array = const_array(mask)
    if array is None or array.size == 0:
        return False
    if array.dtype == np.bool_:
        return bool(array.all())
    return array.dtype.kind == "f" and not np.any(array)


def drop_full_masks(model: ir.Model) -> int:
    """The mask of each ``Attention`` that hides nothing (a constant of True or of zeros, expanded: ViT's, whose
    transformers' mask is all True) is removed; returns the count. onnxruntime's kernel otherwise turns the boolean
    mask into a bias and adds it to every score (ViT-base, 197 tokens, 1 thread: 0.86 against 0.82 ms a layer);
    the scores are the same (x + 0)."""
    count = 0
    for node in [n for n in model.graph if n.op_type == "Attention" and n.domain in ("", "ai.onnx")]:
        if len(node.inputs) > 3 and node.inputs[3] is not None and _keeps_every_score(node.inputs[3]):
            node.replace_input_with(3, None)
            count += 1
    return count


def _same_dim(a: Any, b: Any) -> bool:
    """Whether two dimensions are known to be equal: the same number or the same named dimension."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return isinstance(a, ir.SymbolicDim) and a.value is not None and a == b


def _may_broadcast(a: Any, b: Any) -> bool:
    """Whether two batch dimensions may differ where a MatMul broadcasts them: a number against another
    number or against a named dimension (two names: equal, or onnxruntime refuses them when it runs)."""
    return not _same_dim(a, b) and (isinstance(a, int) or isinstance(b, int))


def _dim_key(dim: Any) -> Any:
    """A dimension as a key (a number or a name), None when unnamed."""
    if isinstance(dim, int):
        return dim
    return dim.value if isinstance(dim, ir.SymbolicDim) and dim.value is not None else None


def _length(value: ir.Value, axis: int, new_nodes: list[ir.Node]) -> ir.Value:
    """``Shape(value)[axis]`` (1D), read before the Transposes and views producing ``value`` (the 3D
    layout removes them: the shape must not keep them computed)."""
    while True:
        tr = producer(value, "Transpose")
        if tr is not None and attr(tr, "perm") is not None:
            value, axis = tr.inputs[0], attr(tr, "perm")[axis]
            continue
        reshape = producer(value, "Reshape")
        source = reshape.inputs[0] if reshape is not None else None
        if (source is not None and source.shape is not None and value.shape is not None and axis < len(source.shape)
                and all(_same_dim(source.shape[i], value.shape[i]) for i in range(axis + 1))):
            value = source  # a view keeping the dimensions up to axis
            continue
        break
    node = ir.node("Shape", [value], {"start": axis, "end": axis + 1})
    new_nodes.append(node)
    return node.outputs[0]


def _mask_for_attention(graph: ir.Graph, mask: ir.Value, q: ir.Value, k: ir.Value, past_k: ir.Value | None,
                        new_k: ir.Value, new_nodes: list[ir.Node], expanded: dict[tuple, ir.Value]) -> ir.Value | None:
    """The mask the ``Attention`` takes: ``mask`` when its last two dimensions are the number of queries of
    ``q`` and of keys ``k`` (past and new ones), the mask expanded to them (nodes appended to ``new_nodes``)
    where they are 1, None when neither can be proven from the shapes, or when its heads (1 or the kv heads)
    or its batch (1 or the query's) are not onnxruntime's.

    The sdpa pattern adds the mask to the scores, which broadcasts; onnxruntime's ``Attention`` checks the
    mask's last dimension against the total sequence length, the one before against the query's length
    (``attention_helper.h``). transformers' bidirectional mask (a cross-attention without an encoder mask,
    under torch.export) is ``[1, 1, q, 1]``, BERT's or LayoutLM's padding mask ``[batch, 1, 1, keys]``. A
    mask expanded once serves every layer of the same lengths (``expanded``)."""
    r = rank(mask)
    if r is None or rank(k) != 4 or rank(q) != 4 or not 2 <= r <= 4:
        return None
    dims = list(mask.shape)
    if r >= 3 and dims[-3] not in (1, static_dim(k, 1)):
        return None
    if r == 4 and dims[0] != 1 and _may_broadcast(dims[0], q.shape[0]):
        return None
    queries, keys = q.shape[2], k.shape[2]
    rows = not _same_dim(dims[-2], queries)  # to expand
    columns = not _same_dim(dims[-1], keys)
    if (rows and dims[-2] != 1) or (columns and dims[-1] != 1):
        return None
    if not rows and not columns:
        return mask
    key = (id(mask), _dim_key(queries) if rows else 0, _dim_key(keys) if columns else 0)
    cacheable = None not in key  # named lengths: the same in every layer where they have the same name
    if cacheable and key in expanded:
        return expanded[key]
    # Expand(mask, [1, ..., 1, queries or 1, keys or 1]), the lengths read from the inputs
    ones = initializer(graph, "attention_mask_one", np.ones(1, dtype=np.int64))
    parts = [initializer(graph, f"attention_mask_ones_{r - 2}", np.ones(r - 2, dtype=np.int64))]
    parts.append(_length(q, 2, new_nodes) if rows else ones)
    if columns:
        lengths = [_length(t, 2, new_nodes) for t in (past_k, new_k) if t is not None]
        total = lengths[0]
        if len(lengths) == 2:
            add = ir.node("Add", lengths)
            new_nodes.append(add)
            total = add.outputs[0]
        parts.append(total)
    else:
        parts.append(ones)
    shape = ir.node("Concat", parts, {"axis": 0})
    expand = ir.node("Expand", [mask, shape.outputs[0]])
    expand.outputs[0].type = mask.type
    expand.outputs[0].shape = ir.Shape([*dims[:-2], queries if rows else dims[-2], keys if columns else dims[-1]])
    new_nodes += [shape, expand]
    if cacheable:
        expanded[key] = expand.outputs[0]
    return expand.outputs[0]


def _both_outputs(graph: ir.Graph, k: ir.Value, v: ir.Value) -> bool:
    """Whether the concatenated keys and values are graph outputs (the present cache)."""
    outputs = {id(o) for o in graph.outputs}
    return id(k) in outputs and id(v) in outputs


def _take_graph_output(graph: ir.Graph, old: ir.Value, new: ir.Value) -> None:
    """The present key / value output becomes the Attention's. Other users keep the
    Concat: one placed before the attention (a shape computation) would otherwise
    depend on a later node. The Concat goes when nothing else uses it."""
    new.type, new.shape = old.type, old.shape
    for i, out in enumerate(graph.outputs):
        if out is old:
            name = old.name
            old.name = f"{name}__replaced"
            new.name = name
            graph.outputs[i] = new


#: normalizations of each head (Qwen3's, OLMo 2's q/k norms) the 3D layout keeps on the heads' view
_HEAD_NORMS = ("SimplifiedLayerNormalization", "RMSNormalization", "LayerNormalization")


def _heads_view(value: ir.Value, new_nodes: list[ir.Node] | None = None) -> tuple[ir.Value, int, int] | None:
    """(x3, heads, head_size) if value = Transpose(Reshape(x3, [b, s, heads, head_size]), [0, 2, 1, 3]).

    With ``new_nodes``, also through a normalization of each head between the two
    (``Transpose(Norm(Reshape(x3)), ...)``, the norm on the last axis): x3 is then the normalized
    heads reshaped back to ``[b, s, heads * head_size]``, a ``Reshape`` appended to ``new_nodes``
    (a view, where the Transpose copied)."""
    tr = producer(value, "Transpose")
    if tr is None or attr(tr, "perm") != [0, 2, 1, 3]:
        return None
    norm = tr.inputs[0].producer() if tr.inputs[0] is not None else None
    if (new_nodes is not None and norm is not None and norm.op_type in _HEAD_NORMS and norm.inputs
            and attr(norm, "axis", -1) in (-1, 3) and len(norm.outputs) >= 1):
        view = _reshape_view(norm.inputs[0])
        if view is None:
            return None
        _, heads, size = view
        x4 = norm.outputs[0]
        shape = initializer(norm.graph, f"attention_merged_heads_shape_{heads * size}",
                            np.array([0, 0, heads * size], dtype=np.int64))
        merged = ir.node("Reshape", [x4, shape])
        merged.outputs[0].type = x4.type
        merged.outputs[0].shape = ir.Shape([x4.shape[0], x4.shape[1], heads * size]) if x4.shape is not None else None
        new_nodes.append(merged)
        return merged.outputs[0], heads, size
    return _reshape_view(tr.inputs[0])


def _reshape_view(value: ir.Value | None) -> tuple[ir.Value, int, int] | None:
    """(x3, heads, head_size) if value = Reshape(x3, [b, s, heads, head_size])."""
    reshape = producer(value, "Reshape") if value is not None else None
    if reshape is None:
        return None
    x3, x4 = reshape.inputs[0], reshape.outputs[0]
    if rank(x3) != 3 or rank(x4) != 4:
        return None
    heads, size = static_dim(x4, 2), static_dim(x4, 3)
    if heads is None or size is None or static_dim(x3, 2) != heads * size:
        return None
    if x3.shape[0] != x4.shape[0] or x3.shape[1] != x4.shape[1]:
        return None
    return x3, heads, size


def _peel(value: ir.Value, new_nodes: list[ir.Node]) -> tuple[ir.Value, int, int] | None:
    """The 3D [batch, seq, heads * head_size] form of a 4D attention input, through a
    rotary embedding (applied to the 3D form with ``num_heads``) if there is one."""
    rotary = value.producer()
    if rotary is not None and rotary.op_type == "RotaryEmbedding" and rotary.domain in ("", "com.microsoft"):
        view = _heads_view(rotary.inputs[0], new_nodes)
        if view is None:
            return None
        x3, heads, size = view
        attrs = {k: a.value for k, a in rotary.attributes.items()}
        attrs["num_heads"] = heads
        node = ir.node("RotaryEmbedding", [x3, *rotary.inputs[1:]], attrs, domain=rotary.domain)
        node.outputs[0].type, node.outputs[0].shape = x3.type, x3.shape
        new_nodes.append(node)
        return node.outputs[0], heads, size
    return _heads_view(value, new_nodes)


def attention_3d_layout(model: ir.Model) -> int:
    """``Attention`` on ``[batch, seq, heads * head_size]`` inputs and output: the
    Reshape / Transpose into heads before it and back after it go (the clean-ups remove
    the pairs left). Returns the count."""
    graph = model.graph
    count = 0
    for node in [n for n in graph if n.op_type == "Attention" and n.domain == ""]:
        new_nodes: list[ir.Node] = []
        views = [_peel(node.inputs[i], new_nodes) for i in range(3)]
        if None in views or views[0][2] != views[1][2] or views[1][1:] != views[2][1:]:
            continue
        (q3, heads, size), (k3, kv_heads, _), (v3, _, _) = views
        attrs = {k: a.value for k, a in node.attributes.items()}
        attrs.update(q_num_heads=heads, kv_num_heads=kv_heads)
        fused = ir.node("Attention", [q3, k3, v3, *node.inputs[3:]], attrs, num_outputs=len(node.outputs))
        y3 = fused.outputs[0]
        y3.type, y3.shape = q3.type, q3.shape
        shape = initializer(graph, f"attention_heads_shape_{heads}_{size}", np.array([0, 0, heads, size], dtype=np.int64))
        y4 = ir.node("Reshape", [y3, shape])
        back = ir.node("Transpose", [y4.outputs[0]], {"perm": [0, 2, 1, 3]})
        new_nodes += [fused, y4, back]
        for old, new in zip(node.outputs[1:], fused.outputs[1:]):
            new.type, new.shape = old.type, old.shape
        replace(graph, node, new_nodes, list(node.outputs), [back.outputs[0], *fused.outputs[1:]])
        count += 1
    return count
