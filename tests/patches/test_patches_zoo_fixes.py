"""Zoo rows that were wrong or failed for a reason outside the exporters.

* afmoe: a silent mismatch (0.16) with both exporters. Its router is zero at
  initialization: every token ties on every expert, ``torch.topk`` and
  onnxruntime's ``TopK`` (lowest index first) pick other experts. The tiny
  models now get random values in such matrices, and ties met by the eager
  reference are detected and named (:mod:`fx2onnx.ties`).
* axk2 (and deepseek_v32, glm_moe_dsa) with a cache: the indexer keys of
  ``DynamicIndexedLayer`` were dropped by the cache flattening; the loss is now
  detected (:mod:`fx2onnx.patches.cache_check`) and the keys can be flattened
  (:mod:`fx2onnx.patches.indexed_cache`).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import fx2onnx
from fx2onnx.ties import describe_ties, record_ties

transformers = pytest.importorskip("transformers")
cache_utils = pytest.importorskip("transformers.cache_utils")


class Router(torch.nn.Module):
    """A mixture-of-experts router: the weights of the two experts chosen per token."""

    def __init__(self, zero: bool):
        super().__init__()
        self.gate = torch.nn.Linear(8, 4, bias=False)
        if zero:
            torch.nn.init.zeros_(self.gate.weight)

    def forward(self, x):
        scores = torch.sigmoid(self.gate(x))
        _, experts = torch.topk(scores, k=2, dim=-1)
        return torch.nn.functional.one_hot(experts, 4).sum(dim=-2).float() * scores


def test_ties_named_for_a_zero_router():
    x = torch.randn(5, 8)
    with torch.no_grad(), record_ties() as ties:
        Router(zero=True)(x)
    assert [t.op for t in ties] == ["topk"]
    assert ties[0].rows == ties[0].total == 5
    assert "test_patches_zoo_fixes.py" in ties[0].where
    assert "break ties differently" in describe_ties(ties)


def test_ties_inside_a_sorted_topk_are_reported():
    """The order of tied values among the k selected ones decides the order of the indices."""
    x = torch.tensor([[5.0, 3.0, 3.0, 1.0], [4.0, 3.0, 2.0, 1.0]])
    with record_ties() as ties:
        torch.topk(x, 3)
    assert [(t.op, t.rows, t.total) for t in ties] == [("topk", 1, 2)]
    with record_ties() as ties:
        torch.topk(x, 3, sorted=False)  # a set: only the boundary (3.0 vs 1.0) matters
    assert ties == []


def test_no_ties_and_right_export_for_a_random_router():
    torch.manual_seed(0)
    model = Router(zero=False).eval()
    x, x2 = torch.randn(5, 8), torch.randn(9, 8)
    with torch.no_grad(), record_ties() as ties:
        model(x2)
    assert ties == []
    onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes={"x": {0: "tokens"}})
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x2.numpy()})[0]
    np.testing.assert_allclose(got, model(x2).detach().numpy(), atol=1e-5)


def test_zero_router_is_randomized_in_tiny_models():
    from fx2onnx.inputs.discover import get_architecture, tiny_model

    model, _ = tiny_model(get_architecture("afmoe"))
    zero = [n for n, p in model.named_parameters() if p.dim() >= 2 and not p.any()]
    assert zero == []


@pytest.mark.parametrize("cache", [False, True])
@pytest.mark.slow
def test_afmoe_row_matches_on_second_input_set(cache):
    from fx2onnx.zoo.architectures import run_row

    row = run_row("afmoe", "to_onnx", cache)
    assert row["success"], row["error"]
    assert row["max_abs"] < 1e-4


def _indexed_cache(batch: int = 2, past: int = 3) -> object:
    layers = []
    for _ in range(2):
        layer = cache_utils.DynamicIndexedLayer()
        layer.update(torch.randn(batch, 2, past, 4), torch.randn(batch, 2, past, 4))
        layer.update_indexer(torch.randn(batch, past, 6))
        layers.append(layer)
    cache = cache_utils.DynamicCache()
    cache.layers.extend(layers)
    return cache


def test_indexed_layer_tensors_round_trip():
    from fx2onnx.patches.indexed_cache import indexer_context, indexer_names, indexer_tensors, set_indexer_tensors

    layer = _indexed_cache().layers[0]
    context = indexer_context(layer)
    assert context == (True, False)
    assert indexer_names(1, context) == ["indexer_keys_1"]
    rebuilt = cache_utils.DynamicIndexedLayer()
    set_indexer_tensors(rebuilt, indexer_tensors(layer), context)
    new = torch.randn(2, 1, 6)
    torch.testing.assert_close(rebuilt.update_indexer(new), torch.cat([layer.indexer_keys, new], dim=1))
    assert indexer_context(cache_utils.DynamicLayer()) is None


def test_cache_check_names_a_tensor_the_flattening_drops():
    from fx2onnx.patches.cache_check import CacheStateLostError, check_cache_round_trip, dropped_cache_state
    from fx2onnx.validation import cache_flattening

    cache = cache_utils.DynamicCache()
    cache.layers.append(cache_utils.DynamicLayer())
    cache.layers[0].update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    with cache_flattening(cache):
        assert dropped_cache_state(cache, "past") == []
        cache.layers[0].extra_state = torch.ones(1, 3)  # a state no flattening knows
        assert dropped_cache_state(cache, "past") == ["past.layers[0].extra_state (DynamicLayer, shape (1, 3))"]
        with pytest.raises(CacheStateLostError, match="extra_state.*fx2onnx.patches.caches"):
            check_cache_round_trip({"past": cache})


class _CompressedLayer(cache_utils.DynamicLayer):
    """A layer class of a model's file (like DeepSeek-V4's): extra states in a dict, a config to build it."""

    def __init__(self, config):
        super().__init__()
        self.buffer = {"compressor": None}


class _BufferedLayer(cache_utils.DynamicLayer):
    """The same without a config: it is rebuilt, but its buffer is not flattened."""

    def __init__(self):
        super().__init__()
        self.buffer = {"compressor": None}


def test_cache_check_names_dict_states_and_layers_it_cannot_rebuild():
    from fx2onnx.patches.cache_check import dropped_cache_state
    from fx2onnx.validation import cache_flattening

    cache = cache_utils.DynamicCache()
    cache.layers.append(_CompressedLayer(config=None))
    cache.layers[0].update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    with cache_flattening(cache):
        # the class is found in its own module, but its constructor needs a config
        (lost,) = dropped_cache_state(cache, "past")
        assert "_CompressedLayer cannot be rebuilt" in lost and "config" in lost, lost
    cache.layers[0] = _BufferedLayer()
    cache.layers[0].update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    with cache_flattening(cache):
        assert dropped_cache_state(cache, "past") == []
        cache.layers[0].buffer["compressor"] = torch.ones(2, 2)
        assert dropped_cache_state(cache, "past") == [
            "past.layers[0].buffer['compressor'] (_BufferedLayer, shape (2, 2))"]


@pytest.mark.slow
def test_axk2_cache_row_exports_or_names_the_lost_indexer_keys():
    """Right on the second input set once fx2onnx.patches.caches flattens the indexer keys,
    and until then a capture failure naming them (never a size mismatch or a wrong model)."""
    from fx2onnx.zoo.architectures import run_row
    from fx2onnx.patches.cache_check import dropped_cache_state
    from fx2onnx.validation import cache_flattening

    cache = _indexed_cache()
    with cache_flattening(cache):
        flattened = dropped_cache_state(cache) == []
    row = run_row("axk2", "to_onnx", True)
    if flattened:
        assert row["success"], row["error"]
        assert row["max_abs"] < 1e-4
    else:
        assert row["step"] == "capture"
        assert "indexer_keys" in row["error"] and "fx2onnx.patches.caches" in row["error"]


class CacheModel(torch.nn.Module):
    def forward(self, x, past_key_values):
        return x + past_key_values.layers[0].keys.sum()


def test_to_onnx_names_a_cache_tensor_the_flattening_drops():
    cache = cache_utils.DynamicCache()
    cache.layers.append(cache_utils.DynamicLayer())
    cache.layers[0].update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    cache.layers[0].extra_state = torch.ones(1, 3)  # a state no flattening knows
    with fx2onnx.torch_export_patches(patch_transformers=True):
        with pytest.raises(fx2onnx.ExportError, match=r"Step 'capture'.*layers\[0\]\.extra_state"):
            fx2onnx.to_onnx(CacheModel(), (torch.randn(2, 3), cache))


class BranchOnSize(torch.nn.Module):
    """Branches on a dynamic size (deepseek_v4 compresses once seq >= its ratio)."""

    def forward(self, x):
        if x.shape[0] >= 4:
            return x * 2
        return x + 1


def test_narrowed_dimension_recorded_warned_and_refused():
    import json

    from fx2onnx.frozen import METADATA_KEY, FrozenInputError, FrozenInputWarning

    model = BranchOnSize()
    with pytest.warns(FrozenInputWarning, match=r"narrowed the dynamic dimension x\.shape\[0\] to \[.*, 3\]"):
        onx = fx2onnx.to_onnx(model, (torch.randn(3, 2),), dynamic_shapes={"x": {0: "n"}})
    entry = json.loads({p.key: p.value for p in onx.metadata_props}[METADATA_KEY])["x.shape[0]"]
    assert entry["kind"] == "dim_range" and entry["max"] == 3
    assert fx2onnx.validate(onx, model, (torch.randn(2, 2),)).ok  # inside the range: right
    with pytest.raises(FrozenInputError, match=r"x\.shape\[0\] is 5 but the export narrowed it"):
        fx2onnx.validate(onx, model, (torch.randn(5, 2),))


@pytest.mark.slow
def test_fsmt_exports_and_matches_with_and_without_padding():
    """FSMT's padding mask was None when no token is padding (a branch on the data)."""
    from fx2onnx.inputs.discover import get_architecture
    from fx2onnx.zoo.zoo_inputs import build_zoo_model

    zoo = build_zoo_model(get_architecture("fsmt"), with_cache=False)
    with fx2onnx.torch_export_patches(patch_transformers=True), torch.no_grad():
        onx = fx2onnx.to_onnx(zoo.model, (), kwargs=zoo.copy_inputs(0), dynamic_shapes=zoo.dynamic_shapes)
    padded = zoo.copy_inputs(1)
    padded["decoder_input_ids"][:, -1] = zoo.model.config.pad_token_id
    for inputs in (zoo.copy_inputs(1), padded):
        with torch.no_grad():
            report = fx2onnx.validate(onx, zoo.model, (), inputs)
        assert report.ok, report


def test_longcat_experts_without_a_loop_match_the_original():
    """LongCat-Flash looped over the experts hit (``.item()``): the patch computes every pair at once."""
    from transformers.models.longcat_flash import modeling_longcat_flash as longcat

    from fx2onnx.patches.moe_fixes import _make_longcat_experts_forward

    config = longcat.LongcatFlashConfig(hidden_size=16, expert_ffn_hidden_size=8, n_routed_experts=4,
                                        zero_expert_num=2)
    torch.manual_seed(0)
    experts = longcat.LongcatFlashExperts(config)
    torch.nn.init.normal_(experts.gate_up_proj)
    torch.nn.init.normal_(experts.down_proj)
    hidden = torch.randn(7, 16)
    index = torch.tensor([[0, 4], [1, 2], [5, 3], [3, 0], [4, 5], [2, 1], [0, 1]])  # 4 and 5: identity experts
    weights = torch.rand(7, 2)
    expected = experts(hidden, index, weights)
    patched = _make_longcat_experts_forward(type(experts).forward)
    torch.testing.assert_close(patched(experts, hidden, index, weights), expected)
    ep = torch.export.export(_Wrap(experts, patched),
                             (hidden, index, weights),
                             dynamic_shapes=({0: torch.export.Dim.DYNAMIC}, {0: torch.export.Dim.DYNAMIC},
                                             {0: torch.export.Dim.DYNAMIC}))
    torch.testing.assert_close(ep.module()(hidden[:3], index[:3], weights[:3]), expected[:3])


class _Wrap(torch.nn.Module):
    def __init__(self, experts, forward):
        super().__init__()
        self.experts, self._forward = experts, forward

    def forward(self, hidden, index, weights):
        return self._forward(self.experts, hidden, index, weights)


@pytest.mark.slow
def test_cpmant_mask_without_a_python_list_matches_and_exports():
    """CPM-Ant built its padding positions from a Python list of the sequence length (frozen)."""
    from fx2onnx.inputs.discover import get_architecture
    from fx2onnx.zoo.zoo_inputs import build_zoo_model

    zoo = build_zoo_model(get_architecture("cpmant"), with_cache=False)
    base = zoo.model.cpmant
    g = torch.Generator().manual_seed(0)
    seq = base.prompt_length + 5
    ids = torch.randint(0, 10, (3, seq), generator=g)
    span = torch.randint(0, 2, (3, seq), generator=g)
    context = torch.randint(0, 2, (3, seq), generator=g).bool()
    length = torch.tensor([5, 2, 0])  # left padding of the text in the last two rows
    expected = base._prepare_attention_mask(ids, span, context, length)
    with fx2onnx.torch_export_patches(patch_transformers=True):
        got = base._prepare_attention_mask(ids, span, context, length)
        onx = fx2onnx.to_onnx(zoo.model, (), kwargs=zoo.copy_inputs(0), dynamic_shapes=zoo.dynamic_shapes)
    assert torch.equal(got, expected)
    assert fx2onnx.validate(onx, zoo.model, (), zoo.copy_inputs(1), atol=1e-3).ok


@pytest.mark.parametrize("separate_cls,truncate_seq", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("seq", [5, 8, 13])
def test_funnel_positions_without_lists_match(separate_cls, truncate_seq, seq):
    """Funnel pooled Python lists of positions (the sequence length was frozen)."""
    from transformers import FunnelConfig
    from transformers.models.funnel.modeling_funnel import FunnelAttentionStructure

    config = FunnelConfig(d_model=16, block_sizes=[1, 1, 1], separate_cls=separate_cls, truncate_seq=truncate_seq)
    structure = FunnelAttentionStructure(config).eval()
    expected = structure.get_position_embeds(seq, torch.float32, torch.device("cpu"))
    with fx2onnx.torch_export_patches(patch_transformers=True):
        got = structure.get_position_embeds(seq, torch.float32, torch.device("cpu"))
    assert len(got) == len(expected) == 3
    for pair, pair_expected in zip(got, expected):
        for a, b in zip(pair, pair_expected):
            assert (a is None and b is None) or torch.equal(a, b)



@pytest.mark.slow
def test_reformer_axial_positions_for_the_whole_batch():
    """Reformer gathered its axial position embeddings with a Python loop over the batch (frozen)."""
    from transformers import ReformerConfig
    from transformers.models.reformer.modeling_reformer import AxialPositionEmbeddings

    from fx2onnx.inputs.discover import get_architecture
    from fx2onnx.zoo.zoo_inputs import build_zoo_model

    config = ReformerConfig(hidden_size=64, axial_pos_embds_dim=[24, 40], axial_pos_shape=[4, 8])
    torch.manual_seed(0)
    embeddings = AxialPositionEmbeddings(config).eval()
    for weight in embeddings.weights:
        torch.nn.init.normal_(weight)
    positions = torch.randint(0, 32, (3, 7), generator=torch.Generator().manual_seed(0))
    expected = embeddings(positions)
    with fx2onnx.torch_export_patches(patch_transformers=True):
        got = embeddings(positions)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)

    zoo = build_zoo_model(get_architecture("reformer"), with_cache=False)
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(zoo.model, (), kwargs=zoo.copy_inputs(0), dynamic_shapes=zoo.dynamic_shapes)
    inputs = zoo.copy_inputs(1)
    assert inputs["input_ids"].shape[0] != zoo.copy_inputs(0)["input_ids"].shape[0]  # another batch size
    assert fx2onnx.validate(onx, zoo.model, (), inputs, atol=1e-4).ok
