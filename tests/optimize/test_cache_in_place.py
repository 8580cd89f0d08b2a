"""The kv cache updated in place (``optimize(enable=["cache_in_place"])``): every attention with
a past into ``GroupQueryAttention``, checked against eager on the inputs its kernel runs (a
prompt with an empty cache, a sequence with its past, one new token for a batch), and the
generation loop binding each past and present to one buffer gives transformers' tokens."""

from __future__ import annotations

import collections
import copy

import pytest
import torch

import fx2onnx
from fx2onnx.deploy.check import in_place_input_sets
from fx2onnx.zoo import get_tiny_model
from fx2onnx.optimizer.rules.cache_in_place import IN_PLACE_METADATA_KEY, cache_in_place
from fx2onnx.runtime.generate import OnnxGenerator

import numpy as np
import onnx.numpy_helper as onh

from optimize_helpers import apply_rule, make_model, op_types, oh, TensorProto


def _in_place(tiny):
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(tiny.model, (), copy.deepcopy(tiny.inputs), dynamic_shapes=tiny.dynamic_shapes,
                              target_opset=23, optimize=False)
    return fx2onnx.optimize(onx, level="onnxruntime", enable=["cache_in_place"])


@pytest.mark.parametrize("arch", ["llama"] + [pytest.param(a, marks=pytest.mark.slow) for a in ("gpt2", "phi")])
def test_cache_in_place_matches_eager_and_generates(arch):
    """llama (grouped heads, rotary), gpt2 (as many kv heads as heads, learned positions), phi
    (partial rotary)."""
    tiny = get_tiny_model(arch, with_cache=True, attn_implementation="sdpa")
    onx = _in_place(tiny)
    ops = collections.Counter(n.op_type for n in onx.graph.node)
    layers = tiny.model.config.num_hidden_layers
    assert ops["GroupQueryAttention"] == layers and ops["Attention"] == 0, ops
    if arch == "llama":  # transformers' causal mask: the padding bias alone, its indices and comparisons gone
        assert not {"GatherND", "LessOrEqual", "And"} & set(ops), ops
    assert {p.key: p.value for p in onx.metadata_props}[IN_PLACE_METADATA_KEY] == "1"
    sets, names = in_place_input_sets([tiny.inputs, tiny.inputs2], ["first", "second"])
    assert len(sets) > 2  # a batch with a past and several new tokens was split for the kernel
    for inputs, name in zip(sets, names):
        report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(inputs), atol=1e-4)
        assert report.ok, f"{name}: {report}"
    # the loop: one buffer per past and present, a left padded batch of two prompts
    generator = OnnxGenerator(onx)
    assert generator.in_place
    vocab = tiny.model.config.vocab_size
    ids = torch.tensor([[0, 0, 5, 60, 7], [9, 12, 20, 31, 8]]) % vocab
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    expected = tiny.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                   pad_token_id=0)
    assert generator.generate(ids, 8, attention_mask=mask).tolist() == expected.tolist()
    # buffers of 2 new positions at first, grown (copied) three times on the way: the same tokens
    generator.cache_chunk = 2
    assert generator.generate(ids, 8, attention_mask=mask).tolist() == expected.tolist()


def test_cache_in_place_leaves_a_model_without_token_inputs_unchanged():
    """No ``attention_mask`` input to read the length from: the rule does not apply."""
    heads, dim = 2, 4
    model = make_model(
        [oh.make_node("Attention", ["q", "k", "v", "mask", "past_key", "past_value"], ["y", "present_key", "present_value"],
                      q_num_heads=heads, kv_num_heads=heads)],
        [("q", TensorProto.FLOAT, [1, "s", heads * dim]), ("k", TensorProto.FLOAT, [1, "s", heads * dim]),
         ("v", TensorProto.FLOAT, [1, "s", heads * dim]), ("mask", TensorProto.BOOL, [1, 1, "s", "t"]),
         ("past_key", TensorProto.FLOAT, [1, heads, "p", dim]), ("past_value", TensorProto.FLOAT, [1, heads, "p", dim])],
        [(n, TensorProto.FLOAT, None) for n in ("y", "present_key", "present_value")],
        opset=23,
    )
    rewritten, count = apply_rule(model, cache_in_place)
    assert count == 0
    assert [n.op_type for n in rewritten.graph.node] == ["Attention"]
    assert IN_PLACE_METADATA_KEY not in {p.key for p in rewritten.metadata_props}


@pytest.mark.slow
def test_a_sliding_window_cache_stays_concatenated():
    """gemma3's sliding layers crop their cache (and count the tokens seen): not a buffer the
    kernel can fill in place; the model is left as it is and still matches eager."""
    tiny = get_tiny_model("gemma3", with_cache=True, attn_implementation="sdpa")
    onx = _in_place(tiny)
    ops = collections.Counter(n.op_type for n in onx.graph.node)
    assert ops["GroupQueryAttention"] == 0 and ops["Attention"] >= 1, ops
    assert IN_PLACE_METADATA_KEY not in {p.key for p in onx.metadata_props}
    report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
    assert report.ok, report


def _decoder_with_features(mask: str, dim: int = 4):
    """An attention whose query adds image features (an input fed unchanged at every step) and
    whose mask is causal (``attention_mask`` and a lower triangle), also true on the image tokens
    (``ids``: read from the token ids) or the padding mask alone (``prefix``: the prompt attends both ways)."""
    heads = 2
    nodes = [
        oh.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
        oh.make_node("Unsqueeze", ["ids_f", "axis2"], ["ids_3d"]),
        oh.make_node("Add", ["ids_3d", "image_features"], ["q"]),
        oh.make_node("Cast", ["attention_mask"], ["keep"], to=TensorProto.BOOL),
        oh.make_node("Unsqueeze", ["keep", "axes12"], ["padding"]),
        oh.make_node("Shape", ["input_ids"], ["new"], start=1, end=2),
        oh.make_node("Shape", ["attention_mask"], ["total"], start=1, end=2),
        oh.make_node("Concat", ["new", "total"], ["square"], axis=0),
        oh.make_node("ConstantOfShape", ["square"], ["ones"], value=onh.from_array(np.array([1], dtype=np.int64))),
        oh.make_node("Sub", ["total", "new"], ["past"]),
        oh.make_node("Squeeze", ["past"], ["diagonal"]),
        oh.make_node("Trilu", ["ones", "diagonal"], ["lower"], upper=0),
        oh.make_node("Cast", ["lower"], ["causal"], to=TensorProto.BOOL),
        oh.make_node("And", ["padding", "causal"], ["causal_mask"]),
    ]
    if mask == "window":  # a sliding window of 3 keys: the query sees itself and the 2 keys before it
        nodes += [oh.make_node("Sub", ["past", "two"], ["window_start"]),
                  oh.make_node("Squeeze", ["window_start"], ["window_diagonal"]),
                  oh.make_node("Trilu", ["ones", "window_diagonal"], ["recent"], upper=1),
                  oh.make_node("Cast", ["recent"], ["recent_bool"], to=TensorProto.BOOL),
                  oh.make_node("And", ["causal_mask", "recent_bool"], ["mask"])]
    elif mask == "ids":
        nodes += [oh.make_node("Equal", ["input_ids", "image_token"], ["is_image"]),
                  oh.make_node("Unsqueeze", ["is_image", "axes12"], ["image4"]),
                  oh.make_node("Or", ["causal_mask", "image4"], ["mask"])]
    else:
        nodes.append(oh.make_node("Identity", ["causal_mask" if mask == "causal" else "padding"], ["mask"]))
    nodes.append(oh.make_node("Attention", ["q", "q", "q", "mask", "past_key", "past_value"],
                              ["y", "present_key", "present_value"], q_num_heads=heads, kv_num_heads=heads))
    return make_model(
        nodes,
        [("input_ids", TensorProto.INT64, [1, "s"]), ("attention_mask", TensorProto.INT64, [1, "t"]),
         ("image_features", TensorProto.FLOAT, [1, 1, heads * dim]),
         ("past_key", TensorProto.FLOAT, [1, heads, "p", dim]), ("past_value", TensorProto.FLOAT, [1, heads, "p", dim])],
        [(n, TensorProto.FLOAT, None) for n in ("y", "present_key", "present_value")],
        initializers=[("axis2", np.array([2])), ("axes12", np.array([1, 2])), ("image_token", np.array(7)),
                      ("two", np.array([2]))],
        opset=23,
    )


def test_cache_in_place_takes_named_constant_inputs_and_refuses_a_mask_that_is_not_causal():
    """An input fed unchanged at every step (an image-text decoder's features) is accepted when
    named; a mask reading the token values (image tokens attending both ways) or letting the
    prompt attend both ways (a prefix LM, found by running the mask) is not the causal mask of the
    kernel: the model is left unchanged."""
    named = lambda m: cache_in_place(m, constant_inputs=("image_features",))  # noqa: E731
    causal = _decoder_with_features("causal")
    assert apply_rule(causal, cache_in_place)[1] == 0  # an unnamed input: refused
    rewritten, count = apply_rule(causal, named)
    assert count == 1 and op_types(rewritten)["GroupQueryAttention"] == 1
    for mask in ("ids", "prefix"):
        rewritten, count = apply_rule(_decoder_with_features(mask), named)
        assert count == 0 and op_types(rewritten)["Attention"] == 1, mask


def test_cache_in_place_on_attention_of_4d_inputs_keeps_its_outputs():
    """An ``Attention`` on ``(batch, heads, seq, dim)`` inputs (Qwen-VL's, its rotary applied to the heads apart)
    is given to the kernel in 3-D and its output put back in 4-D: the same values on a prompt and on a step."""
    import onnxruntime

    heads, kv_heads, dim = 4, 2, 8
    causal = _decoder_with_features("causal")
    nodes = [n for n in causal.graph.node if n.output[0] not in ("ids_f", "ids_3d", "q") and n.op_type != "Attention"]
    nodes.append(oh.make_node("Attention", ["q4", "k4", "v4", "mask", "past_key", "past_value"],
                              ["y", "present_key", "present_value"]))
    kv = [1, kv_heads, "p", dim]
    model = make_model(
        nodes,
        [("input_ids", TensorProto.INT64, [1, "s"]), ("attention_mask", TensorProto.INT64, [1, "t"]),
         ("q4", TensorProto.FLOAT, [1, heads, "s", dim]), ("k4", TensorProto.FLOAT, [1, kv_heads, "s", dim]),
         ("v4", TensorProto.FLOAT, [1, kv_heads, "s", dim]),
         ("past_key", TensorProto.FLOAT, kv), ("past_value", TensorProto.FLOAT, kv)],
        [(n, TensorProto.FLOAT, None) for n in ("y", "present_key", "present_value")],
        initializers=[("axes12", np.array([1, 2]))], opset=23,
    )
    rewritten, count = apply_rule(model, lambda m: cache_in_place(m, constant_inputs=("q4", "k4", "v4")))
    assert count == 1 and op_types(rewritten)["GroupQueryAttention"] == 1
    rng = np.random.default_rng(0)
    for past, new in ((0, 5), (3, 1)):
        feeds = {"input_ids": np.zeros((1, new), dtype=np.int64),
                 "attention_mask": np.ones((1, past + new), dtype=np.int64),
                 "past_key": rng.standard_normal((1, kv_heads, past, dim), dtype=np.float32),
                 "past_value": rng.standard_normal((1, kv_heads, past, dim), dtype=np.float32)}
        for name, n in (("q4", heads), ("k4", kv_heads), ("v4", kv_heads)):
            feeds[name] = rng.standard_normal((1, n, new, dim), dtype=np.float32)
        expected = onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)
        got = onnxruntime.InferenceSession(rewritten.SerializeToString()).run(None, feeds)
        assert got[0].shape == (1, heads, new, dim)
        for e, g in zip(expected, got):
            np.testing.assert_allclose(g, e, atol=1e-5)


def test_a_causal_mask_becomes_the_padding_bias_and_a_window_stays():
    """A causal LM's mask (the padding mask and a lower triangle) is given to the kernel as the padding bias alone,
    a few nodes (the kernel masks the later keys itself); a mask hiding keys below the diagonal too (a sliding
    window) stays the bias: the same outputs as the model on a prompt and on a step after a past."""
    import onnxruntime

    named = lambda m: cache_in_place(m, constant_inputs=("image_features",))  # noqa: E731
    rng = np.random.default_rng(0)
    for mask, kept in (("causal", False), ("window", True)):
        model = _decoder_with_features(mask, dim=8)  # the kernel's head size: a multiple of 8
        rewritten, count = apply_rule(model, named)
        assert count == 1 and ("Trilu" in op_types(rewritten)) == kept, (mask, op_types(rewritten))
        for past, new in ((0, 5), (6, 1)):
            feeds = {"input_ids": rng.integers(0, 9, (1, new)), "attention_mask": np.ones((1, past + new), np.int64),
                     "image_features": rng.standard_normal((1, 1, 16), dtype=np.float32),
                     "past_key": rng.standard_normal((1, 2, past, 8), dtype=np.float32),
                     "past_value": rng.standard_normal((1, 2, past, 8), dtype=np.float32)}
            expected = onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)
            got = onnxruntime.InferenceSession(rewritten.SerializeToString()).run(None, feeds)
            for e, g in zip(expected, got):
                np.testing.assert_allclose(g, e, atol=1e-5, err_msg=f"{mask}, past {past}")


def test_the_padding_probes_feed_the_mask_inputs_alone():
    """The probes of the masks (a past of 40000 tokens among them) feed the inputs the masks read, never the pasts
    of every layer: a batch of 2 pasts of 40000 tokens a layer held 10 GB for Qwen3-0.6B's 28 layers. The past
    length read from the shape of a past (transformers' cache length) is a constant of the probe."""
    import onnx_ir as ir

    from fx2onnx.optimizer.rules._mask_probe import _PADDED_PROBES, masks_are_padding, probe_inputs

    layers, heads, dim = 4, 2, 8
    nodes = [
        oh.make_node("Cast", ["attention_mask"], ["keep"], to=TensorProto.BOOL),
        oh.make_node("Unsqueeze", ["keep", "axes12"], ["padding"]),
        oh.make_node("Shape", ["input_ids"], ["new"], start=1, end=2),
        oh.make_node("Shape", ["past_key_0"], ["past"], start=2, end=3),
        oh.make_node("Add", ["past", "new"], ["total"]),
        oh.make_node("Concat", ["new", "total"], ["square"], axis=0),
        oh.make_node("ConstantOfShape", ["square"], ["ones"], value=onh.from_array(np.array([1], dtype=np.int64))),
        oh.make_node("Squeeze", ["past"], ["diagonal"]),
        oh.make_node("Trilu", ["ones", "diagonal"], ["lower"], upper=0),
        oh.make_node("Cast", ["lower"], ["causal"], to=TensorProto.BOOL),
        oh.make_node("And", ["padding", "causal"], ["mask"]),
        oh.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
        oh.make_node("Unsqueeze", ["ids_f", "axis2"], ["ids_3d"]),
        oh.make_node("Expand", ["ids_3d", "hidden"], ["q"]),
    ]
    for i in range(layers):
        nodes.append(oh.make_node("Attention", ["q", "q", "q", "mask", f"past_key_{i}", f"past_value_{i}"],
                                  [f"y_{i}", f"present_key_{i}", f"present_value_{i}"],
                                  q_num_heads=heads, kv_num_heads=heads))
    pasts = [(f"past_{kv}_{i}", TensorProto.FLOAT, ["b", heads, "p", dim])
             for i in range(layers) for kv in ("key", "value")]
    tokens = [("input_ids", TensorProto.INT64, ["b", "s"]), ("attention_mask", TensorProto.INT64, ["b", "t"])]
    model = ir.from_proto(make_model(
        nodes, tokens + pasts, [(f"y_{i}", TensorProto.FLOAT, None) for i in range(layers)],
        initializers=[("axis2", np.array([2])), ("axes12", np.array([1, 2])),
                      ("hidden", np.array([1, 1, heads * dim]))],
        opset=23))
    inputs = {v.name: v for v in model.graph.inputs}
    mask = next(n for n in model.graph if n.op_type == "Attention").inputs[3]
    past_keys = [inputs[f"past_key_{i}"] for i in range(layers)]
    past, new, pads = max(_PADDED_PROBES, key=lambda probe: probe[0])
    assert past >= 40000
    _, feeds = probe_inputs(model, [mask], inputs["attention_mask"], inputs["input_ids"], past_keys, past, new, pads)
    assert sorted(feeds) == ["attention_mask"]  # the token count and the past length are constants of the probe
    assert feeds["attention_mask"].shape == (len(pads), past + new)
    assert masks_are_padding(model, [mask], inputs["attention_mask"], inputs["input_ids"], past_keys)
