"""
.. _l-plot-export-tiny-llm-patched:

Export a tiny LLM with its cache, thanks to the patches
========================================================

A decoder model of :epkg:`transformers` takes a cache (``past_key_values``, a
``DynamicCache``) holding the keys and values of the tokens already seen.
:epkg:`torch.export` cannot take it as it is: the cache is not a structure it
knows how to flatten. :func:`fx2onnx.torch_export_patches` registers it (and
patches what else is needed) for the time of the export. The exported model is
then checked against eager PyTorch on :epkg:`onnxruntime` with inputs of other
sizes (``atol=1e-4``) and generates the tokens transformers generates.

The model
---------

A tiny Llama built from a configuration in code, with random weights:
one layer, a hidden size of 32. :func:`fx2onnx.zoo.get_tiny_model` also
returns two sets of inputs and the dynamic shapes.
"""

import copy
import time

import matplotlib.pyplot as plt
import torch

import fx2onnx
from fx2onnx.zoo import export_dynamic_shapes, get_tiny_model

tiny = get_tiny_model("llama", with_cache=True)
print(tiny)
print("dynamic shapes:", tiny.dynamic_shapes)

# %%
# Without the patches
# -------------------
#
# :epkg:`torch.export.export` needs the cache to be a pytree node to flatten it.

try:
    torch.export.export(
        tiny.model,
        (),
        kwargs=copy.deepcopy(tiny.inputs),
        dynamic_shapes=export_dynamic_shapes(tiny.dynamic_shapes),
        strict=False,
    )
    error = None
except Exception as e:  # the type depends on the torch version: the message names the cache
    error = e
    print(type(e).__name__, ":", str(e).split("\n")[0][:200])
assert error is not None and "DynamicCache" in str(error), error

# %%
# With the patches
# ----------------
#
# ``modificator`` converts the inputs if needed (a cache given as a list of
# ``(key, value)`` pairs becomes a ``DynamicCache``); ``reports`` tells which
# patches were applied. The model is exported by :func:`fx2onnx.to_onnx`.

begin = time.perf_counter()
with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
    onx = fx2onnx.to_onnx(
        tiny.model,
        (),
        kwargs=modificator(copy.deepcopy(tiny.inputs)),
        dynamic_shapes=tiny.dynamic_shapes,
    )
    for report in modificator.reports:
        print(f"{report.kind:13s} {report.name:35s} {report.status}")
print(f"export: {time.perf_counter() - begin:.1f}s")

# %%
# The inputs and outputs of the ONNX model keep the names of the dimensions.


def shape(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


for value in onx.graph.input:
    print("input ", value.name, shape(value))
for value in onx.graph.output:
    print("output", value.name, shape(value))

# %%
# Check on onnxruntime
# --------------------
#
# The second set of inputs has another batch size, another number of new tokens
# and a longer cache. The eager model runs unpatched: only the cache registration
# is needed to flatten the inputs (``patch_torch=False``).

with fx2onnx.torch_export_patches(patch_torch=False):
    report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(tiny.inputs2), atol=1e-4)
print(report)
assert report.ok, report

# %%
# Generate
# --------
#
# :func:`fx2onnx.generate` decodes greedily with the ONNX model on onnxruntime (the
# prompt with an empty cache, then one call per token, each step's cache fed back
# as the next past): the tokens are those of transformers' ``generate(do_sample=False)``.

prompt = torch.randint(3, tiny.config.vocab_size, (1, 6), generator=torch.Generator().manual_seed(1))


def greedy(model):  # transformers, 12 new tokens (the eos is disabled: no early stop)
    model.generation_config.eos_token_id = None
    return model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        max_new_tokens=12,
        pad_token_id=0,
    )


expected, tokens = greedy(tiny.model), fx2onnx.generate(onx, prompt, max_new_tokens=12)
print("transformers:", expected[0, 6:].tolist())
print("fx2onnx     :", tokens[0, 6:].tolist())
assert torch.equal(tokens, expected)

# %%
# The same for other decoder models
# ---------------------------------
#
# Every tiny decoder model goes the same way, and generates transformers' tokens;
# the plot shows the export time and the largest difference with eager for each of them.

names, durations, diffs = [], [], []
for name in ["mistral", "qwen2", "phi", "phi3", "gemma"]:
    other = get_tiny_model(name, with_cache=True)
    begin = time.perf_counter()
    with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
        model_proto = fx2onnx.to_onnx(
            other.model,
            (),
            kwargs=modificator(copy.deepcopy(other.inputs)),
            dynamic_shapes=other.dynamic_shapes,
        )
    durations.append(time.perf_counter() - begin)
    with fx2onnx.torch_export_patches(patch_torch=False):
        rep = fx2onnx.validate(model_proto, other.model, (), copy.deepcopy(other.inputs2), atol=1e-4)
    assert rep.ok, (name, rep)
    assert torch.equal(fx2onnx.generate(model_proto, prompt, max_new_tokens=12), greedy(other.model)), (
        name
    )
    names.append(name)
    diffs.append(rep.max_abs)
    print(f"{name:8s} export {durations[-1]:.1f}s  {rep}")

fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
ax[0].bar(names, durations)
ax[0].set_title("export time (s)")
ax[1].bar(names, diffs)
ax[1].axhline(1e-4, color="#c44e52", linestyle="--", label="tolerance 1e-4")
ax[1].set_ylim(0, 1.2e-4)
ax[1].set_title("max abs diff with eager (inputs2)")
ax[1].legend()
fig.tight_layout()
