"""Rotary embedding: ``x * cos + rotate_half(x) * sin`` into one node.

The pattern (transformers' ``apply_rotary_pos_emb`` converted by fx2onnx)::

    half = Concat(Neg(Slice(x, h, 2h, axis=-1)), Slice(x, 0, h, axis=-1), axis=-1)
    y = Add(Mul(x, Unsqueeze(cos)), Mul(half, Unsqueeze(sin)))
    cos = Cos(Concat(f, f, axis=-1)) [* scaling]     sin = Sin(Concat(f, f, axis=-1)) [* scaling]

``x`` is ``[batch, heads, seq, 2h]``, ``f`` the frequencies ``[batch, seq, h]``. The halves may
also come computed, ``cos = Concat(c, c)``, ``sin = Concat(s, s)`` with any ``c`` and ``s`` of
``[batch, seq, h]`` (Qwen2-VL's multimodal rotary: sections of the cosines of three rows of
positions): the kernel's formula on the caches ``c`` and ``s``, the same values. Both
fused operators read ``cos``/``sin`` from caches indexed by position ids; the rule
gives them the model's own ``cos(f)``, ``sin(f)`` reshaped into ``[batch*seq, h]``
caches with position ids ``arange(batch*seq)``: no assumption on how ``f`` is
computed (any rope scaling), the same values as the unfused graph.

A partial rotary embedding (phi, GPT-NeoX, StableLM: the first ``r`` values of each head
rotated, the others passed) ``Concat(rotary(Slice(x, 0, r)), Slice(x, r, end))`` becomes
one node on ``x`` with ``rotary_embedding_dim=r``.

* level ``onnxruntime``: ``com.microsoft.RotaryEmbedding``, the standard one on a model of opset >= 23;
* level ``opset23``: the standard ``RotaryEmbedding``.

The standard operator takes the caches as ``[batch, seq, h]`` without position ids: ``cos(f)`` and
``sin(f)`` as they are, 2 nodes for the whole model instead of 9 (the reshapes into ``[batch*seq, h]``
caches and the position ids ``arange(batch*seq)``: a tenth of a tiny decoder's step in onnxruntime).
Where ``f`` has a batch of 1 broadcast over ``x``'s, the caches stay 2-D with position ids.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ._graph import (
    attr,
    const_ints,
    const_scalar,
    ensure_opset,
    initializer,
    producer,
    rank,
    replace,
    static_dim,
    users,
)


def _slice_range(node: ir.Node | None, x: ir.Value) -> tuple[int, int] | None:
    if node is None or node.inputs[0] is not x or len(node.inputs) < 4:
        return None
    starts, ends, axes = const_ints(node.inputs[1]), const_ints(node.inputs[2]), const_ints(node.inputs[3])
    steps = const_ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else [1]
    r = rank(x)
    if None in (starts, ends, axes, steps) or len(starts) != 1 or steps != [1] or axes[0] not in (-1, (r or 0) - 1):
        return None
    return starts[0], ends[0]


def _rotate_half_input(half: ir.Value) -> ir.Value | None:
    """x if ``half == Concat(-x[..., h:], x[..., :h])``."""
    cat = producer(half, "Concat")
    if cat is None or len(cat.inputs) != 2:
        return None
    neg = producer(cat.inputs[0], "Neg")
    first = producer(cat.inputs[1], "Slice")
    second = producer(neg.inputs[0], "Slice") if neg else None
    if first is None or second is None:
        return None
    x = first.inputs[0]
    r = rank(x)
    if r is None or attr(cat, "axis") not in (-1, r - 1):
        return None
    dim = x.shape[-1]
    if not isinstance(dim, int) or dim % 2:
        return None
    h = dim // 2
    lo, hi = _slice_range(first, x), _slice_range(second, x)
    if lo is None or hi is None or lo[0] != 0 or lo[1] != h or hi[0] != h or hi[1] < dim:
        return None
    return x


def _trig(value: ir.Value, op_type: str) -> tuple[ir.Value, float, bool] | None:
    """(f, scaling, False) if value is ``Unsqueeze(Trig(Concat(f, f)) [* scaling], 1)``;
    (c, 1.0, True) if it is ``Unsqueeze(Concat(c, c), 1)``, ``c`` the half already computed
    (Qwen2-VL's multimodal rotary: sections of three rows of cosines concatenated)."""
    unsq = producer(value, "Unsqueeze")
    if unsq is None or const_ints(unsq.inputs[1]) not in ([1], [-3]):
        return None
    inner = unsq.inputs[0]
    doubled = producer(inner, "Concat")
    if doubled is not None and len(doubled.inputs) == 2 and doubled.inputs[0] is doubled.inputs[1] \
            and rank(doubled.inputs[0]) == 3 and attr(doubled, "axis") in (-1, 2) \
            and producer(doubled.inputs[0], op_type) is None:
        return doubled.inputs[0], 1.0, True
    scaling = 1.0
    mul = producer(inner, "Mul")
    if mul is not None:
        for a, b in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])):
            s = const_scalar(b)
            if s is not None and producer(a, op_type) is not None:
                inner, scaling = a, s
                break
        else:
            return None
    trig = producer(inner, op_type)
    cat = producer(trig.inputs[0], "Concat") if trig else None
    if cat is None or len(cat.inputs) != 2 or cat.inputs[0] is not cat.inputs[1] or rank(cat.inputs[0]) != 3:
        return None
    if attr(cat, "axis") not in (-1, 2):
        return None
    return cat.inputs[0], scaling, False


def _match(add: ir.Node):
    """(x, cos source, sin source) for an Add ending a rotary embedding, each source
    ``(value, scaling, computed)`` (:func:`_trig`)."""
    muls = [producer(v, "Mul") for v in add.inputs]
    if None in muls:
        return None
    for m_cos, m_sin in ((muls[0], muls[1]), (muls[1], muls[0])):
        for x, c in ((m_cos.inputs[0], m_cos.inputs[1]), (m_cos.inputs[1], m_cos.inputs[0])):
            if rank(x) != 4:
                continue
            cos = _trig(c, "Cos")
            if cos is None:
                continue
            for half, s in ((m_sin.inputs[0], m_sin.inputs[1]), (m_sin.inputs[1], m_sin.inputs[0])):
                sin = _trig(s, "Sin")
                # frequencies: the same for both; halves computed: any (y = x * [c, c] + rotate_half(x) * [s, s]
                # is the kernel's formula on caches c and s)
                if sin is None or sin[2] != cos[2] or (not cos[2] and sin[0] is not cos[0]) \
                        or _rotate_half_input(half) is not x:
                    continue
                if any(t[0].shape is None or t[0].shape[-1] != x.shape[-1] // 2 for t in (cos, sin)) \
                        or x.dtype != ir.DataType.FLOAT or (cos[2] and cos[0].dtype != x.dtype):
                    continue
                return x, cos, sin
    return None


def _same_dim(a: ir.Value, b: ir.Value, axis: int) -> bool:
    """Tells if two values have the same size on ``axis``: one integer or one named dimension."""
    if a.shape is None or b.shape is None or len(a.shape) <= axis or len(b.shape) <= axis:
        return False
    da, db = a.shape[axis], b.shape[axis]
    if isinstance(da, int) or isinstance(db, int):
        return isinstance(da, int) and isinstance(db, int) and da == db
    return da.value is not None and da.value == db.value


class _Caches:
    """cos/sin caches and position ids built once per frequency tensor."""

    def __init__(self, graph: ir.Graph):
        self.graph = graph
        self.built: dict[tuple[int, int, float, float], tuple] = {}

    def get(self, cos: tuple, sin: tuple, x: ir.Value, anchor: ir.Node, positions: bool = True):
        """(cos cache, sin cache, position ids); without ``positions`` (the standard operator), the
        ``[batch, seq, h]`` caches and no position ids when ``f`` has ``x``'s batch."""
        positions = positions or not _same_dim(cos[0], x, 0)
        key = (id(cos[0]), id(sin[0]), cos[1], sin[1], positions)
        if key in self.built:
            return self.built[key]
        g = self.graph
        f = cos[0]
        h = f.shape[-1]
        c = lambda name, arr: initializer(g, name, np.array(arr, dtype=np.int64))  # noqa: E731
        new = []

        def op(op_type, *inputs, **attrs):
            n = ir.node(op_type, list(inputs), attrs or None)
            new.append(n)
            return n.outputs[0]

        cache_shape = c(f"rotary_cache_shape_{h}", [-1, h])
        caches = []
        for trig, (source, scale, computed) in (("Cos", cos), ("Sin", sin)):
            v = source if computed else op(trig, source)
            if scale != 1.0:
                v = op("Mul", v, initializer(g, f"rotary_scale_{trig}_{scale}", np.array(scale, dtype=np.float32)))
            caches.append(op("Reshape", v, cache_shape) if positions else v)
        if not positions:
            g.insert_before(anchor, new)
            for n in new:
                n.metadata_props.update(anchor.metadata_props)
            self.built[key] = (caches[0], caches[1], None)
            return self.built[key]
        bs = op("Shape", f, start=0, end=2)
        total = op("ReduceProd", bs, keepdims=1)
        positions = op("Range", c("rotary_zero", 0), op("Squeeze", total), c("rotary_one", 1))
        pos = op("Reshape", positions, bs)
        if not _same_dim(f, x, 0):  # f may have a batch of 1 broadcast over x's batch
            batch_seq = op("Concat", op("Shape", x, start=0, end=1), op("Shape", f, start=1, end=2), axis=0)
            pos = op("Expand", pos, batch_seq)
        g.insert_before(anchor, new)
        for n in new:
            n.metadata_props.update(anchor.metadata_props)
        self.built[key] = (caches[0], caches[1], pos)
        return self.built[key]


def _partial(add: ir.Node, x: ir.Value) -> tuple[ir.Value, ir.Node, int] | None:
    """(whole input, Concat, r) if the rotation of ``x = Slice(whole, 0, r)`` is concatenated
    with ``Slice(whole, r, end)`` on the last axis, the only use of the rotation."""
    rotated = producer(x, "Slice")
    whole = rotated.inputs[0] if rotated is not None else None
    if whole is None or rank(whole) != 4 or static_dim(whole, 1) is None:
        return None
    dim, r = whole.shape[-1], x.shape[-1]
    if not isinstance(dim, int) or not isinstance(r, int) or _slice_range(rotated, whole) != (0, r) or r >= dim:
        return None
    uses = users(add.outputs[0])
    cat = uses[0] if len(uses) == 1 and uses[0].op_type == "Concat" else None
    if cat is None or len(cat.inputs) != 2 or cat.inputs[0] is not add.outputs[0] or attr(cat, "axis") not in (-1, 3):
        return None
    passed = _slice_range(producer(cat.inputs[1], "Slice"), whole)
    if passed is None or passed[0] != r or passed[1] < dim:
        return None
    return whole, cat, r


def fuse_rotary_embedding(model: ir.Model, standard: bool = False) -> int:
    """Replaces each rotary embedding by ``com.microsoft.RotaryEmbedding`` (a model of opset < 23) or by
    ``RotaryEmbedding`` (``standard=True``, or a model of opset >= 23); returns the count."""
    graph = model.graph
    caches = _Caches(graph)
    count = 0
    # onnxruntime runs the standard operator as its own (opset 23): it takes the caches without position ids
    standard = standard or model.opset_imports.get("", 0) >= 23
    for add in [n for n in graph if n.op_type == "Add" and n.domain == ""]:
        found = _match(add)
        if found is None:
            continue
        x, cos, sin = found
        attrs, anchor, partial = {"interleaved": 0}, add, _partial(add, x)
        if partial is not None:  # one node on the whole head, the rotated part's size as an attribute
            x, anchor, r = partial
            attrs.update(rotary_embedding_dim=r, num_heads=static_dim(x, 1))
        # the nodes are visited in order: the caches go before the first rotary
        cos_cache, sin_cache, pos = caches.get(cos, sin, x, add, positions=not standard)
        if standard:
            fused = ir.node("RotaryEmbedding", [x, cos_cache, sin_cache] + ([pos] if pos is not None else []), attrs,
                            name=f"RotaryEmbedding_{count}")
        else:
            fused = ir.node(
                "RotaryEmbedding", [x, pos, cos_cache, sin_cache], attrs, domain="com.microsoft",
                name=f"RotaryEmbedding_{count}",
            )
        replace(graph, anchor, [fused], [anchor.outputs[0]], [fused.outputs[0]], metadata_from=add)
        count += 1
    if count and not standard:
        ensure_opset(model, "com.microsoft", 1)
    return count

