"""infer_dynamic_shapes: dynamic shapes guessed from several input sets, then used to export."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import fx2onnx
from fx2onnx.zoo import get_tiny_model

DYN = Dim.DYNAMIC


class Concat(torch.nn.Module):
    def forward(self, x, past, scale=None):
        y = torch.cat([past, x], dim=1)
        return y * scale if scale is not None else y


def _two_sets():
    return [
        (torch.randn(2, 3, 8), torch.randn(2, 5, 8)),
        (torch.randn(4, 7, 8), torch.randn(4, 2, 8)),
    ]


def test_positional_tensors_without_model():
    ds = fx2onnx.infer_dynamic_shapes(None, _two_sets(), style="string")
    assert ds == ({0: "batch", 1: "seq"}, {0: "batch", 1: "dim_1_1"})
    assert fx2onnx.infer_dynamic_shapes(None, _two_sets()) == ({0: DYN, 1: DYN}, {0: DYN, 1: DYN})


def test_static_dimensions_and_named_dims():
    sets = [(torch.randn(2, 3), torch.randn(5, 3)), (torch.randn(4, 3), torch.randn(5, 3))]
    ds = fx2onnx.infer_dynamic_shapes(None, sets, style="dim")
    assert ds[1] is None
    assert isinstance(ds[0][0], Dim) and ds[0][0].__name__ == "batch"


def test_model_maps_positional_inputs_to_names():
    sets = [(*s, torch.tensor(2.0)) for s in _two_sets()]
    ds = fx2onnx.infer_dynamic_shapes(Concat(), sets, style="string")
    assert ds == {"x": {0: "batch", 1: "seq"}, "past": {0: "batch", 1: "dim_past_1"}, "scale": None}


def test_kwargs_and_pairs():
    a, b = _two_sets()
    by_name = [{"x": a[0], "past": a[1]}, {"x": b[0], "past": b[1]}]
    assert fx2onnx.infer_dynamic_shapes(None, by_name, style="string") == {
        "x": {0: "batch", 1: "seq"},
        "past": {0: "batch", 1: "dim_past_1"},
    }
    pairs = [((a[0],), {"past": a[1]}), ((b[0],), {"past": b[1]})]
    ds = fx2onnx.infer_dynamic_shapes(Concat(), pairs, style="string")
    assert ds == {"x": {0: "batch", 1: "seq"}, "past": {0: "batch", 1: "dim_past_1"}}
    with pytest.raises(ValueError, match="give the model"):
        fx2onnx.infer_dynamic_shapes(None, pairs)


def test_nested_lists_and_dicts():
    def make(batch, n):
        return ({"a": [torch.randn(batch, n), torch.randn(3)], "b": (torch.randn(batch, 2 * n),)},)

    ds = fx2onnx.infer_dynamic_shapes(None, [make(2, 5), make(3, 7)], style="string")
    assert ds == ({"a": [{0: "batch", 1: "seq"}, None], "b": ({0: "batch", 1: "dim_0_b_0_1"},)},)


def test_ints_and_errors():
    ds = fx2onnx.infer_dynamic_shapes(None, [(torch.randn(2, 3), 2), (torch.randn(2, 3), 4)])
    assert ds == (None, DYN)
    with pytest.raises(ValueError, match="at least two input sets"):
        fx2onnx.infer_dynamic_shapes(None, [(torch.randn(2),)])
    with pytest.raises(ValueError, match="ranks"):
        fx2onnx.infer_dynamic_shapes(None, [(torch.randn(2),), (torch.randn(2, 3),)])
    with pytest.raises(ValueError, match="lengths"):
        fx2onnx.infer_dynamic_shapes(None, [([torch.randn(2)],), ([torch.randn(2)] * 2,)])


def test_int_input_exported_dynamic():
    class Repeat(torch.nn.Module):
        def forward(self, x, n):
            return x * n

    sets = [(torch.randn(2, 3), 2), (torch.randn(5, 3), 4)]
    ds = fx2onnx.infer_dynamic_shapes(Repeat(), sets)
    assert ds == {"x": {0: DYN}, "n": DYN}
    ep = torch.export.export(Repeat(), sets[0], dynamic_shapes=ds)
    torch.testing.assert_close(ep.module()(*sets[1]), Repeat()(*sets[1]))


def test_end_to_end_torch_export_and_to_onnx():
    torch.manual_seed(0)
    sets = _two_sets()
    model = Concat()
    ep = torch.export.export(model, sets[0], dynamic_shapes=fx2onnx.infer_dynamic_shapes(model, sets))
    torch.testing.assert_close(ep.module()(*sets[1]), model(*sets[1]))
    onx = fx2onnx.to_onnx(model, sets[0], dynamic_shapes=fx2onnx.infer_dynamic_shapes(model, sets, style="string"))
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in onx.graph.input]
    assert dims == [["batch", "seq", 8], ["batch", "dim_past_1", 8]]
    report = fx2onnx.validate(onx, model, sets[1])
    assert report.ok, report


@pytest.mark.slow
def test_dynamic_cache_tiny_llama_end_to_end():
    tiny = get_tiny_model("llama", with_cache=True, num_hidden_layers=2)
    ds = fx2onnx.infer_dynamic_shapes(tiny.model, [tiny.inputs, tiny.inputs2], style="string")
    kv = {0: "batch", 2: "past_seq"}
    assert ds == {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "dim_attention_mask_1"},
        "position_ids": {0: "batch", 1: "seq"},
        "past_key_values": [kv, kv, kv, kv],
    }
    # the same structure as the hand-written dynamic shapes of the tiny model
    assert fx2onnx.infer_dynamic_shapes(tiny.model, [tiny.inputs, tiny.inputs2]) == (
        fx2onnx.zoo.export_dynamic_shapes(tiny.dynamic_shapes)
    )
    with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
        onx = fx2onnx.to_onnx(tiny.model, (), modificator(tiny.inputs), dynamic_shapes=ds)
    names = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in onx.graph.input}
    assert names["past_key_values_key_1"] == ["batch", 2, "past_seq", 8]
    report = fx2onnx.validate(onx, tiny.model, (), tiny.inputs2)
    assert report.ok, report
