"""The kv cache updated in place (``optimize(enable=["cache_in_place"])``): every attention with
a past into ``GroupQueryAttention``, checked against eager on the inputs its kernel runs (a
prompt with an empty cache, a sequence with its past, one new token for a batch), and the
generation loop binding each past and present to one buffer gives transformers' tokens."""

from __future__ import annotations

import collections
import copy

import onnx
import pytest
import torch

import fx2onnx
from fx2onnx.deploy.check import in_place_input_sets
from fx2onnx.models import get_tiny_model
from fx2onnx.optimizer.rules.cache_in_place import IN_PLACE_METADATA_KEY, cache_in_place
from fx2onnx.runtime.generate import OnnxGenerator

from optimize_helpers import apply_rule, make_model, oh, TensorProto


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
