"""
.. _l-plot-exporter-exporter-infer-ds:

Infer dynamic shapes from several sets of inputs
================================================

Writing ``dynamic_shapes`` by hand is tedious when the inputs are nested
(lists, dictionaries, caches). :func:`fx2onnx.infer_dynamic_shapes` guesses
them from two or more sets of inputs the model accepts: a dimension whose size
changes from one set to another is dynamic, the others are static, and
dimensions changing the same way share a name.

A model with nested inputs
--------------------------
"""

import warnings

import torch
from torch.export import Dim

import fx2onnx
from fx2onnx.inspect.dot import GraphPicture
from fx2onnx.zoo import export_dynamic_shapes, get_tiny_model


class Mix(torch.nn.Module):
    def forward(self, x, extra, scale=1.0):
        # x: (batch, seq, 4), extra: {"mask": (batch, seq), "past": [(batch, past, 4)]}
        full = torch.cat([extra["past"][0], x], dim=1)
        weights = torch.cat([torch.ones_like(extra["past"][0][..., 0]), extra["mask"]], dim=1)
        return full * weights.unsqueeze(-1) * scale


def make_inputs(batch, seq, past):
    extra = {"mask": torch.rand(batch, seq), "past": [torch.randn(batch, past, 4)]}
    return (torch.randn(batch, seq, 4), extra)


model = Mix()
inputs = [make_inputs(2, 3, 5), make_inputs(3, 4, 7)]

# %%
# With the model, the positional inputs are mapped to the names of the
# parameters of ``forward``. ``style="string"`` returns the names.

ds_names = fx2onnx.infer_dynamic_shapes(model, inputs, style="string")
print(ds_names)
assert ds_names == {
    "x": {0: "batch", 1: "seq"},
    "extra": {"mask": {0: "batch", 1: "seq"}, "past": [{0: "batch", 1: "dim_extra_past_0_1"}]},
}

# %%
# The default style gives ``Dim.DYNAMIC`` which :func:`torch.export.export`
# accepts; the exported program runs on the second set of inputs.

ds = fx2onnx.infer_dynamic_shapes(model, inputs)
ep = torch.export.export(model, inputs[0], dynamic_shapes=ds)
print(ep.range_constraints)
torch.testing.assert_close(ep.module()(*inputs[1]), model(*inputs[1]))

# %%
# :func:`fx2onnx.to_onnx` accepts both; with names, the ONNX model keeps them.
# It warns that the length of the list ``past`` is frozen: dynamic shapes
# describe tensors, the number of elements of a list is part of the graph.

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    onx = fx2onnx.to_onnx(model, inputs[0], dynamic_shapes=ds_names)
frozen = [w for w in caught if issubclass(w.category, fx2onnx.FrozenInputWarning)]
print(frozen[0].message)
assert "extra['past']" in str(frozen[0].message)
for i in onx.graph.input:
    print(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
assert [d.dim_param for d in onx.graph.input[0].type.tensor_type.shape.dim][:2] == ["batch", "seq"]
report = fx2onnx.validate(onx, model, inputs[1], atol=1e-5)
print(report)
assert report.ok, report

# %%
# The ONNX graph (:func:`fx2onnx.to_dot`): its inputs carry the inferred dimension names.

picture = GraphPicture(onx, title="Mix exported with the inferred dynamic shapes")
assert "batch" in picture.svg

# %%
# An int input whose value changes becomes ``Dim.DYNAMIC``; one which does
# not change is a constant (``None``).

print(fx2onnx.infer_dynamic_shapes(None, [(torch.randn(2, 3), 2), (torch.randn(4, 3), 5)]))
assert fx2onnx.infer_dynamic_shapes(None, [(torch.randn(2, 3), 2), (torch.randn(4, 3), 5)]) == (
    {0: Dim.DYNAMIC},
    Dim.DYNAMIC,
)

# %%
# A language model with a cache
# -----------------------------
#
# A ``DynamicCache`` is flattened the way torch.export sees it once registered
# as a pytree node: ``[key_0, value_0, key_1, value_1, ...]``. The inferred
# shapes have the structure of the ones written by hand for the tiny Llama;
# only the length of the attention mask (``past_seq + seq``) gets a name
# made from its input.

tiny = get_tiny_model("llama", with_cache=True, num_hidden_layers=2)
inferred = fx2onnx.infer_dynamic_shapes(tiny.model, [tiny.inputs, tiny.inputs2], style="string")
for name, value in inferred.items():
    print(f"{name:16} inferred {value}")
    print(f"{'':16} by hand  {tiny.dynamic_shapes[name]}")
assert export_dynamic_shapes(inferred) == export_dynamic_shapes(tiny.dynamic_shapes)
assert inferred["past_key_values"] == [{0: "batch", 2: "past_seq"}] * 4

with fx2onnx.torch_export_patches(patch_transformers=True):
    onx = fx2onnx.to_onnx(tiny.model, (), tiny.inputs, dynamic_shapes=inferred)
report = fx2onnx.validate(onx, tiny.model, (), tiny.inputs2)
print("second input set:", report)
assert report.ok, report
tiny.model.generation_config.eos_token_id = None  # and it generates transformers' greedy tokens
prompt = torch.tensor([[7, 21, 99, 4]])
expected = tiny.model.generate(
    prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=10, pad_token_id=0
)
assert torch.equal(fx2onnx.generate(onx, prompt, max_new_tokens=10), expected)

# %%
# Guessing has limits: a dimension which keeps the same size in every set is
# static, and two independent dimensions taking the same sizes share one name.
# Give sets in which every dynamic dimension changes, each differently, and
# none equals 0 or 1 (torch.export specializes those sizes).
