"""
.. _l-plot-torch-export-with-dynamic-cache-201:

Export a tiny Llama with a DynamicCache and run it on a growing cache
=====================================================================

A decoder of :epkg:`transformers` receives the keys and values of the tokens
already seen in a ``DynamicCache``. This example shows the error
:epkg:`torch.export` raises on such an input, exports the model with
:func:`torch.onnx.export` inside :func:`fx2onnx.torch_export_patches`, then
generates tokens with the ONNX model: every step feeds the cache returned by the
previous one, longer by one token, and is compared with eager PyTorch
(``atol=1e-4``). The example :ref:`l-plot-export-tiny-llm-patched` does the same
export with :func:`fx2onnx.to_onnx` for several architectures.

The model and its inputs
------------------------

A tiny Llama with two layers and random weights; the cache holds 5 tokens.
"""

import copy
import textwrap

import matplotlib.pyplot as plt
import onnxruntime
import torch
from transformers.cache_utils import DynamicCache

import fx2onnx
from fx2onnx.zoo import export_dynamic_shapes, get_tiny_model
from fx2onnx.validation import run_onnx

tiny = get_tiny_model("llama", with_cache=True, num_hidden_layers=2)
print(tiny)
print(tiny.dynamic_shapes)

# %%
# Without the patches
# -------------------
#
# :epkg:`torch.export` flattens the inputs into tensors before tracing. It does
# not know the class ``DynamicCache``, so it cannot match the dynamic shapes
# given for the cache with any tensor.

try:
    torch.export.export(
        tiny.model,
        (),
        kwargs=copy.deepcopy(tiny.inputs),
        dynamic_shapes=export_dynamic_shapes(tiny.dynamic_shapes),
        strict=False,
    )
    error = None
except Exception as e:
    error = e
    print(type(e).__module__, type(e).__name__)
    print(textwrap.fill(str(e).splitlines()[0], 100))
assert error is not None and "DynamicCache" in str(error)

# %%
# With the patches
# ----------------
#
# :func:`fx2onnx.torch_export_patches` registers the cache classes as pytree
# nodes (a cache flattens into ``[key_0, value_0, key_1, value_1]``) and patches
# the few functions of :epkg:`transformers` which :epkg:`torch.export` cannot
# trace. Everything is restored when the ``with`` block ends.

with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
    onx = torch.onnx.export(
        tiny.model,
        (),
        kwargs=modificator(copy.deepcopy(tiny.inputs)),
        dynamic_shapes=tiny.dynamic_shapes,
        dynamo=True,
        verbose=False,
    ).model_proto


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


for kind, values in [("input ", onx.graph.input), ("output", onx.graph.output)]:
    for value in values:
        print(kind, value.name, dims(value))

# %%
# The outputs are the logits and the new cache, one token longer per new token
# (``past_seq + seq``). :func:`fx2onnx.validate` compares the model with eager
# on the second set of inputs (other batch size, other lengths); it flattens the
# caches itself, no patch is needed here.

report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
print(report)
assert report.ok, report

# %%
# Generation: the cache grows
# ---------------------------
#
# Greedy decoding, one token per step: the ONNX model receives the cache it
# returned at the previous step. Each step is checked against eager with the
# same inputs and the tokens chosen by both must be the same.

session = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
inputs = copy.deepcopy(tiny.inputs)
input_ids = inputs["input_ids"]
pairs = [(layer.keys, layer.values) for layer in inputs["past_key_values"].layers]
batch = input_ids.shape[0]
past_lengths, max_diffs, generated = [], [], []
for step in range(20):
    past = pairs[0][0].shape[2]
    seq = input_ids.shape[1]
    step_inputs = {
        "input_ids": input_ids,
        "attention_mask": torch.ones((batch, past + seq), dtype=torch.int64),
        "position_ids": torch.arange(past, past + seq).expand(batch, -1).contiguous(),
        "past_key_values": DynamicCache(pairs, config=tiny.config),
    }
    report = fx2onnx.validate(session, tiny.model, (), step_inputs, atol=1e-4)
    assert report.ok, (step, report)
    with torch.no_grad():
        expected_logits = tiny.model(**copy.deepcopy(step_inputs)).logits
    logits, *present = (torch.from_numpy(a) for a in run_onnx(session, (), step_inputs))
    input_ids = logits[:, -1:].argmax(dim=-1)
    assert torch.equal(input_ids, expected_logits[:, -1:].argmax(dim=-1))
    pairs = list(zip(present[::2], present[1::2]))
    past_lengths.append(past)
    max_diffs.append(report.max_abs)
    generated.append(input_ids)

print("cache lengths:", past_lengths[0], "->", pairs[0][0].shape[2])
print("generated tokens:\n", torch.cat(generated, dim=1))
assert pairs[0][0].shape[2] == 5 + 3 + 19

# %%
# The discrepancies stay far below the tolerance while the cache grows from 5
# to 26 tokens: the graph does not depend on the length used at export time.

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(past_lengths, max_diffs, "o-", label="ONNX vs eager")
ax.axhline(1e-4, color="red", linestyle="--", label="atol")
ax.set_yscale("log")
ax.set_xlabel("past_seq (length of the cache given)")
ax.set_ylabel("max abs diff")
ax.set_title("tiny Llama, greedy decoding on onnxruntime")
ax.legend()
fig.tight_layout()
