"""Rules for the encoders (BERT, MiniLM, wav2vec2, DETR's transformer): their bidirectional attention into one
``Attention`` node, their post-norm residual sums kept away from onnxruntime's ``SkipLayerNormalization``.

``attention_key_transposes``: an encoder's key enters the scores through one ``Transpose(k, [0, 2, 3, 1])`` (the
clean-ups folded the view into heads, ``[0, 2, 1, 3]``, and sdpa's ``[0, 1, 3, 2]`` into it), which the attention
fusion (:mod:`.attention`) does not read. The rule splits it back into the two; the fusion then takes the heads'
view, the 3D layout removes it, and the clean-ups fold back what no fusion took::

    # k4: [batch, seq, heads, head_size]
    scores = MatMul(q, Transpose(k4, [0, 2, 3, 1]))
    scores = MatMul(q, Transpose(Transpose(k4, [0, 2, 1, 3]), [0, 1, 3, 2]))

``residual_sums``: onnxruntime fuses at load time (``SkipLayerNormFusion``, graph optimization level 2 and up,
every client's default) an ``Add`` of two 3D tensors of the same shape, and the bias ``Add`` before it, feeding a
``LayerNormalization`` into its contrib ``SkipLayerNormalization``. Its CPU kernel is slower than the three nodes it
replaces: in onnxruntime 1.31, 1 thread, ``[8, 128, 384]``: 2.38 ms against 0.75 ms (0.29 ms against 0.07 ms for
``[1, 128, 384]``); MiniLM-L6 then runs 7 % slower than the same graph without it. It fuses ours because every
value carries torch's shapes (the fusion checks them), not torch.onnx.export's, whose values have none. The rule
writes such an ``Add`` as a ``Sum`` of the same two inputs (the same additions, the same results, bit for bit):
onnxruntime leaves it alone and its ``Sum`` kernel is as fast (0.66 against 0.75 ms, the same shapes).
"""

from __future__ import annotations

import onnx_ir as ir

from ._graph import attr, rank, replace, users

#: the permutation of a key folded from the heads' view and sdpa's transpose, and the two it is made of
_FOLDED_KEY, _HEADS, _KEY_T = [0, 2, 3, 1], [0, 2, 1, 3], [0, 1, 3, 2]


def split_key_transposes(model: ir.Model) -> int:
    """``Transpose(k4, [0, 2, 3, 1])`` taken as the second input of a ``MatMul`` (a key entering attention scores)
    into ``Transpose(Transpose(k4, [0, 2, 1, 3]), [0, 1, 3, 2])``, the form the attention fusion reads; returns the
    count. Only on a model of opset >= 23 (the fusion's)."""
    if model.graph.opset_imports.get("", 0) < 23:
        return 0
    graph = model.graph
    count = 0
    for node in [n for n in graph if n.op_type == "Transpose" and n.domain == ""]:
        out = node.outputs[0]
        uses = users(out)
        if attr(node, "perm") != _FOLDED_KEY or rank(node.inputs[0]) != 4 or out in graph.outputs or not uses:
            continue
        if any(u.op_type != "MatMul" or u.domain != "" or u.inputs[1] is not out for u in uses):
            continue
        heads = ir.node("Transpose", [node.inputs[0]], {"perm": _HEADS})
        keys = ir.node("Transpose", [heads.outputs[0]], {"perm": _KEY_T})
        shape = node.inputs[0].shape
        heads.outputs[0].type = node.inputs[0].type
        heads.outputs[0].shape = ir.Shape([shape[i] for i in _HEADS])
        replace(graph, node, [heads, keys], [out], [keys.outputs[0]])
        count += 1
    return count


def residual_sums(model: ir.Model) -> int:
    """Each ``Add`` of two 3D tensors whose one user is a ``LayerNormalization`` (its input) becomes a ``Sum`` of
    the same inputs, which onnxruntime does not fuse into ``SkipLayerNormalization``; returns the count."""
    graph = model.graph
    count = 0
    for norm in [n for n in graph if n.op_type == "LayerNormalization" and n.domain == ""]:
        x = norm.inputs[0]
        add = x.producer() if x is not None else None
        if add is None or add.op_type != "Add" or add.domain != "" or x in graph.outputs:
            continue
        if len(users(x)) != 1 or rank(add.inputs[0]) != 3 or rank(add.inputs[1]) != 3:
            continue
        total = ir.node("Sum", list(add.inputs))
        replace(graph, add, [total], [x], [total.outputs[0]])
        count += 1
    return count
