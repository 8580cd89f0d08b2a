"""No silent wrong model: what torch.export freezes is recorded, reported and checked.

Three cases used to give an ONNX model that is wrong without a word:

* a Python scalar argument (int, float, bool, str) torch.export specialized,
* a list argument whose length torch.export specialized,
* a sliding-window cache (Gemma 2/3...) longer than its window,
* an int marked dynamic that torch.export specialized all the same,
* two dimensions declared independent that the model's code compared (``height == width``).
"""

from __future__ import annotations

import json
import warnings

import onnx
import pytest
import torch
from torch.export import Dim

import fx2onnx
from fx2onnx.frozen import METADATA_KEY, FrozenInputError, FrozenInputWarning


class Scale(torch.nn.Module):
    def forward(self, x, n: int):
        return x * n + 1


class Options(torch.nn.Module):
    def forward(self, x, alpha: float, flag: bool, mode: str):
        y = x * alpha
        if flag:
            y = y + 1
        return y.sum(dim=0) if mode == "sum" else y.mean(dim=0)


class SumList(torch.nn.Module):
    def forward(self, x, xs: list):
        for t in xs:
            x = x + t
        return x


class Weights(torch.nn.Module):
    def forward(self, x, weights: list):
        return x * sum(weights)


def _frozen(onx: onnx.ModelProto) -> dict:
    props = {p.key: p.value for p in onx.metadata_props}
    assert METADATA_KEY in props, f"no {METADATA_KEY!r} in {sorted(props)}"
    return json.loads(props[METADATA_KEY])


# frozen Python scalars


def test_frozen_int_is_recorded_and_reported():
    x = torch.randn(2, 3)
    with pytest.warns(FrozenInputWarning, match=r"'n'.*3.*Dim.DYNAMIC"):
        onx = fx2onnx.to_onnx(Scale(), (x, 3), dynamic_shapes=({0: "batch"}, None))
    assert [i.name for i in onx.graph.input] == ["x"]
    assert _frozen(onx) == {"n": {"kind": "int", "value": 3}}
    assert fx2onnx.validate(onx, Scale(), (torch.randn(4, 3), 3)).ok


def test_validate_refuses_another_value_of_a_frozen_int():
    onx = fx2onnx.to_onnx(Scale(), (torch.randn(2, 3), 3), dynamic_shapes=({0: "batch"}, None))
    with pytest.raises(FrozenInputError, match=r"'n'.*3.*5") as info:
        fx2onnx.validate(onx, Scale(), (torch.randn(4, 3), 5))
    assert isinstance(info.value, ValueError)


def test_frozen_float_bool_str():
    x = torch.randn(2, 3)
    with pytest.warns(FrozenInputWarning) as record:
        onx = fx2onnx.to_onnx(Options(), (x, 0.5, True, "sum"), dynamic_shapes=({0: "batch"}, None, None, None))
    names = " ".join(str(w.message) for w in record if issubclass(w.category, FrozenInputWarning))
    # a bool and a str given None in dynamic_shapes are constants the user declared: recorded, not warned
    assert "'alpha'" in names and "'flag'" not in names and "'mode'" not in names, names
    assert _frozen(onx) == {
        "alpha": {"kind": "float", "value": 0.5},
        "flag": {"kind": "bool", "value": True, "declared_static": True},
        "mode": {"kind": "str", "value": "sum", "declared_static": True},
    }
    assert fx2onnx.validate(onx, Options(), (torch.randn(5, 3), 0.5, True, "sum")).ok
    with pytest.raises(FrozenInputError, match=r"'mode'.*'sum'.*'mean'"):
        fx2onnx.validate(onx, Options(), (torch.randn(5, 3), 0.5, True, "mean"))
    with pytest.raises(FrozenInputError, match=r"'alpha'.*0.5.*2.0"):
        fx2onnx.validate(onx, Options(), (torch.randn(5, 3), 2.0, True, "sum"))


@pytest.mark.parametrize("spec", [Dim.DYNAMIC, "n", Dim("n")])
def test_dynamic_int_becomes_an_onnx_input(spec):
    x = torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FrozenInputWarning)
        onx = fx2onnx.to_onnx(Scale(), (x, 3), dynamic_shapes={"x": {0: "batch"}, "n": spec})
    inputs = {i.name: i.type.tensor_type for i in onx.graph.input}
    assert list(inputs) == ["x", "n"]
    assert inputs["n"].elem_type == onnx.TensorProto.INT64 and len(inputs["n"].shape.dim) == 0
    assert _frozen(onx) == {}
    for n in (3, 7, -2):
        report = fx2onnx.validate(onx, Scale(), (torch.randn(5, 3), n))
        assert report.ok, report


class SetColumn(torch.nn.Module):
    def forward(self, x, i: int, y):
        x = x.clone()
        x[..., i] = y  # a Python index: torch.export specializes i even when marked dynamic
        return x


class SetColumnTensor(torch.nn.Module):
    def forward(self, x, i: torch.Tensor, y):
        return torch.where(torch.arange(x.shape[-1]) == i, y.unsqueeze(-1), x)


@pytest.mark.parametrize("spec", [Dim.DYNAMIC, "i"])
def test_dynamic_int_specialized_by_torch_export_is_frozen(spec):
    """The silent case: the ONNX model had an input 'i' it ignored, validate with i=2 gave MISMATCH."""
    x, y = torch.randn(2, 3, 4), torch.randn(2, 3)
    ds = ({0: "batch"}, spec, {0: "batch"})
    with pytest.warns(FrozenInputWarning, match=r"'i'.*declared dynamic.*specialized it to 1.*torch\.tensor"):
        onx = fx2onnx.to_onnx(SetColumn(), (x, 1, y), dynamic_shapes=ds)
    assert _frozen(onx) == {"i": {"kind": "int", "value": 1, "declared_dynamic": True}}
    assert fx2onnx.validate(onx, SetColumn(), (torch.randn(5, 3, 4), 1, torch.randn(5, 3))).ok
    with pytest.raises(FrozenInputError, match=r"'i'.*1.*got 2.*torch\.tensor"):
        fx2onnx.validate(onx, SetColumn(), (torch.randn(5, 3, 4), 2, torch.randn(5, 3)))


def test_tensor_index_stays_dynamic():
    """The fix the warning gives: a tensor index and torch.where, right for every index."""
    x, y = torch.randn(2, 3, 4), torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FrozenInputWarning)
        onx = fx2onnx.to_onnx(SetColumnTensor(), (x, torch.tensor(1), y), dynamic_shapes=({0: "b"}, None, {0: "b"}))
    assert _frozen(onx) == {}
    for i in (0, 1, 3):
        inputs = (torch.randn(5, 3, 4), torch.tensor(i), torch.randn(5, 3))
        assert fx2onnx.validate(onx, SetColumnTensor(), inputs).ok


def test_validate_keeps_working_without_metadata():
    """torch.onnx.export models carry no fx2onnx metadata: validate compares as before."""
    onx = torch.onnx.export(Scale(), (torch.randn(2, 3), 3), dynamic_shapes=({0: "batch"}, None), dynamo=True)
    assert fx2onnx.validate(onx.model_proto, Scale(), (torch.randn(4, 3), 3)).ok


# frozen list lengths


def test_list_length_is_recorded_and_checked():
    x = torch.randn(2, 3)
    xs = [torch.randn(2, 3) for _ in range(3)]
    ds = ({0: "batch"}, [{0: "batch"}] * 3)
    with pytest.warns(FrozenInputWarning, match=r"'xs'.*3"):
        onx = fx2onnx.to_onnx(SumList(), (x, xs), dynamic_shapes=ds)
    frozen = _frozen(onx)
    assert frozen == {"xs": {"kind": "list", "length": 3, "inputs": ["xs_0", "xs_1", "xs_2"]}}
    assert fx2onnx.validate(onx, SumList(), (torch.randn(4, 3), [torch.randn(4, 3) for _ in range(3)])).ok
    with pytest.raises(FrozenInputError, match=r"'xs'.*3.*2"):
        fx2onnx.validate(onx, SumList(), (torch.randn(4, 3), [torch.randn(4, 3) for _ in range(2)]))


def test_list_of_scalars_cannot_change_silently():
    """The silent case: a list of floats is folded into the graph, another list gave wrong numbers."""
    onx = fx2onnx.to_onnx(Weights(), (torch.randn(2, 3), [1.0, 2.0]), dynamic_shapes=({0: "batch"}, None))
    assert _frozen(onx)["weights"]["length"] == 2
    assert fx2onnx.validate(onx, Weights(), (torch.randn(4, 3), [1.0, 2.0])).ok
    with pytest.raises(FrozenInputError, match=r"'weights'.*2.*3"):
        fx2onnx.validate(onx, Weights(), (torch.randn(4, 3), [1.0, 2.0, 3.0]))
    with pytest.raises(FrozenInputError, match=r"'weights\[1\]'.*2.0.*5.0"):
        fx2onnx.validate(onx, Weights(), (torch.randn(4, 3), [1.0, 5.0]))


# sliding-window caches


def _sliding_inputs(tiny, batch: int, seq: int, past: int, seed: int, position_ids: bool, padding: int = 0):
    """Inputs of a tiny decoder whose DynamicCache is built with the config (sliding layers cropped)."""
    from transformers.cache_utils import DynamicCache

    config = tiny.config
    g = torch.Generator().manual_seed(seed)
    layers = config.num_hidden_layers
    shape = (batch, config.num_key_value_heads, past, config.head_dim)
    data = [(torch.randn(shape, generator=g), torch.randn(shape, generator=g)) for _ in range(layers)]
    mask = torch.ones(batch, past + seq, dtype=torch.int64)
    mask[0, :padding] = 0  # left padding of the first sequence
    inputs = dict(
        input_ids=torch.randint(3, config.vocab_size, (batch, seq), generator=g),
        attention_mask=mask,
        past_key_values=DynamicCache(data, config=config),
    )
    if position_ids:
        inputs["position_ids"] = torch.arange(past, past + seq).expand(batch, -1).contiguous()
    return inputs


def _export_sliding(tiny, exporter: str, position_ids: bool):
    inputs = _sliding_inputs(tiny, 2, 3, 10, seed=1, position_ids=position_ids)
    ds = {k: v for k, v in tiny.dynamic_shapes.items() if k in inputs}
    with fx2onnx.torch_export_patches(patch_transformers=True):
        if exporter == "to_onnx":
            # one name for every cache length: to_onnx tells apart the lengths that differ;
            # a hybrid cache is right at any length: nothing to warn about
            with warnings.catch_warnings():
                warnings.simplefilter("error", FrozenInputWarning)
                onx = fx2onnx.to_onnx(tiny.model, (), inputs, dynamic_shapes=ds)
            assert METADATA_KEY not in {p.key for p in onx.metadata_props} or _frozen(onx) == {}
            return onx
        # torch.onnx.export keeps the names as given: sliding layers need their own name
        ds["past_key_values"] = [
            {0: "batch", 2: "sliding_seq" if kind == "sliding_attention" else "past_seq"}
            for kind in tiny.config.layer_types
            for _ in range(2)
        ]
        return torch.onnx.export(tiny.model, (), kwargs=inputs, dynamic_shapes=ds, dynamo=True).model_proto


@pytest.mark.parametrize(
    "name,exporter,position_ids",
    [
        # the fast tier: gemma2; the other cases in the slow tier
        pytest.param("gemma3", "to_onnx", False, marks=pytest.mark.slow),
        pytest.param("gemma3", "dynamo", False, marks=pytest.mark.slow),
        pytest.param("gemma3", "to_onnx", True, marks=pytest.mark.slow),
        ("gemma2", "to_onnx", False),
    ],
)
def test_hybrid_sliding_cache_at_any_length(name, exporter, position_ids):
    """Sliding window 4, exported with a cache of 10: right for caches shorter and longer than the window."""
    from fx2onnx.zoo import get_tiny_model

    types = ["sliding_attention", "full_attention"]
    tiny = get_tiny_model(name, with_cache=True, num_hidden_layers=2, sliding_window=4, layer_types=types)
    onx = _export_sliding(tiny, exporter, position_ids)
    for past, seq, padding in [(10, 3, 0), (2, 4, 0), (3, 1, 0), (5, 4, 0), (12, 4, 0), (12, 2, 6)]:
        inputs = _sliding_inputs(tiny, 3, seq, past, seed=past + seq, position_ids=position_ids, padding=padding)
        report = fx2onnx.validate(onx, tiny.model, (), inputs, atol=1e-4)
        assert report.ok, f"past={past}, seq={seq}, padding={padding}: {report}"


@pytest.mark.parametrize(
    "name,exporter,past",
    [
        # the slow tier (the fast one has the hybrid case of gemma2 above)
        pytest.param("mistral", "to_onnx", 2, marks=pytest.mark.slow),
        pytest.param("mistral", "to_onnx", 10, marks=pytest.mark.slow),
        pytest.param("gemma3", "to_onnx", 2, marks=pytest.mark.slow),
        pytest.param("mistral", "dynamo", 10, marks=pytest.mark.slow),
    ],
)
def test_all_sliding_cache_at_any_length(name, exporter, past):
    """Without a full-attention layer, a cropped cache does not tell how many tokens it has seen
    from its keys: the flattening carries the count (an empty tensor (0, tokens seen)), so the
    model is right on both sides of the window, exported below or above it. Before, the count was
    rebuilt from the keys' length: dynamo's model was off by 0.8 past the window."""
    from fx2onnx.zoo import get_tiny_model
    from fx2onnx.patches.caches import carries_token_count

    tiny = get_tiny_model(name, with_cache=True, num_hidden_layers=1, sliding_window=4)
    assert getattr(tiny.config, "layer_types", None) in (None, ["sliding_attention"])
    inputs = _sliding_inputs(tiny, 2, 3, past, seed=1, position_ids=False)
    assert carries_token_count(inputs["past_key_values"])
    ds = {k: v for k, v in tiny.dynamic_shapes.items() if k in inputs}
    assert ds["past_key_values"][-1] == {1: "tokens_seen"}
    with fx2onnx.torch_export_patches(patch_transformers=True):
        if exporter == "to_onnx":
            with warnings.catch_warnings():
                warnings.simplefilter("error", FrozenInputWarning)
                onx = fx2onnx.to_onnx(tiny.model, (), inputs, dynamic_shapes=ds)
            assert _frozen(onx) in (None, {})
        else:
            ds["past_key_values"] = [{0: "batch", 2: "sliding_seq"}] * 2 + [{1: "tokens_seen"}]
            onx = torch.onnx.export(tiny.model, (), kwargs=inputs, dynamic_shapes=ds, dynamo=True).model_proto
    assert onx.graph.input[-1].name.endswith("tokens_seen")
    assert [d.dim_value for d in onx.graph.output[-1].type.tensor_type.shape.dim][:1] == [0]
    for past, seq in [(1, 1), (3, 2), (4, 1), (10, 1), (12, 4)]:
        inputs = _sliding_inputs(tiny, 3, seq, past, seed=past + seq, position_ids=False)
        report = fx2onnx.validate(onx, tiny.model, (), inputs, atol=1e-4)
        assert report.ok, f"past={past}, seq={seq}: {report}"


def test_sliding_cache_dynamic_shapes_wrong_length():
    """A dynamic_shapes list fitting neither the keys and values (the count's spec derived, see
    tests/patches/test_sliding_cache_spec.py) nor all the tensors names the missing count."""
    from fx2onnx.zoo import get_tiny_model

    tiny = get_tiny_model("mistral", with_cache=True, num_hidden_layers=1, sliding_window=4)
    inputs = _sliding_inputs(tiny, 2, 3, 6, seed=1, position_ids=False)
    ds = {k: v for k, v in tiny.dynamic_shapes.items() if k in inputs}
    ds["past_key_values"] = ds["past_key_values"][:-2]
    with fx2onnx.torch_export_patches(patch_transformers=True):
        with pytest.raises(ValueError, match=r"list of 3 specs.*got 1.*tokens_seen"):
            fx2onnx.to_onnx(tiny.model, (), inputs, dynamic_shapes=ds)



class SquareOrNot(torch.nn.Module):
    def forward(self, x):
        if x.shape[-1] == x.shape[-2]:  # a branch comparing two dynamic dimensions
            return x + x.transpose(-1, -2)
        return x * 2


def test_dimensions_merged_by_a_comparison_are_reported_and_checked():
    with pytest.warns(FrozenInputWarning, match=r"x\.shape\[1\], x\.shape\[2\], declared independent"):
        onx = fx2onnx.to_onnx(SquareOrNot(), (torch.randn(2, 4, 4),), dynamic_shapes=({1: Dim.DYNAMIC, 2: Dim.DYNAMIC},))
    entry = json.loads({p.key: p.value for p in onx.metadata_props}[METADATA_KEY])["x.shape[1] == x.shape[2]"]
    assert entry["kind"] == "dim_equal" and entry["dims"] == [[0, 1], [0, 2]]
    assert fx2onnx.validate(onx, SquareOrNot(), (torch.randn(2, 5, 5),)).ok
    with pytest.raises(FrozenInputError, match=r"x\.shape\[1\] = 3, x\.shape\[2\] = 6"):
        fx2onnx.validate(onx, SquareOrNot(), (torch.randn(2, 3, 6),))
    # one name for both: the user declared them equal, nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error", FrozenInputWarning)
        fx2onnx.to_onnx(SquareOrNot(), (torch.randn(2, 4, 4),), dynamic_shapes=({1: "n", 2: "n"},))


class EvenOrOdd(torch.nn.Module):
    def forward(self, x):
        if x.shape[-1] % 2 == 0:  # a branch no range of sizes expresses
            return x * 2
        return x - 1


def test_size_conditions_are_reported_and_checked():
    with pytest.warns(FrozenInputWarning, match=r"assumed \(x\.shape\[1\] % 2\) == 0"):
        onx = fx2onnx.to_onnx(EvenOrOdd(), (torch.randn(2, 4),), dynamic_shapes=({1: Dim.DYNAMIC},))
    assert fx2onnx.validate(onx, EvenOrOdd(), (torch.randn(2, 10),)).ok
    with pytest.raises(FrozenInputError, match=r"x\.shape\[1\] = 5"):
        fx2onnx.validate(onx, EvenOrOdd(), (torch.randn(2, 5),))
    # exported on a non-square example, the other branch: a square input is refused (it was silently wrong)
    with pytest.warns(FrozenInputWarning, match=r"x\.shape\[2\] != x\.shape\[1\]"):
        onx = fx2onnx.to_onnx(SquareOrNot(), (torch.randn(2, 4, 5),), dynamic_shapes=({1: Dim.DYNAMIC, 2: Dim.DYNAMIC},))
    assert fx2onnx.validate(onx, SquareOrNot(), (torch.randn(2, 3, 6),)).ok
    with pytest.raises(FrozenInputError, match=r"x\.shape\[2\] != x\.shape\[1\]"):
        fx2onnx.validate(onx, SquareOrNot(), (torch.randn(2, 3, 3),))


class PatchCount(torch.nn.Module):
    def forward(self, x):
        if (x.shape[-2] // 4) * (x.shape[-1] // 4) == 16:  # a number of patches: no range, no remainder
            return x * 2
        return x - 1


@pytest.mark.parametrize("size,other,refused", [((16, 16), (8, 32), (20, 20)), ((20, 20), (24, 24), (16, 16))])
def test_size_equal_to_a_constant_is_reported_and_checked(size, other, refused):
    """Exported on 4x4 patches, the model is right for any 16 patches and refused otherwise (it returned
    x * 2 where eager returns x - 1, silently); exported on 5x5 patches, the reverse."""
    op = "==" if size == (16, 16) else "!="
    with pytest.warns(FrozenInputWarning, match=rf"\(\(x\.shape\[1\] // 4\)\*\(x\.shape\[2\] // 4\)\) {op} 16"):
        onx = fx2onnx.to_onnx(PatchCount(), (torch.randn(2, *size),), dynamic_shapes=({1: Dim.DYNAMIC, 2: Dim.DYNAMIC},))
    assert fx2onnx.validate(onx, PatchCount(), (torch.randn(2, *other),)).ok
    with pytest.raises(FrozenInputError, match=rf"x\.shape\[1\] = {refused[0]}, x\.shape\[2\] = {refused[1]}"):
        fx2onnx.validate(onx, PatchCount(), (torch.randn(2, *refused),))


class PadToMultiple(torch.nn.Module):
    def forward(self, x):
        pad = (8 - x.shape[-1] % 8) % 8
        filler = x.new_zeros((x.shape[0], pad))  # a tensor of the padding's size
        y = torch.cat([x, filler], dim=-1)
        return y.reshape(x.shape[0], -1, 8).sum(-1) + filler.sum(-1, keepdim=True)


def test_size_one_assumptions_are_not_reported():
    """torch.export assumes the padding is not 1 (`(8 - n % 8) % 8 != 1`, a size it broadcasts) and
    guards the padded length in other ways true for every n: nothing is frozen (LED was refused at 7 tokens)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FrozenInputWarning)
        onx = fx2onnx.to_onnx(PadToMultiple(), (torch.randn(2, 11),), dynamic_shapes=({0: Dim.DYNAMIC, 1: Dim.DYNAMIC},))
    for n in (7, 8, 15, 16, 3):  # padding 1, 0, 1, 0, 5
        assert fx2onnx.validate(onx, PadToMultiple(), (torch.randn(3, n),)).ok


class PadOdd(torch.nn.Module):
    def forward(self, x):
        if x.shape[-1] % 2 == 1:  # pads odd widths: torch.export guards `x.shape[1] % 2 != 1` on an even example
            x = torch.nn.functional.pad(x, (0, 1))
        return x.reshape(x.shape[0], -1, 2).sum(dim=-1)


def test_parity_is_a_size_condition():
    with pytest.warns(FrozenInputWarning, match=r"\(x\.shape\[1\] % 2\) != 1"):
        onx = fx2onnx.to_onnx(PadOdd(), (torch.randn(3, 8),), dynamic_shapes=({0: Dim.DYNAMIC, 1: Dim.DYNAMIC},))
    assert fx2onnx.validate(onx, PadOdd(), (torch.randn(2, 10),)).ok
    with pytest.raises(FrozenInputError, match=r"x\.shape\[1\] = 7"):
        fx2onnx.validate(onx, PadOdd(), (torch.randn(3, 7),))


def test_stride_comparisons_are_not_size_conditions():
    """A guard comparing strides (``max(1, size)`` is how torch computes contiguous strides) chooses
    a view or a copy: timm's Swin at a dynamic image size records one per stage, true with one
    window per row at export and false with two, while the values do not depend on it."""
    from fx2onnx.frozen import is_a_stride_condition

    windows = "((((L['x'].size()[3] // 4) + ((L['x'].size()[3] // 4) % 2)) // 2) + 6) // 7"
    assert is_a_stride_condition(f"(5376*max(1, {windows})) == 5376")
    assert not is_a_stride_condition("(L['x'].size()[2] % 4) == 0")
    assert not is_a_stride_condition("((L['x'].size()[2] // 14)*(L['x'].size()[3] // 14)) == 16")
