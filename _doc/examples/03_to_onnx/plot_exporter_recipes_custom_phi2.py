"""
.. _l-plot-exporter-recipes-custom-phi2:

to_onnx and a phi-2 architecture with a cache
=============================================

`phi-2 <https://huggingface.co/microsoft/phi-2>`_ is a decoder whose layers run
attention and the MLP in parallel on the same normalized input, with a rotary
embedding applied to part of each head only (``partial_rotary_factor``). This
example builds the same architecture with a tiny configuration and random
weights (no download), exports it with its cache with :func:`fx2onnx.to_onnx`,
checks the ONNX model against eager PyTorch on inputs of other sizes
(``atol=1e-4``), then looks at the operators the graph contains.

The model
---------
"""

import collections
import copy
import time

import matplotlib.pyplot as plt
import torch

import fx2onnx
from fx2onnx.zoo import get_tiny_model

tiny = get_tiny_model("phi", with_cache=True, num_hidden_layers=2)
config = tiny.config
print(
    type(tiny.model).__name__, "layers:", config.num_hidden_layers, "hidden size:", config.hidden_size
)
print("rope:", config.rope_parameters, "head_dim:", config.hidden_size // config.num_attention_heads)
print(tiny)

# %%
# Export
# ------
#
# The cache is a ``DynamicCache``: :func:`fx2onnx.torch_export_patches` makes it
# an input :epkg:`torch.export` can flatten. The dynamic shapes name the
# dimensions; the ONNX model keeps these names. The outputs get readable names.

n_layers = config.num_hidden_layers
output_names = ["logits"] + [f"present_{kv}_{i}" for i in range(n_layers) for kv in ("key", "value")]


def export(optimize):
    with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
        return fx2onnx.to_onnx(
            tiny.model,
            (),
            kwargs=modificator(copy.deepcopy(tiny.inputs)),
            dynamic_shapes=tiny.dynamic_shapes,
            output_names=output_names,
            optimize=optimize,
        )


begin = time.perf_counter()
onx = export(optimize=True)
print(f"export: {time.perf_counter() - begin:.1f}s")


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


for value in onx.graph.input:
    print("input ", f"{value.name:25s}", dims(value))
for value in onx.graph.output:
    print("output", f"{value.name:25s}", dims(value))
assert [o.name for o in onx.graph.output] == output_names
assert dims(onx.graph.output[1]) == ["batch", 2, "past_seq+seq", 8]

# %%
# Validation
# ----------
#
# The second set of inputs has another batch size (3), more new tokens (4) and a
# longer cache (7). :func:`fx2onnx.validate` flattens the cache given as input
# and the one returned by eager, then compares every output.

print("inputs2:", tiny.inputs2["input_ids"].shape, tiny.inputs2["past_key_values"].layers[0].keys.shape)
report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
print(report)
for detail in report.details:
    print(
        f"  {output_names[detail['index']]:15s} shape={detail['shape']} max abs "
        f"diff={detail['abs']:.2g}"
    )
assert report.ok, report

# %%
# The outputs renamed, the generation loop still finds the cache: :func:`fx2onnx.generate`
# reads which output feeds which input from the model's metadata. It generates the
# tokens of transformers' greedy ``generate``.

tiny.model.generation_config.eos_token_id = None  # 16 new tokens, no early stop
prompt = torch.randint(3, config.vocab_size, (1, 5), generator=torch.Generator().manual_seed(0))
expected = tiny.model.generate(
    prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=16, pad_token_id=0
)
tokens = fx2onnx.generate(onx, prompt, max_new_tokens=16)
print("generated:", tokens[0, 5:].tolist())
assert torch.equal(tokens, expected)

# %%
# What the graph is made of
# -------------------------
#
# The optimizer folds constants and removes the operations the ONNX graph does
# not need. The unoptimized model is exported again to compare both: both must
# give the same results.

raw = export(optimize=False)
report_raw = fx2onnx.validate(raw, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
assert report_raw.ok, report_raw
counts = collections.Counter(node.op_type for node in onx.graph.node)
counts_raw = collections.Counter(node.op_type for node in raw.graph.node)
print(f"nodes: {len(raw.graph.node)} before optimization, {len(onx.graph.node)} after")
print(dict(counts.most_common()))

# %%
# The partial rotary embedding shows up as ``Slice`` and ``Concat`` (the rotated
# and the untouched halves of each head), the parallel blocks as a single
# ``LayerNormalization`` per layer feeding both attention and MLP.

assert counts["LayerNormalization"] == n_layers + 1  # one per layer and the final one

op_types = sorted(set(counts_raw) | set(counts), key=lambda op: -counts_raw.get(op, 0))
y = range(len(op_types))
fig, ax = plt.subplots(figsize=(7, 0.25 * len(op_types) + 1))
ax.barh(
    [i + 0.2 for i in y], [counts_raw.get(op, 0) for op in op_types], height=0.4, label="optimize=False"
)
ax.barh([i - 0.2 for i in y], [counts.get(op, 0) for op in op_types], height=0.4, label="optimize=True")
ax.set_yticks(list(y))
ax.set_yticklabels(op_types)
ax.invert_yaxis()
ax.set_xlabel("number of nodes")
ax.set_title("tiny phi-2 exported by fx2onnx.to_onnx")
ax.legend()
fig.tight_layout()
