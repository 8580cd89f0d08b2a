"""fx2onnx.generate: greedy tokens equal to transformers' generate(do_sample=False)."""

from __future__ import annotations

import copy
import functools
import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import fx2onnx  # noqa: E402
from fx2onnx.zoo import get_tiny_model  # noqa: E402
from fx2onnx.runtime import OnnxGenerator  # noqa: E402
from fx2onnx.runtime.generate import CACHE_METADATA_KEY, NEXT_TOKEN, add_next_token  # noqa: E402

NEW_TOKENS = 20
PAD = 0
#: tiny decoders and their overrides: a sliding window of 8 shorter than prompt + new tokens
DECODERS = {
    "llama": {},
    "mistral": {"sliding_window": 8},  # only sliding layers: the cache carries tokens_seen
    "qwen2": {},
    "gemma2": {"sliding_window": 8},  # sliding and full layers alternate
    "gemma3": {"sliding_window": 8},
    "phi3": {},
    "gpt2": {},
}


def _dynamic_shapes(tiny):
    """The tiny model's dynamic shapes, the length of a sliding layer named apart from a full
    layer's (beyond the window they differ)."""
    shapes = copy.deepcopy(tiny.dynamic_shapes)
    layers = tiny.inputs["past_key_values"].layers
    kinds = {type(layer).__name__ for layer in layers}
    if len(kinds) > 1:
        for i, layer in enumerate(layers):
            if "Sliding" in type(layer).__name__:
                shapes["past_key_values"][2 * i] = {0: "batch", 2: "sliding_seq"}
                shapes["past_key_values"][2 * i + 1] = {0: "batch", 2: "sliding_seq"}
    return shapes


@functools.cache
def exported(name: str, optimize: bool | str = True):
    """(tiny model, ONNX model) of a two-layer tiny decoder exported with a cache."""
    tiny = get_tiny_model(name, with_cache=True, num_hidden_layers=2, **DECODERS.get(name, {}))
    tiny.model.generation_config.eos_token_id = None  # no stop unless a test asks for one
    with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
        onx = fx2onnx.to_onnx(
            tiny.model, (), kwargs=modificator(copy.deepcopy(tiny.inputs)), dynamic_shapes=_dynamic_shapes(tiny),
            optimize=optimize,
        )
    return tiny, onx


def prompts(batch: int):
    """``batch`` prompts of 6 tokens, the second one left padded to 3 tokens."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 128, (batch, 6), generator=generator)
    mask = torch.ones_like(ids)
    if batch > 1:
        mask[1, :3] = 0
        ids[1, :3] = PAD
    return ids, mask


def expected_tokens(model, ids, mask, eos_token_id=None):
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW_TOKENS,
                              pad_token_id=PAD, eos_token_id=eos_token_id)


#: the decoders of the fast tier (each is exported once per process, see exported); the others are in
#: the slow tier
FAST_DECODERS = {"llama"}


def _decoders(names):
    return [name if name in FAST_DECODERS else pytest.param(name, marks=pytest.mark.slow) for name in names]


@pytest.mark.parametrize("batch", [1, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", _decoders(sorted(DECODERS)))
def test_greedy_tokens_equal_transformers(name, batch):
    tiny, onx = exported(name)
    ids, mask = prompts(batch)
    expected = expected_tokens(tiny.model, ids, mask)
    got = fx2onnx.generate(onx, ids, NEW_TOKENS, attention_mask=mask)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
    assert got.shape == expected.shape == (batch, 6 + NEW_TOKENS)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", _decoders(["llama", "gpt2", "gemma2"]))
@pytest.mark.slow
def test_eos_stops_each_sequence(name):
    tiny, onx = exported(name)
    ids, mask = prompts(2)
    free = expected_tokens(tiny.model, ids, mask)
    # the eos token: a new token of the first sequence absent from its earlier new tokens
    new = free[0, 6:].tolist()
    k = next((i for i in range(3, NEW_TOKENS) if new[i] not in new[:i]), 0)
    eos = new[k]
    expected = expected_tokens(tiny.model, ids, mask, eos_token_id=eos)
    got = fx2onnx.generate(onx, ids, NEW_TOKENS, attention_mask=mask, eos_token_id=eos, pad_token_id=PAD)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    # the first sequence is padded after its eos
    assert got[0, 6 + k] == eos and (got[0, 7 + k:] == PAD).all()
    # one sequence: the loop stops at its eos
    alone = fx2onnx.generate(onx, ids[:1], NEW_TOKENS, eos_token_id=[eos, 1000], pad_token_id=PAD)
    assert alone.shape == (1, 7 + k)
    torch.testing.assert_close(alone, expected_tokens(tiny.model, ids[:1], mask[:1], eos_token_id=eos))


def test_next_token_in_the_graph_or_in_numpy():
    # the argmax added to the graph is numpy's argmax of the last logits
    _, onx = exported("llama")
    with_token = add_next_token(onx)
    assert [o.name for o in with_token.graph.output] == [o.name for o in onx.graph.output] + [NEXT_TOKEN]
    session = OnnxGenerator(onx, next_token=False).session
    feeds = {i.name: np.zeros([d if isinstance(d, int) else (0 if j else 2) for j, d in enumerate(i.shape)],
                              dtype=np.float32) for i in session.get_inputs() if "past" in i.name}  # empty cache
    feeds.update(input_ids=np.random.default_rng(0).integers(3, 128, (2, 3)), attention_mask=np.ones((2, 3), np.int64),
                 position_ids=np.arange(3)[None].repeat(2, 0))
    logits = session.run(["logits"], feeds)[0]
    token = OnnxGenerator(onx).session.run([NEXT_TOKEN], feeds)[0]
    np.testing.assert_array_equal(token, logits[:, -1].argmax(-1)[:, None])
    # the loop reading the logits (a session given, or next_token=False) generates the same tokens,
    # with padding and with an eos which finishes one sequence first
    tiny, _ = exported("llama")
    ids, mask = prompts(2)
    free = expected_tokens(tiny.model, ids, mask)[0, 6:].tolist()
    eos = free[next(i for i in range(3, NEW_TOKENS) if free[i] not in free[:i])]
    fused = OnnxGenerator(onx)
    assert fused.signature.next_token == NEXT_TOKEN
    for generator in [OnnxGenerator(onx, next_token=False), OnnxGenerator(session)]:
        assert generator.signature.next_token is None
        for kwargs in [{}, {"eos_token_id": eos, "pad_token_id": PAD}]:
            np.testing.assert_array_equal(generator.generate(ids, NEW_TOKENS, mask, **kwargs),
                                          fused.generate(ids, NEW_TOKENS, mask, **kwargs))


def test_metadata_pairs_cache_inputs_and_outputs():
    _, onx = exported("llama")
    meta = {p.key: p.value for p in onx.metadata_props}
    pairs = json.loads(meta[CACHE_METADATA_KEY])
    kinds = ("key", "value")
    assert pairs == {f"past_key_values_{kind}_{i}": f"present_{kind}_{i}" for i in range(2) for kind in kinds}
    generator = OnnxGenerator(onx)
    assert generator.signature.logits == "logits"
    assert generator.signature.has_position_ids and generator.signature.has_attention_mask
    assert [c[2] for c in generator.signature.cache] == [(-1, 2, 0, 8)] * 4
    # mistral: sliding layers only, the count of tokens seen is fed back too
    _, onx = exported("mistral")
    cache = OnnxGenerator(onx).signature.cache
    assert cache[-1][:3] == ("past_key_values_tokens_seen", "present_tokens_seen", (0, 0))


def test_numpy_path_and_session(tmp_path):
    tiny, onx = exported("llama")
    ids, mask = prompts(2)
    expected = expected_tokens(tiny.model, ids, mask).numpy()
    path = tmp_path / "llama.onnx"
    path.write_bytes(onx.SerializeToString())
    got = fx2onnx.generate(str(path), ids.numpy(), NEW_TOKENS, attention_mask=mask.numpy())
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, expected)
    generator = OnnxGenerator(OnnxGenerator(onx).session)
    np.testing.assert_array_equal(generator.generate(ids.numpy(), NEW_TOKENS, mask.numpy()), expected)
    times = generator.last_times
    assert times.decode_steps == NEW_TOKENS - 1
    assert 0 < times.decode_model < times.decode_total and 0 < times.overhead_share < 1
    assert len(times.step_overheads) == NEW_TOKENS - 1 and 0 < times.median_overhead < times.decode_total


@pytest.mark.slow
def test_optimized_model_generates_the_same():
    tiny, _ = exported("llama")
    _, onx = exported("llama", "onnxruntime")
    assert CACHE_METADATA_KEY in {p.key for p in onx.metadata_props}
    ids, mask = prompts(2)
    got = fx2onnx.generate(onx, ids, NEW_TOKENS, attention_mask=mask)
    torch.testing.assert_close(got, expected_tokens(tiny.model, ids, mask), rtol=0, atol=0)


def test_errors():
    tiny, onx = exported("llama")
    ids, mask = prompts(2)
    with pytest.raises(ValueError, match="left padded"):
        fx2onnx.generate(onx, ids, 3, attention_mask=mask.flip(1))
    with pytest.raises(ValueError, match="max_new_tokens"):
        fx2onnx.generate(onx, ids, 0)
    with pytest.raises(ValueError, match="attention_mask has shape"):
        fx2onnx.generate(onx, ids, 3, attention_mask=mask[:, 1:])
    with pytest.raises(TypeError, match="ModelProto"):
        fx2onnx.generate(tiny.model, ids, 3)
    # a model exported without a cache runs the whole sequence at every step: transformers' tokens, no speculation
    plain = get_tiny_model("llama")
    onx_plain = fx2onnx.to_onnx(plain.model, (), kwargs=plain.inputs, dynamic_shapes=plain.dynamic_shapes)
    torch.testing.assert_close(fx2onnx.generate(onx_plain, ids, NEW_TOKENS, attention_mask=mask),
                               expected_tokens(plain.model, ids, mask), rtol=0, atol=0)
    # without position_ids, the positions of a padded sequence would count the pads
    inputs = {k: v for k, v in tiny.inputs.items() if k != "position_ids"}
    shapes = {k: v for k, v in tiny.dynamic_shapes.items() if k != "position_ids"}
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx_no_positions = fx2onnx.to_onnx(tiny.model, (), kwargs=copy.deepcopy(inputs), dynamic_shapes=shapes)
    with pytest.raises(ValueError, match="position_ids"):
        fx2onnx.generate(onx_no_positions, ids, 3, attention_mask=mask)
    # without padding it generates what transformers does
    torch.testing.assert_close(fx2onnx.generate(onx_no_positions, ids[:1], NEW_TOKENS),
                               expected_tokens(tiny.model, ids[:1], mask[:1]), rtol=0, atol=0)


def test_initial_shapes():
    # a key/value cache starts empty, a state of transformers' linear caches at zero, another state is refused
    from collections import namedtuple

    from fx2onnx.runtime.generate import _initial_shape

    info = namedtuple("info", "name shape")
    assert _initial_shape(info("past_key_values_key_0", ["batch", 2, "past_seq", 8]), "batch") == (-1, 2, 0, 8)
    assert _initial_shape(info("past_key_values_conv_0", ["batch", 128, 4]), "batch") == (-1, 128, 4)
    assert _initial_shape(info("past_key_values_recurrent_1", ["batch", 4, 16, 16]), "batch") == (-1, 4, 16, 16)
    # MiniMax's sum of K^T V: transformers' prefill starts it at zeros
    assert _initial_shape(info("past_key_values_linear_cache_1", ["batch", 4, 16, 16]), "batch") == (-1, 4, 16, 16)
    with pytest.raises(ValueError, match="RWKV"):  # its running maximum starts at -1e38
        _initial_shape(info("state_4", ["batch", 64, 2]), "batch")
    with pytest.raises(ValueError, match="this one has 2"):
        _initial_shape(info("past_key_values_key_0", ["batch", "heads", "past_seq", 8]), "batch")
