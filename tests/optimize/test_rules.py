"""Each rule alone on a small graph: it applies, and the results stay the same
(onnxruntime before / after, two input shapes)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as onh
from optimize_helpers import FLOAT, apply_rule, check_rule, make_model, op_types, run

from fx2onnx.optimizer.rules.activation import fuse_gelu
from fx2onnx.optimizer.rules.attention import fuse_attention
from fx2onnx.optimizer.rules.cleanup import broadcast_expands, fold_reshapes, fold_transposes, remove_identities
from fx2onnx.optimizer.rules.matmul_packing import pack_matmuls
from fx2onnx.optimizer.rules.normalization import fuse_rms_normalization, fuse_skip_rms_normalization
from fx2onnx.optimizer.rules.rotary import fuse_rotary_embedding

RNG = np.random.default_rng(0)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _rms_nodes(x: str, out: str, square: str = "Mul"):
    sq = oh.make_node("Mul", [x, x], ["sq"]) if square == "Mul" else oh.make_node("Pow", [x, "two"], ["sq"])
    return [
        sq,
        oh.make_node("ReduceMean", ["sq", "axes"], ["mean"], keepdims=1),
        oh.make_node("Add", ["mean", "eps"], ["var"]),
        oh.make_node("Sqrt", ["var"], ["std"]),
        oh.make_node("Reciprocal", ["std"], ["inv"]),
        oh.make_node("Mul", [x, "inv"], ["normed"]),
        oh.make_node("Mul", ["weight", "normed"], [out]),
    ]


RMS_INITS = [("axes", np.array([-1], np.int64)), ("eps", np.array(1e-6, np.float32)),
             ("two", np.array(2.0, np.float32)), ("weight", randn(16))]


@pytest.mark.parametrize("square", ["Mul", "Pow"])
@pytest.mark.parametrize("op_type,opset", [("SimplifiedLayerNormalization", 18), ("RMSNormalization", 23)])
def test_rms_normalization(square, op_type, opset):
    model = make_model(_rms_nodes("x", "y", square), [("x", FLOAT, ["b", "s", 16])], [("y", FLOAT, ["b", "s", 16])],
                       RMS_INITS, opset=opset)
    fused = check_rule(model, lambda m: fuse_rms_normalization(m, op_type=op_type),
                       [{"x": randn(2, 3, 16)}, {"x": randn(1, 5, 16)}], 1)
    assert op_types(fused) == {op_type: 1}


def test_skip_rms_normalization():
    nodes = [oh.make_node("Add", ["a", "b"], ["x"])] + _rms_nodes("x", "y") + [oh.make_node("Mul", ["x", "y"], ["z"])]
    model = make_model(nodes, [("a", FLOAT, ["b", "s", 16]), ("b", FLOAT, ["b", "s", 16])],
                       [("z", FLOAT, ["b", "s", 16])], RMS_INITS)

    def rule(m):
        return fuse_rms_normalization(m) + fuse_skip_rms_normalization(m)

    fused = check_rule(model, rule, [{"a": randn(2, 3, 16), "b": randn(2, 3, 16)}], 2)
    assert op_types(fused)["SkipSimplifiedLayerNormalization"] == 1 and "Add" not in op_types(fused)


def _rotate_nodes() -> list:
    """``y = x * cos + rotate_half(x) * sin`` on x [b, heads, s, 8], ``cos`` and ``sin`` made by the caller
    (new nodes at each call: a caller may rename their outputs)."""
    return [
        oh.make_node("Slice", ["x", "zero", "half", "minus1"], ["x1"]),
        oh.make_node("Slice", ["x", "half", "big", "minus1"], ["x2"]),
        oh.make_node("Neg", ["x2"], ["nx2"]),
        oh.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
        oh.make_node("Mul", ["x", "cos"], ["a"]),
        oh.make_node("Mul", ["sin", "rot"], ["b"]),
        oh.make_node("Add", ["a", "b"], ["y"]),
    ]


#: the constants of :func:`_rotate_nodes` and of the frequencies ``inv_freq`` of 4 pairs
_ROTATE_INITS = [("minus1", np.array([-1], np.int64)), ("one", np.array([1], np.int64)),
                 ("zero", np.array([0], np.int64)), ("half", np.array([4], np.int64)),
                 ("big", np.array([2**62], np.int64)),
                 ("inv_freq", (1.0 / 10000 ** (np.arange(0, 8, 2) / 8)).astype(np.float32))]


def _rotary_model(opset: int, scaling: float = 1.0, passed: int = 0, pos_batch: str = "b"):
    """x [b, 4, s, 8] rotated by cos/sin of f = position * inv_freq [b, s, 4]; with ``passed``, x has
    8 + passed values per head and the last ``passed`` are not rotated (phi's partial rotary)."""
    nodes = [
        oh.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        oh.make_node("Unsqueeze", ["posf", "minus1"], ["pos3"]),
        oh.make_node("Mul", ["pos3", "inv_freq"], ["f"]),
        oh.make_node("Concat", ["f", "f"], ["emb"], axis=-1),
        oh.make_node("Cos", ["emb"], ["cos0"]),
        oh.make_node("Sin", ["emb"], ["sin0"]),
        oh.make_node("Mul", ["cos0", "scaling"], ["cos1"]),
        oh.make_node("Mul", ["sin0", "scaling"], ["sin1"]),
        oh.make_node("Unsqueeze", ["cos1", "one"], ["cos"]),
        oh.make_node("Unsqueeze", ["sin1", "one"], ["sin"]),
        *_rotate_nodes(),
    ]
    inits = _ROTATE_INITS + [("scaling", np.array(scaling, np.float32))]
    value_info = []
    if passed:
        nodes = [oh.make_node("Slice", ["xx", "zero", "eight", "minus1"], ["x"]),
                 oh.make_node("Slice", ["xx", "eight", "big", "minus1"], ["xp"])] + nodes
        nodes[-1].output[0] = "y_rot"
        nodes.append(oh.make_node("Concat", ["y_rot", "xp"], ["y"], axis=-1))
        inits.append(("eight", np.array([8], np.int64)))
        value_info = [("x", FLOAT, ["b", 4, "s", 8]), ("y_rot", FLOAT, ["b", 4, "s", 8])]
    width = 8 + passed
    return make_model(nodes, [("xx" if passed else "x", FLOAT, ["b", 4, "s", width]), ("pos", TensorProto.INT64, [pos_batch, "s"])],
                      [("y", FLOAT, ["b", 4, "s", width])], inits, opset=opset, value_info=value_info)


@pytest.mark.parametrize("standard,opset,scaling", [(False, 18, 1.0), (False, 18, 0.5), (True, 23, 1.0)])
def test_rotary_embedding(standard, opset, scaling):
    model = _rotary_model(opset, scaling)
    feeds = [{"x": randn(2, 4, 3, 8), "pos": np.array([[5, 6, 7], [0, 1, 2]], np.int64)},
             {"x": randn(1, 4, 6, 8), "pos": np.arange(10, 16, dtype=np.int64)[None]}]
    fused = check_rule(model, lambda m: fuse_rotary_embedding(m, standard=standard), feeds, 1)
    assert op_types(fused)["RotaryEmbedding"] == 1 and "Neg" not in op_types(fused)
    # the standard operator takes the [batch, seq, 4] caches without position ids
    rotary = next(n for n in fused.graph.node if n.op_type == "RotaryEmbedding")
    assert len(rotary.input) == (3 if standard else 4)


def test_rotary_embedding_at_opset_23_is_the_standard_operator_without_positions():
    """The level onnxruntime on a model of opset 23: the standard operator (onnxruntime runs it), its caches
    cos(f) and sin(f) as they are: 2 nodes beside it, where the contrib operator needs 9."""
    feeds = [{"x": randn(2, 4, 3, 8), "pos": np.array([[5, 6, 7], [0, 1, 2]], np.int64)}]
    fused = check_rule(_rotary_model(23), fuse_rotary_embedding, feeds, 1)
    rotary = next(n for n in fused.graph.node if n.op_type == "RotaryEmbedding")
    assert rotary.domain == "" and len(rotary.input) == 3
    assert not {"Range", "Reshape", "ReduceProd"} & set(op_types(fused)), op_types(fused)


@pytest.mark.parametrize("standard,opset", [(False, 18), (True, 23)])
def test_rotary_embedding_of_halves_computed(standard, opset):
    """Qwen2-VL's multimodal rotary: the halves of cos and sin are sections of the cosines and sines of three
    rows of positions (time, height, width), then doubled: the kernel takes them as its caches."""
    nodes = [
        oh.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),  # [3, b, s]
        oh.make_node("Unsqueeze", ["posf", "minus1"], ["pos4"]),
        oh.make_node("Mul", ["pos4", "inv_freq"], ["f"]),  # [3, b, s, 4]
    ]
    for trig in ("Cos", "Sin"):
        t = trig.lower()
        nodes += [
            oh.make_node(trig, ["f"], [f"{t}3"]),
            oh.make_node("Split", [f"{t}3", "sections"], [f"{t}_a", f"{t}_b"], axis=3),
            oh.make_node("Gather", [f"{t}_a", "row0"], [f"{t}_ra"], axis=0),
            oh.make_node("Gather", [f"{t}_b", "row1"], [f"{t}_rb"], axis=0),
            oh.make_node("Concat", [f"{t}_ra", f"{t}_rb"], [f"{t}_half"], axis=2),
            oh.make_node("Concat", [f"{t}_half", f"{t}_half"], [f"{t}_full"], axis=2),
            oh.make_node("Unsqueeze", [f"{t}_full", "one"], [t]),
        ]
    nodes += _rotate_nodes()
    inits = _ROTATE_INITS + [("sections", np.array([1, 3], np.int64)), ("row0", np.array(0, np.int64)),
                             ("row1", np.array(1, np.int64))]
    model = make_model(nodes, [("x", FLOAT, ["b", 4, "s", 8]), ("pos", TensorProto.INT64, [3, "b", "s"])],
                       [("y", FLOAT, ["b", 4, "s", 8])], inits, opset=opset)
    rows = np.stack([np.array([[5, 6, 7], [0, 1, 2]]), np.array([[5, 9, 3], [0, 4, 4]]), np.zeros((2, 3))])
    feeds = [{"x": randn(2, 4, 3, 8), "pos": rows.astype(np.int64)}]
    fused = check_rule(model, lambda m: fuse_rotary_embedding(m, standard=standard), feeds, 1)
    assert op_types(fused)["RotaryEmbedding"] == 1 and "Neg" not in op_types(fused)


@pytest.mark.parametrize("standard,opset", [(False, 18), (True, 23)])
def test_rotary_embedding_positions_broadcast_over_the_batch(standard, opset):
    """Position ids of a batch of 1 for a batch of 2 (another dimension): the positions are expanded;
    with one batch dimension they are not (no node reads the rotated input's shape)."""
    feeds = [{"x": randn(2, 4, 3, 8), "pos": np.array([[5, 6, 7]], np.int64)},
             {"x": randn(3, 4, 6, 8), "pos": np.arange(10, 16, dtype=np.int64)[None]}]
    fused = check_rule(_rotary_model(opset, pos_batch="pb"), lambda m: fuse_rotary_embedding(m, standard=standard), feeds, 1)
    assert op_types(fused)["Expand"] == 1
    same_feeds = [{"x": randn(2, 4, 3, 8), "pos": np.array([[5, 6, 7], [0, 1, 2]], np.int64)}]
    same = check_rule(_rotary_model(opset), lambda m: fuse_rotary_embedding(m, standard=standard), same_feeds, 1)
    assert "Expand" not in op_types(same)


@pytest.mark.parametrize("standard,opset", [(False, 18), (True, 23)])
def test_partial_rotary_embedding(standard, opset):
    """phi's rotary on the first 8 of 12 values: one node with rotary_embedding_dim, no Slice or Concat left."""
    model = _rotary_model(opset, passed=4)
    feeds = [{"xx": randn(2, 4, 3, 12), "pos": np.array([[5, 6, 7], [0, 1, 2]], np.int64)},
             {"xx": randn(1, 4, 6, 12), "pos": np.arange(10, 16, dtype=np.int64)[None]}]
    fused = check_rule(model, lambda m: fuse_rotary_embedding(m, standard=standard), feeds, 1)
    ops = op_types(fused)
    assert ops["RotaryEmbedding"] == 1 and not {"Neg", "Slice"} & set(ops), ops
    node = next(n for n in fused.graph.node if n.op_type == "RotaryEmbedding")
    assert {a.name: a.i for a in node.attribute}["rotary_embedding_dim"] == 8


def _attention_model(with_past: bool, mask: str, kv_heads: int = 2, heads: int = 4, mask_keys: str | int | None = None):
    """sdpa as fx2onnx converts it, after a cache Concat and transformers' repeat_kv; ``mask_keys``:
    the last dimension of the mask (default: the number of keys)."""
    rep = heads // kv_heads
    nodes, k, v = [], "k", "v"
    if with_past:
        nodes += [oh.make_node("Concat", ["past_k", "k"], ["present_k"], axis=2),
                  oh.make_node("Concat", ["past_v", "v"], ["present_v"], axis=2)]
        k, v = "present_k", "present_v"
    for name in (k, v):
        if rep == 1:
            continue
        nodes += [
            oh.make_node("Shape", [name], [f"{name}_shape"]),
            oh.make_node("Slice", [f"{name}_shape", "i2", "i4"], [f"{name}_sd"]),
            oh.make_node("Unsqueeze", [name, "i2"], [f"{name}_5"]),
            oh.make_node("Concat", ["bkr", f"{name}_sd"], [f"{name}_target"], axis=0),
            oh.make_node("Expand", [f"{name}_5", f"{name}_target"], [f"{name}_exp"]),
            oh.make_node("Concat", ["bh", f"{name}_sd"], [f"{name}_shape4"], axis=0),
            oh.make_node("Reshape", [f"{name}_exp", f"{name}_shape4"], [f"{name}_rep"]),
        ]
    kr, vr = (f"{k}_rep", f"{v}_rep") if rep > 1 else (k, v)
    nodes += [
        oh.make_node("Transpose", [kr], ["kt"], perm=[0, 1, 3, 2]),
        oh.make_node("MatMul", ["q", "kt"], ["qk"]),
        oh.make_node("Mul", ["qk", "scale"], ["scores0"]),
    ]
    if mask == "bool":
        nodes += [oh.make_node("Where", ["mask", "zero", "neginf"], ["bias"]),
                  oh.make_node("Add", ["scores0", "bias"], ["scores"]),
                  oh.make_node("Softmax", ["scores"], ["p0"], axis=-1),
                  oh.make_node("IsNaN", ["p0"], ["nan"]),
                  oh.make_node("Where", ["nan", "zero", "p0"], ["p"])]
    else:
        nodes += [oh.make_node("Softmax", ["scores0"], ["p"], axis=-1)]
    nodes += [oh.make_node("MatMul", ["p", vr], ["y"])]
    total = "t" if with_past else "s"
    inputs = [("q", FLOAT, ["b", heads, "s", 8]), ("k", FLOAT, ["b", kv_heads, "s", 8]), ("v", FLOAT, ["b", kv_heads, "s", 8])]
    if with_past:
        inputs += [("past_k", FLOAT, ["b", kv_heads, "p", 8]), ("past_v", FLOAT, ["b", kv_heads, "p", 8])]
    if mask == "bool":
        inputs += [("mask", TensorProto.BOOL, ["b", 1, "s", total if mask_keys is None else mask_keys])]
    outputs = [("y", FLOAT, ["b", heads, "s", 8])]
    if with_past:
        outputs += [("present_k", FLOAT, ["b", kv_heads, total, 8]), ("present_v", FLOAT, ["b", kv_heads, total, 8])]
    inits = [("i2", np.array([2], np.int64)), ("i4", np.array([4], np.int64)), ("bkr", np.array([0, kv_heads, rep], np.int64)),
             ("bh", np.array([0, heads], np.int64)), ("scale", np.array(1 / math.sqrt(8), np.float32)),
             ("zero", np.array(0.0, np.float32)), ("neginf", np.array(-np.inf, np.float32))]
    # Expand cannot take 0 as "keep": the batch goes in through Shape
    for node in nodes:
        if node.op_type == "Concat" and node.input[0] in ("bkr", "bh"):
            node.input[0] = node.input[0] + "_b"
    for name in (k, v):
        if rep > 1:
            nodes.insert(0, oh.make_node("Shape", [name if not with_past else name.replace("present_", "")],
                                         [f"{name}_batch"], start=0, end=1))
    if rep > 1:
        nodes.insert(0, oh.make_node("Shape", ["q"], ["qb"], start=0, end=1))
        nodes.insert(1, oh.make_node("Concat", ["qb", "kvr"], ["bkr_b"], axis=0))
        nodes.insert(2, oh.make_node("Concat", ["qb", "hh"], ["bh_b"], axis=0))
        inits += [("kvr", np.array([kv_heads, rep], np.int64)), ("hh", np.array([heads], np.int64))]
    value_info = [(f"{name}_rep", FLOAT, ["b", heads, total, 8]) for name in (k, v) if rep > 1]
    return make_model(nodes, inputs, outputs, inits, opset=23, value_info=value_info)


def _attention_feeds(with_past, mask, b, s, p, kv_heads=2, heads=4):
    feeds = {"q": randn(b, heads, s, 8), "k": randn(b, kv_heads, s, 8), "v": randn(b, kv_heads, s, 8)}
    if with_past:
        feeds.update(past_k=randn(b, kv_heads, p, 8), past_v=randn(b, kv_heads, p, 8))
    if mask == "bool":
        t = s + (p if with_past else 0)
        causal = np.arange(t)[None, :] <= (t - s + np.arange(s))[:, None]
        feeds["mask"] = np.broadcast_to(causal, (b, 1, s, t)).copy()
    return feeds


@pytest.mark.parametrize("with_past,mask,kv_heads", [(True, "bool", 2), (False, "bool", 2), (True, "none", 4), (False, "none", 1)])
def test_attention(with_past, mask, kv_heads):
    model = _attention_model(with_past, mask, kv_heads=kv_heads)
    feeds = [_attention_feeds(with_past, mask, 2, 3, 5, kv_heads), _attention_feeds(with_past, mask, 1, 1, 7, kv_heads)]
    fused = check_rule(model, fuse_attention, feeds, 1)
    ops = op_types(fused)
    assert ops["Attention"] == 1 and "Softmax" not in ops and "Expand" not in ops and "Concat" not in ops, ops


def test_attention_fully_masked_rows():
    """A query row hiding every key (left padding): zeros before the fusion (the NaN guard) and after."""
    model = _attention_model(True, "bool")
    feeds = _attention_feeds(True, "bool", 2, 3, 5)
    feeds["mask"][0, :, :2, :] = False  # the first two rows of the first sequence see nothing
    fused = check_rule(model, fuse_attention, [feeds], 1)
    assert np.abs(run(fused, feeds)[0][0, :, :2]).max() == 0


def test_attention_of_a_sliding_cache_keeps_its_concat():
    """The cache a sliding layer returns is the last positions of the Concat, not the Concat (Gemma 3):
    the Attention takes all the keys and values, no past (onnxruntime refuses a past without present)."""
    model = _attention_model(True, "bool", kv_heads=4)
    nodes = list(model.graph.node)
    inits = [("last", np.array([-3], np.int64)), ("end", np.array([np.iinfo(np.int64).max], np.int64)),
             ("axis2", np.array([2], np.int64))]
    nodes += [oh.make_node("Slice", [f"present_{x}", "last", "end", "axis2"], [f"kept_{x}"]) for x in "kv"]
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(onh.from_array(value, name) for name, value in inits)
    for out in model.graph.output:
        if out.name.startswith("present_"):
            model.graph.value_info.append(onnx.ValueInfoProto.FromString(out.SerializeToString()))
            out.name = out.name.replace("present_", "kept_")
            out.type.tensor_type.shape.dim[2].dim_param = "w"
    feeds = [_attention_feeds(True, "bool", 2, 3, 5, 4), _attention_feeds(True, "bool", 1, 1, 7, 4)]
    fused = check_rule(model, fuse_attention, feeds, 1)
    attention = next(n for n in fused.graph.node if n.op_type == "Attention")
    assert len(attention.input) == 4 and len(attention.output) == 1
    assert {("past_k", "k"), ("past_v", "v")} <= {tuple(n.input) for n in fused.graph.node if n.op_type == "Concat"}


@pytest.mark.parametrize("with_past", [True, False])
def test_attention_mask_broadcast_over_the_keys_is_expanded(with_past):
    """A mask of one column (transformers' bidirectional mask under torch.export, a cross-attention
    without encoder mask: ``[1, 1, q, 1]``) broadcasts in the sum; onnxruntime's Attention wants as
    many columns as keys (past and new): the fusion expands it."""
    model = _attention_model(with_past, "bool", mask_keys=1)
    feeds = []
    for b, s, p in ((2, 3, 5), (1, 1, 7)):
        f = _attention_feeds(with_past, "bool", b, s, p)
        f["mask"] = np.ones((b, 1, s, 1), dtype=bool)
        f["mask"][0, :, 0] = False  # a row hiding every key: zeros
        feeds.append(f)
    fused = check_rule(model, fuse_attention, feeds, 1)
    ops = op_types(fused)
    assert ops["Attention"] == 1 and "Softmax" not in ops and ops["Expand"] == 1, ops


def test_attention_mask_of_an_unproven_length_stays_unfused():
    """A mask whose last dimension is not known to be the number of keys (another name): left as it is."""
    from optimize_helpers import apply_rule

    for with_past in (True, False):
        fused, count = apply_rule(_attention_model(with_past, "bool", mask_keys="m"), fuse_attention)
        assert count == 0 and "Attention" not in op_types(fused)


def test_attention_needs_opset23():
    model = _attention_model(True, "bool")
    model.opset_import[0].version = 18
    from optimize_helpers import apply_rule

    _, count = apply_rule(model, fuse_attention)
    assert count == 0


def _gelu_nodes(approximate: str):
    if approximate == "none":
        return [oh.make_node("Div", ["x", "sqrt2"], ["d"]), oh.make_node("Erf", ["d"], ["e"]),
                oh.make_node("Add", ["one", "e"], ["a"]), oh.make_node("Mul", ["half", "x"], ["h"]),
                oh.make_node("Mul", ["h", "a"], ["y"])]
    return [oh.make_node("Mul", ["x", "x"], ["x2"]), oh.make_node("Mul", ["x", "x2"], ["x3"]),
            oh.make_node("Mul", ["c", "x3"], ["cx3"]), oh.make_node("Add", ["x", "cx3"], ["inner"]),
            oh.make_node("Mul", ["k", "inner"], ["scaled"]), oh.make_node("Tanh", ["scaled"], ["t"]),
            oh.make_node("Add", ["one", "t"], ["a"]), oh.make_node("Mul", ["half", "x"], ["h"]),
            oh.make_node("Mul", ["h", "a"], ["y"])]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("standard,opset", [(False, 18), (True, 20)])
def test_gelu(approximate, standard, opset):
    inits = [("sqrt2", np.array(math.sqrt(2), np.float32)), ("one", np.array(1.0, np.float32)),
             ("half", np.array(0.5, np.float32)), ("c", np.array(0.044715, np.float32)),
             ("k", np.array(math.sqrt(2 / math.pi), np.float32))]
    model = make_model(_gelu_nodes(approximate), [("x", FLOAT, ["b", 16])], [("y", FLOAT, ["b", 16])], inits, opset=opset)
    fused = check_rule(model, lambda m: fuse_gelu(m, standard=standard), [{"x": randn(3, 16)}, {"x": randn(7, 16)}], 1)
    expected = "Gelu" if standard or approximate == "none" else "FastGelu"
    assert op_types(fused) == {expected: 1}


def test_matmul_packing():
    nodes = [oh.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"]) for i in range(3)]
    nodes.append(oh.make_node("MatMul", ["z", "w3"], ["y3"]))  # alone: not packed
    inits = [(f"w{i}", randn(16, n)) for i, n in enumerate((8, 4, 4, 5))]
    model = make_model(nodes, [("x", FLOAT, ["b", "s", 16]), ("z", FLOAT, ["b", 16])],
                       [(f"y{i}", FLOAT, None) for i in range(4)], inits)
    fused = check_rule(model, pack_matmuls, [{"x": randn(2, 3, 16), "z": randn(2, 16)}], 2)
    assert op_types(fused) == {"MatMul": 2, "Split": 1}


def test_matmul_packing_packs_the_biases_then_quantization_folds_them():
    """q, k, v with a bias each (Qwen2): one MatMul, one Add, one Split; quantized, the Add becomes the bias of
    ``MatMulNBits``. A group where one output is read beside its bias keeps its Adds apart."""
    from fx2onnx.optimizer.rules.quantize import quantize_matmuls

    nodes = [oh.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"]) for i in range(3)]
    nodes += [oh.make_node("Add", [f"m{i}", f"b{i}"], [f"y{i}"]) for i in range(3)]
    columns = (32, 16, 16)
    inits = [(f"w{i}", randn(32, c)) for i, c in enumerate(columns)] + [(f"b{i}", randn(c)) for i, c in enumerate(columns)]
    model = make_model(nodes, [("x", FLOAT, ["b", "s", 32])], [(f"y{i}", FLOAT, None) for i in range(3)], inits)
    feeds = [{"x": randn(2, 3, 32)}]
    fused = check_rule(model, pack_matmuls, feeds, 2)
    assert op_types(fused) == {"MatMul": 1, "Add": 1, "Split": 1}
    quantized, count = apply_rule(fused, lambda m: quantize_matmuls(m, block_size=16))
    assert count == 1 and op_types(quantized) == {"MatMulNBits": 1, "Split": 1}, op_types(quantized)
    # m0 also an output: the biases stay apart (the packed output without them is read)
    read = make_model(nodes, [("x", FLOAT, ["b", "s", 32])], [(f"y{i}", FLOAT, None) for i in range(3)] +
                      [("m0", FLOAT, None)], inits)
    fused = check_rule(read, pack_matmuls, feeds, 2)
    assert op_types(fused) == {"MatMul": 1, "Add": 3, "Split": 1}


def test_pack_projections_keeps_wide_groups_apart():
    """q, k, v (packed width 2x the input's) are packed, gate and up (6x) stay apart; a narrow input too."""
    from fx2onnx.optimizer.rules.matmul_packing import pack_projections

    width, narrow = 1024, 64
    nodes = [oh.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"]) for i in range(3)]  # q, k, v
    nodes += [oh.make_node("MatMul", ["h", f"w{i}"], [f"y{i}"]) for i in (3, 4)]  # gate, up
    nodes += [oh.make_node("MatMul", ["n", f"w{i}"], [f"y{i}"]) for i in (5, 6)]  # narrow input
    columns = (1024, 512, 512, 3072, 3072, 32, 32)
    inits = [(f"w{i}", randn(narrow if i >= 5 else width, c) * 0.03) for i, c in enumerate(columns)]
    model = make_model(nodes, [("x", FLOAT, ["b", width]), ("h", FLOAT, ["b", width]), ("n", FLOAT, ["b", narrow])],
                       [(f"y{i}", FLOAT, None) for i in range(7)], inits)
    fused = check_rule(model, pack_projections, [{"x": randn(2, width), "h": randn(2, width), "n": randn(2, narrow)}], 2)
    assert op_types(fused) == {"MatMul": 5, "Split": 1}


def test_matmul_packing_keeps_lazy_weights_lazy():
    """Weights read on demand are concatenated when the packed weight is read, not before."""
    reads = []

    def lazy(array, name):
        def read():
            reads.append(name)
            return ir.Tensor(array)
        return ir.LazyTensor(read, dtype=ir.DataType.FLOAT, shape=ir.Shape(array.shape), name=name)

    arrays = [randn(16, n) for n in (8, 4)]
    x = ir.Value(name="x", shape=ir.Shape([2, 16]), type=ir.TensorType(ir.DataType.FLOAT))
    weights = [ir.Value(name=f"w{i}", shape=ir.Shape(a.shape), type=ir.TensorType(ir.DataType.FLOAT),
                        const_value=lazy(a, f"w{i}")) for i, a in enumerate(arrays)]
    nodes = [ir.node("MatMul", [x, w]) for w in weights]
    graph = ir.Graph([x], [n.outputs[0] for n in nodes], nodes=nodes, initializers=weights, opset_imports={"": 20})
    model = ir.Model(graph, ir_version=10)
    assert pack_matmuls(model) == 1 and reads == []
    packed = next(n for n in model.graph if n.op_type == "MatMul").inputs[1]
    assert isinstance(packed.const_value, ir.LazyTensor)
    np.testing.assert_array_equal(packed.const_value.numpy(), np.concatenate(arrays, axis=1))
    assert reads == ["w0", "w1"]


def test_cleanup():
    nodes = [
        oh.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 1, 3]),
        oh.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1, 3]),  # cancels
        oh.make_node("Transpose", ["t2"], ["t3"], perm=[1, 0, 2, 3]),
        oh.make_node("Transpose", ["t3"], ["t4"], perm=[0, 1, 3, 2]),  # composes
        oh.make_node("Reshape", ["t4", "s1"], ["r1"]),
        oh.make_node("Reshape", ["r1", "s2"], ["r2"]),  # folds
        oh.make_node("Cast", ["r2"], ["c"], to=TensorProto.FLOAT),  # identity
        oh.make_node("Neg", ["c"], ["y"]),
    ]
    inits = [("s1", np.array([6, 20], np.int64)), ("s2", np.array([-1, 4], np.int64))]
    model = make_model(nodes, [("x", FLOAT, [2, 3, 4, 5])], [("y", FLOAT, None)], inits)

    def rule(m):
        return fold_transposes(m) + fold_transposes(m) + fold_reshapes(m) + remove_identities(m)

    fused = check_rule(model, rule, [{"x": randn(2, 3, 4, 5)}], None)
    assert op_types(fused) == {"Transpose": 1, "Reshape": 1, "Neg": 1}


def test_broadcast_expands():
    """The backward of a mean: ``Expand(s)`` scaled twice then multiplied by a full tensor; the scaling
    moves before the Expand, which the last Mul no longer needs. An Expand before a non-broadcasting
    operator stays."""
    nodes = [
        oh.make_node("Shape", ["x"], ["shape"]),
        oh.make_node("Expand", ["s", "shape"], ["e"]),
        oh.make_node("Div", ["e", "n"], ["d"]),
        oh.make_node("Mul", ["d", "two"], ["m"]),
        oh.make_node("Mul", ["m", "x"], ["y"]),
        oh.make_node("Expand", ["s", "shape"], ["kept"]),
        oh.make_node("Neg", ["kept"], ["z"]),
    ]
    full = ["b", "t", 8]
    model = make_model(
        nodes, [("s", FLOAT, ["b", "t", 1]), ("x", FLOAT, full)], [("y", FLOAT, full), ("z", FLOAT, full)],
        [("n", np.array(8.0, np.float32)), ("two", np.array(2.0, np.float32))],
        value_info=[("e", FLOAT, full), ("d", FLOAT, full), ("m", FLOAT, full), ("kept", FLOAT, full)],
    )
    feeds = [{"s": randn(2, 3, 1), "x": randn(2, 3, 8)}, {"s": randn(1, 5, 1), "x": randn(1, 5, 8)}]
    fused = check_rule(model, broadcast_expands, feeds, 3)  # two moves, one removal
    assert op_types(fused) == {"Shape": 1, "Expand": 1, "Div": 1, "Mul": 2, "Neg": 1}
    small = {o for n in fused.graph.node if n.op_type in ("Div", "Mul") for o in n.input}
    assert "e" not in small and "s" in small
