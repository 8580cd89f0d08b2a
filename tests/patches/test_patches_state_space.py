"""State-space models (Mamba, GraniteMoeHybrid) exported with a dynamic batch and sequence.

Two patches make it work: the linear-attention cache layers are flattened into
their convolution and recurrent states (:mod:`fx2onnx.patches.linear_cache`),
and the selective scan of Mamba runs as one torch ``scan`` instead of a Python
loop over the sequence (:mod:`fx2onnx.patches.state_space`).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils import _pytree as pytree

pytest.importorskip("transformers")

from fx2onnx import to_onnx, torch_export_patches  # noqa: E402
from fx2onnx.inputs import discover  # noqa: E402
from fx2onnx.inputs.discover import get_architecture  # noqa: E402
from fx2onnx.zoo.zoo_inputs import build_zoo_model  # noqa: E402
from fx2onnx.patches import register_cache_serialization, unregister_cache_serialization  # noqa: E402
from fx2onnx.patches.state_space import selective_scan_recurrence  # noqa: E402
from fx2onnx.validation import compare_outputs, flatten_outputs, make_session, run_onnx  # noqa: E402

ATOL = RTOL = 1e-4


def _zoo(name: str, with_cache: bool):
    zoo = build_zoo_model(get_architecture(name), with_cache=with_cache)
    if with_cache and "cache_params" in zoo.inputs:
        # Mamba decodes with a cache and no attention mask (what generate gives it);
        # the zoo's mask covers the cached tokens too, which Mamba's forward rejects
        for values in (zoo.inputs, zoo.inputs2, zoo.dynamic_shapes):
            values.pop("attention_mask", None)
    return zoo


def _one_token(zoo) -> dict:
    """The second input set reduced to one new token (a decoding step)."""
    inputs = zoo.copy_inputs(1)
    seq = inputs["input_ids"].shape[1]
    inputs["input_ids"] = inputs["input_ids"][:, :1]
    if "attention_mask" in inputs:
        inputs["attention_mask"] = inputs["attention_mask"][:, : inputs["attention_mask"].shape[1] - seq + 1]
    return inputs


def _export_and_check(zoo, decoding_step: bool = False) -> tuple[list[str], list[str]]:
    """Exports with the first input set, checks the second one (other batch and sequence)
    and, with ``decoding_step``, the second one reduced to one token."""
    with torch_export_patches(patch_transformers=True), torch.no_grad():
        onx = to_onnx(zoo.model, (), zoo.copy_inputs(0), dynamic_shapes=zoo.dynamic_shapes)
    sess = make_session(onx)
    input_sets = [zoo.copy_inputs(1)] + ([_one_token(zoo)] if decoding_step else [])
    for inputs in input_sets:
        with torch.no_grad():
            expected = flatten_outputs(zoo.model(**copy.deepcopy(inputs)))
        got = run_onnx(sess, (), inputs)
        report = compare_outputs(expected, got, atol=ATOL, rtol=RTOL)
        assert report.ok, f"seq={inputs['input_ids'].shape[1]}: {report}"
        assert len(got) == len(expected)
    dims = [d.dim_param for i in onx.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param]
    return [i.name for i in onx.graph.input], dims


def test_selective_scan_recurrence_equals_the_loop():
    torch.manual_seed(0)
    a = torch.rand(2, 6, 5, 3)
    bu = torch.randn(2, 6, 5, 3)
    c = torch.randn(2, 5, 3)
    state, outputs = torch.zeros(2, 6, 3), []
    for i in range(5):
        state = a[:, :, i] * state + bu[:, :, i]
        outputs.append(torch.matmul(state, c[:, i, :].unsqueeze(-1))[:, :, 0])
    got, last = selective_scan_recurrence(a, bu, c, torch.float32)
    torch.testing.assert_close(got, torch.stack(outputs, dim=-1), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(last, state, atol=1e-6, rtol=1e-6)


def test_mamba_cache_flattened_and_rebuilt():
    zoo = _zoo("mamba", with_cache=True)
    cache = zoo.inputs["cache_params"]
    done = register_cache_serialization()
    try:
        leaves, spec = pytree.tree_flatten(cache)
        names = [str(path[-1]) for path, _ in pytree.tree_flatten_with_path(cache)[0]]
        rebuilt = pytree.tree_unflatten(leaves, spec)
        assert pytree.treespec_loads(pytree.treespec_dumps(spec)) == spec
    finally:
        unregister_cache_serialization(done)
    assert len(leaves) == 4 and "conv_0" in names[0] and "recurrent_1" in names[3]
    for layer, original in zip(rebuilt.layers, cache.layers):
        assert type(layer) is type(original)
        assert layer.conv_states[0] is original.conv_states[0]
        assert layer.recurrent_states[0] is original.recurrent_states[0]
        assert layer.has_previous_state == original.has_previous_state
        assert layer.conv_kernel_size == original.conv_kernel_size
    # the rebuilt cache gives the same outputs as the original one
    inputs = zoo.copy_inputs(0)
    with torch.no_grad():
        expected = flatten_outputs(zoo.model(**inputs))
        inputs = zoo.copy_inputs(0)
        inputs["cache_params"] = rebuilt
        got = flatten_outputs(zoo.model(**inputs))
    assert compare_outputs(expected, got, atol=0, rtol=0).ok


@pytest.mark.parametrize("with_cache", [False, True])
def test_patched_mamba_equals_eager(with_cache):
    zoo = _zoo("mamba", with_cache=with_cache)
    input_sets = [zoo.inputs2] + ([_one_token(zoo)] if with_cache else [])
    for inputs in input_sets:
        with torch.no_grad():
            expected = flatten_outputs(zoo.model(**copy.deepcopy(inputs)))
            with torch_export_patches(patch_transformers=True) as context:
                got = flatten_outputs(zoo.model(**copy.deepcopy(inputs)))
        applied = {r.name for r in context.reports if r.status == "applied"}
        assert {"mamba.mamba_selective_scan", "MambaMixer.forward"} <= applied
        assert compare_outputs(expected, got, atol=ATOL, rtol=RTOL).ok


def test_mamba_without_cache_dynamic_sequence():
    names, dims = _export_and_check(_zoo("mamba", with_cache=False))
    assert names == ["input_ids", "attention_mask"]
    assert {"batch", "seq"} <= set(dims)


@pytest.mark.parametrize("name", ["mamba", "falcon_mamba"])
@pytest.mark.slow
def test_mamba_with_cache(name):
    # one graph for several new tokens (eager: the scan starts from zeros) and for one
    # token (eager: decoding from the cached recurrent state)
    names, dims = _export_and_check(_zoo(name, with_cache=True), decoding_step=True)
    assert names[0] == "input_ids"
    assert [n for n in names if "conv" in n] and [n for n in names if "recurrent" in n]
    assert {"batch", "seq"} <= set(dims)


@pytest.mark.slow
def test_granitemoehybrid_with_cache():
    # hybrid: a Mamba layer (conv and recurrent states) and an attention layer (keys, values)
    names, dims = _export_and_check(_zoo("granitemoehybrid", with_cache=True), decoding_step=True)
    assert any("conv_0" in n for n in names) and any("key_1" in n for n in names)
    assert {"batch", "seq", "past_seq"} <= set(dims)


@pytest.mark.slow
def test_patched_zamba_equals_eager(monkeypatch):
    """Zamba's mixer of independent Mamba heads: with a filled cache, several new tokens start
    from zeros and one token continues from the cached state, in one graph (its export runs in
    the causal folders sweep: bench/sweep_folders.py)."""
    # 4 layers: two hybrid layers among them (the shared transformer is tied between them)
    zamba = dict(discover.ARCHITECTURE_OVERRIDES.get("zamba", {}), num_hidden_layers=4)
    monkeypatch.setitem(discover.ARCHITECTURE_OVERRIDES, "zamba", zamba)
    zoo = _zoo("zamba", with_cache=True)
    for inputs in (zoo.copy_inputs(1), _one_token(zoo)):
        with torch.no_grad():
            expected = flatten_outputs(zoo.model(**copy.deepcopy(inputs)))
            with torch_export_patches(patch_transformers=True) as context:
                got = flatten_outputs(zoo.model(**copy.deepcopy(inputs)))
        assert "ZambaMambaMixer.forward" in {r.name for r in context.reports if r.status == "applied"}
        assert compare_outputs(expected, got, atol=0, rtol=0).ok
