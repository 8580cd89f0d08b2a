"""The encoders' rules: a bidirectional attention whose key was transposed once becomes one ``Attention``, a
post-norm residual ``Add`` a ``Sum`` which onnxruntime does not fuse into ``SkipLayerNormalization``."""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto
from onnx import helper as oh
from optimize_helpers import FLOAT, apply_rule, check_rule, make_model, op_types, run

import fx2onnx
from fx2onnx.optimizer.rules.attention import drop_full_masks
from fx2onnx.optimizer.rules.encoder import residual_sums, split_key_transposes

RNG = np.random.default_rng(0)
HEADS, SIZE = 2, 8


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _encoder_attention(mask_keys: str = "s", mask_rows: str | int = "s", query: tuple = ("b", "s")):
    """sdpa of a BERT layer as fx2onnx writes it once cleaned up: the key's two transposes folded in one;
    ``mask_rows``: the mask's dimension of the queries (1: a padding mask, BERT's or LayoutLM's
    ``[batch, 1, 1, keys]``); ``query``: the query's batch and length (``(1, "n")``: learned queries
    broadcast over the keys' batch, Granite Speech's projector)."""
    nodes = [oh.make_node("Reshape", [f"{x}3", "heads_shape"], [f"{x}4"]) for x in "qkv"]
    nodes += [oh.make_node("Transpose", ["q4"], ["q"], perm=[0, 2, 1, 3]),
              oh.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
              oh.make_node("Transpose", ["v4"], ["v"], perm=[0, 2, 1, 3]),
              oh.make_node("MatMul", ["q", "kt"], ["qk"]), oh.make_node("Mul", ["qk", "scale"], ["scores0"]),
              oh.make_node("Where", ["mask", "zero", "neginf"], ["bias"]),
              oh.make_node("Add", ["scores0", "bias"], ["scores"]),
              oh.make_node("Softmax", ["scores"], ["p0"], axis=-1),
              oh.make_node("IsNaN", ["p0"], ["nan"]), oh.make_node("Where", ["nan", "zero", "p0"], ["p"]),
              oh.make_node("MatMul", ["p", "v"], ["y4"]),
              oh.make_node("Transpose", ["y4"], ["yt"], perm=[0, 2, 1, 3]),
              oh.make_node("Reshape", ["yt", "merged_shape"], ["y"])]
    width = HEADS * SIZE
    inputs = [("q3", FLOAT, [*query, width])] + [(f"{x}3", FLOAT, ["b", "s", width]) for x in "kv"]
    inputs.append(("mask", TensorProto.BOOL, ["b", 1, mask_rows, mask_keys]))
    inits = [("heads_shape", np.array([0, 0, HEADS, SIZE], np.int64)),
             ("merged_shape", np.array([0, 0, width], np.int64)),
             ("scale", np.array(1 / math.sqrt(SIZE), np.float32)), ("zero", np.array(0.0, np.float32)),
             ("neginf", np.array(-np.inf, np.float32))]
    return make_model(nodes, inputs, [("y", FLOAT, ["b", query[1], width])], inits, opset=23)


def _attention_feeds(b: int, s: int, rows: int | None = None, queries: tuple | None = None) -> dict:
    feeds = {f"{x}3": randn(b, s, HEADS * SIZE) for x in "qkv"}
    if queries is not None:
        feeds["q3"] = randn(*queries, HEADS * SIZE)
    lengths = [s - i for i in range(b)]
    lengths[-1] = 0  # a sequence of padding only: every row hides every key, zeros (torch's answer)
    keys = np.arange(s)[None, :] < np.array(lengths)[:, None]
    feeds["mask"] = np.broadcast_to(keys[:, None, None, :], (b, 1, s if rows is None else rows, s)).copy()
    return feeds


def test_encoder_attention_becomes_one_attention():
    model = _encoder_attention()
    feeds = [_attention_feeds(3, 5), _attention_feeds(2, 7)]
    split = check_rule(model, split_key_transposes, feeds, 1)
    assert [list(n.attribute[0].ints) for n in split.graph.node if n.op_type == "Transpose"].count([0, 1, 3, 2]) == 1
    fused = fx2onnx.optimize(model, level="onnxruntime")
    ops = op_types(fused)
    assert ops["Attention"] == 1 and not {"Softmax", "Transpose", "IsNaN"} & set(ops), ops
    for f in feeds:
        expected, got = run(model, f)[0], run(fused, f)[0]
        np.testing.assert_allclose(got, expected, atol=1e-5)
        assert np.abs(got[-1]).max() == 0


def test_encoder_padding_mask_is_expanded_over_the_queries():
    """A padding mask ``[batch, 1, 1, keys]`` broadcasts over the queries in the sum; onnxruntime's Attention
    checks its dimension of the queries (LayoutLM's encoder failed there): the fusion expands it, from the
    query's length read before its transposes (none left)."""
    model = _encoder_attention(mask_rows=1)
    fused = fx2onnx.optimize(model, level="onnxruntime")
    ops = op_types(fused)
    assert ops["Attention"] == 1 and ops["Expand"] == 1 and not {"Softmax", "Transpose"} & set(ops), ops
    for b, s in ((3, 5), (2, 7), (1, 1)):
        f = _attention_feeds(b, s, rows=1)
        expected, got = run(model, f)[0], run(fused, f)[0]
        np.testing.assert_allclose(got, expected, atol=1e-5)
        assert np.abs(got[-1]).max() == 0


def test_attention_of_queries_broadcast_over_the_batch_stays_unfused():
    """Queries of batch 1 against keys of any batch (Granite Speech's projector: learned queries, every block
    of the audio): the product broadcasts, onnxruntime's Attention does not (it failed there): no fusion."""
    model = _encoder_attention(mask_rows="n", query=(1, "n"))
    fused = fx2onnx.optimize(model, level="onnxruntime")
    assert "Attention" not in op_types(fused)
    f = _attention_feeds(3, 5, rows=4, queries=(1, 4))
    np.testing.assert_allclose(run(fused, f)[0], run(model, f)[0], atol=1e-5)


def test_encoder_attention_left_unfused_keeps_one_transpose():
    """A mask of another length than the keys: no fusion, the two transposes folded back into one."""
    fused = fx2onnx.optimize(_encoder_attention(mask_keys="m"), level="onnxruntime")
    perms = [list(n.attribute[0].ints) for n in fused.graph.node if n.op_type == "Transpose"]
    assert "Attention" not in op_types(fused) and [0, 2, 3, 1] in perms and [0, 1, 3, 2] not in perms, perms


def _post_norm(second_user: bool = False):
    """A BERT layer's end: the projection's bias, the residual sum, LayerNormalization."""
    nodes = [oh.make_node("MatMul", ["x", "w"], ["xw"]), oh.make_node("Add", ["xw", "bias"], ["xb"]),
             oh.make_node("Add", ["xb", "skip"], ["r"]),
             oh.make_node("LayerNormalization", ["r", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-12)]
    outputs = [("y", FLOAT, ["b", "s", 16])]
    if second_user:  # the sum used again: onnxruntime does not fuse it, the rule leaves it
        nodes.append(oh.make_node("Relu", ["r"], ["z"]))
        outputs.append(("z", FLOAT, ["b", "s", 16]))
    inits = [("w", randn(16, 16)), ("bias", randn(16)), ("gamma", randn(16)), ("beta", randn(16))]
    return make_model(nodes, [("x", FLOAT, ["b", "s", 16]), ("skip", FLOAT, ["b", "s", 16])], outputs, inits,
                      value_info=[(n, FLOAT, ["b", "s", 16]) for n in ("xw", "xb", "r")])


def _loaded_op_types(model: onnx.ModelProto) -> set[str]:
    """The op types onnxruntime runs once it optimized the model at its default level (every client's)."""
    with tempfile.TemporaryDirectory() as tmp:
        options = onnxruntime.SessionOptions()
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return {n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node}


def test_residual_sum_is_not_fused_by_onnxruntime():
    model = _post_norm()
    assert "SkipLayerNormalization" in _loaded_op_types(model)  # what the rule avoids
    feeds = [{"x": randn(2, 3, 16), "skip": randn(2, 3, 16)}, {"x": randn(1, 5, 16), "skip": randn(1, 5, 16)}]
    summed = check_rule(model, residual_sums, feeds, 1, atol=0)
    assert op_types(summed)["Sum"] == 1 and "SkipLayerNormalization" not in _loaded_op_types(summed)
    unfused = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"],
                                           disabled_optimizers=["SkipLayerNormFusion"])
    for f in feeds:  # the same additions as the graph before (run unfused): bit for bit
        assert np.array_equal(run(summed, f)[0], unfused.run(None, f)[0])
    _, count = apply_rule(_post_norm(second_user=True), residual_sums)
    assert count == 0


def _attention_of_constant_mask(mask: np.ndarray) -> onnx.ModelProto:
    """``Attention`` (3D layout) whose mask is a constant ``[1, 1, 1, 1]`` expanded to ``[batch, 1, queries, keys]``
    (ViT's: transformers' mask there is True everywhere, expanded to the batch)."""
    width = HEADS * SIZE
    nodes = [oh.make_node("Shape", ["q3"], ["mask_b"], start=0, end=1),
             oh.make_node("Shape", ["q3"], ["mask_q"], start=1, end=2),
             oh.make_node("Shape", ["k3"], ["mask_k"], start=1, end=2),
             oh.make_node("Concat", ["mask_b", "mask_one", "mask_q", "mask_k"], ["mask_shape"], axis=0),
             oh.make_node("Expand", ["mask_value", "mask_shape"], ["mask"]),
             oh.make_node("Attention", ["q3", "k3", "v3", "mask"], ["y"], q_num_heads=HEADS, kv_num_heads=HEADS,
                          scale=1 / math.sqrt(SIZE))]
    inputs = [(f"{x}3", FLOAT, ["b", "s", width]) for x in "qkv"]
    inits = [("mask_value", mask), ("mask_one", np.array([1], np.int64))]
    return make_model(nodes, inputs, [("y", FLOAT, ["b", "s", width])], inits, opset=23)


def test_attention_mask_hiding_nothing_is_removed():
    feeds = [{f"{x}3": randn(b, s, HEADS * SIZE) for x in "qkv"} for b, s in ((3, 5), (1, 1))]
    for mask in (np.ones((1, 1, 1, 1), np.bool_), np.zeros((1, 1, 1, 1), np.float32)):
        model = _attention_of_constant_mask(mask)
        dropped = check_rule(model, drop_full_masks, feeds, 1, atol=0)
        assert op_types(dropped) == {"Attention": 1} and len(dropped.graph.node[0].input) == 3


def test_attention_mask_hiding_a_score_stays():
    for mask in (np.array([True, False], np.bool_).reshape(1, 1, 1, 2), np.full((1, 1, 1, 1), -1.5, np.float32)):
        _, count = apply_rule(_attention_of_constant_mask(mask), drop_full_masks)
        assert count == 0
