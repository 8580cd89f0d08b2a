"""
.. _l-plot-exporter-recipes-onnx_exporter-phi2:

torch.onnx.export and a phi-2 architecture with a cache
=======================================================

`phi-2 <https://huggingface.co/microsoft/phi-2>`_ is a decoder whose layers run
attention and the MLP in parallel on the same normalized input, with a rotary
embedding applied to part of each head only. This example builds that architecture
with a tiny configuration and random weights (no download), exports it with its
``DynamicCache`` with ``torch.onnx.export(..., dynamo=True)`` inside
:func:`fx2onnx.torch_export_patches`, and checks the ONNX model against eager
PyTorch on inputs of other batch size, sequence length and cache length.

The model and its inputs
------------------------
"""

import collections
import copy
import time

import matplotlib.pyplot as plt
import torch

import fx2onnx
from fx2onnx.zoo import get_tiny_model, list_tiny_models

print(list_tiny_models())
tiny = get_tiny_model("phi", with_cache=True, num_hidden_layers=2)
print(
    type(tiny.model).__name__,
    "hidden size:",
    tiny.config.hidden_size,
    "layers:",
    tiny.config.num_hidden_layers,
)
print(tiny)
print("dynamic shapes:", tiny.dynamic_shapes)

# %%
# Export
# ------
#
# :epkg:`torch.export` does not know the class ``DynamicCache``:
# :func:`fx2onnx.torch_export_patches` registers it as a pytree node (a cache
# flattens into ``[key_0, value_0, key_1, value_1]``) and patches what
# :epkg:`transformers` does that torch.export cannot trace. ``modificator``
# converts the inputs if needed. Everything is restored when the block ends.
# ``output_names`` names the outputs.

n_layers = tiny.config.num_hidden_layers
output_names = ["logits"] + [f"present_{kv}_{i}" for i in range(n_layers) for kv in ("key", "value")]
begin = time.perf_counter()
with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
    onnx_program = torch.onnx.export(
        tiny.model,
        (),
        kwargs=modificator(copy.deepcopy(tiny.inputs)),
        dynamic_shapes=tiny.dynamic_shapes,
        dynamo=True,
        output_names=output_names,
        verbose=False,
    )
print(f"export: {time.perf_counter() - begin:.1f}s")
onx = onnx_program.model_proto


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


for kind, values in [("input ", onx.graph.input), ("output", onx.graph.output)]:
    for value in values:
        print(kind, f"{value.name:25s}", dims(value))

# %%
# The dimension names given in the dynamic shapes are kept: the cache grows from
# ``past_seq`` to ``past_seq + seq``.

assert [o.name for o in onx.graph.output] == output_names
assert len(onx.graph.input) == 3 + 2 * n_layers  # input_ids, attention_mask, position_ids, the cache
assert len(onx.graph.output) == 1 + 2 * n_layers  # logits and the new cache
assert dims(onx.graph.input[0]) == ["batch", "seq"]
assert dims(onx.graph.input[3])[:3] == ["batch", tiny.config.num_key_value_heads, "past_seq"]
assert dims(onx.graph.output[1])[2] == "past_seq + seq"

# %%
# Validation on other shapes
# --------------------------
#
# The second set of inputs has another batch size, more new tokens and a longer
# cache. :func:`fx2onnx.validate` flattens the caches and compares every output.

for name, inputs in [("inputs", tiny.inputs), ("inputs2", tiny.inputs2)]:
    cache = inputs["past_key_values"].layers[0].keys
    print(f"{name}: input_ids {tuple(inputs['input_ids'].shape)}, cache {tuple(cache.shape)}")
    report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(inputs), atol=1e-4)
    print("   ", report)
    assert report.ok, report
assert tiny.inputs2["input_ids"].shape != tiny.inputs["input_ids"].shape

# %%
# The operators
# -------------
#
# ``torch.onnx.export`` already ran its optimizer (``optimize=True`` is the default):
# constants are folded and the parallel attention and MLP blocks share one
# ``LayerNormalization`` per layer. The partial rotary embedding shows up as
# ``Slice`` and ``Concat`` (the rotated and the untouched parts of each head).

counts = collections.Counter(n.op_type for n in onx.graph.node)
print(f"{len(onx.graph.node)} nodes:", dict(counts.most_common()))
assert counts["LayerNormalization"] == n_layers + 1, counts  # one per layer and the final one
op_types = sorted(counts, key=lambda op: -counts[op])
fig, ax = plt.subplots(figsize=(6, 0.22 * len(op_types) + 1))
ax.barh(op_types, [counts[op] for op in op_types])
ax.invert_yaxis()
ax.set_xlabel("number of nodes")
ax.set_title("tiny phi-2 exported by torch.onnx.export")
fig.tight_layout()
