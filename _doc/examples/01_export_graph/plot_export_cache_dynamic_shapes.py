"""
.. _l-plot-export-cache-dynamic-shapes:

Dynamic shapes for a cache
==========================

Once :func:`fx2onnx.torch_export_patches` (or
:func:`fx2onnx.register_cache_serialization`) has registered the cache classes of
:epkg:`transformers` as pytree nodes, ``dynamic_shapes`` describes a cache like
any list: one entry per flattened tensor, ``[key_0, value_0, key_1, value_1, ...]``.
This example exports a two-layer Gemma2, whose layers alternate sliding-window
and full attention, then runs the ONNX model on caches of many lengths and
compares every result with eager PyTorch (``atol=1e-4``).

How a cache flattens
--------------------
"""

import copy
import time

import matplotlib.pyplot as plt
import onnxruntime
import torch
from torch.utils import _pytree as pytree
from transformers.cache_utils import DynamicCache

import fx2onnx
from fx2onnx.zoo import get_tiny_model

tiny = get_tiny_model("gemma2", with_cache=True, num_hidden_layers=2)
cache = tiny.inputs["past_key_values"]
print([type(layer).__name__ for layer in cache.layers])

with fx2onnx.torch_export_patches(patch_torch=False):
    leaves, spec = pytree.tree_flatten_with_path(cache)
for path, leaf in leaves:
    print(f"{pytree.keystr(path):12s} {tuple(leaf.shape)}")

# %%
# The dynamic shapes of the cache follow the same order: dimension 0 is the
# batch, dimension 2 the length of the cache.

print(tiny.dynamic_shapes["past_key_values"])
assert len(tiny.dynamic_shapes["past_key_values"]) == len(leaves) == 4

# %%
# A cache in the legacy format
# ----------------------------
#
# Older code gives the cache as a list of ``(key, value)`` pairs. The object the
# context manager returns converts it into a ``DynamicCache``.

legacy = [(layer.keys, layer.values) for layer in cache.layers]
with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
    converted = modificator(dict(tiny.inputs, past_key_values=legacy))
    print(type(converted["past_key_values"]).__name__)
    onx = fx2onnx.to_onnx(
        tiny.model, (), kwargs=copy.deepcopy(converted), dynamic_shapes=tiny.dynamic_shapes
    )
print(
    [
        (i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
        for i in onx.graph.input
    ]
)

# %%
# Many cache lengths
# ------------------
#
# The exported model takes any batch size, number of new tokens and cache
# length. The sliding window of the tiny Gemma2 is 32 tokens: the loop stays
# below it (a sliding layer keeps at most ``sliding_window - 1`` tokens).
# Every run is compared with eager.


def timeit(fn, repeat=10):
    with torch.no_grad():
        begin = time.perf_counter()
        for _ in range(repeat):
            fn()
    return (time.perf_counter() - begin) / repeat


session = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
generator = torch.Generator().manual_seed(0)
batch, seq = 2, 3
lengths, onnx_times, eager_times, max_diffs = [], [], [], []
for past in [2, 4, 8, 12, 16, 20, 24, 28]:
    shape = (batch, 2, past, 8)
    pairs = [
        (torch.randn(shape, generator=generator), torch.randn(shape, generator=generator))
        for _ in range(2)
    ]
    inputs = {
        "input_ids": torch.randint(3, 128, (batch, seq), generator=generator),
        "attention_mask": torch.ones((batch, past + seq), dtype=torch.int64),
        "position_ids": torch.arange(past, past + seq).expand(batch, -1).contiguous(),
        "past_key_values": DynamicCache(pairs, config=tiny.config),
    }
    with fx2onnx.torch_export_patches(patch_torch=False):
        # validate copies the inputs: the eager forward updates a cache in place
        report = fx2onnx.validate(session, tiny.model, (), inputs, atol=1e-4)
        # the ONNX inputs are the flattened tensors, in the same order
        names = [i.name for i in session.get_inputs()]
        feeds = {n: t.numpy() for n, t in zip(names, pytree.tree_leaves(inputs))}
        eager_times.append(timeit(lambda: tiny.model(**copy.deepcopy(inputs))))
    assert report.ok, (past, report)
    onnx_times.append(timeit(lambda: session.run(None, feeds)))
    lengths.append(past)
    max_diffs.append(report.max_abs)
    print(f"past_seq={past:2d}: {report}")

# %%
# The plot shows the time of one call with both runtimes (a tiny model: the
# overhead dominates) and the discrepancies, all below the tolerance.

fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
ax[0].plot(lengths, [t * 1000 for t in eager_times], "o-", label="eager")
ax[0].plot(lengths, [t * 1000 for t in onnx_times], "o-", label="onnxruntime")
ax[0].set_xlabel("past_seq")
ax[0].set_ylabel("ms per call")
ax[0].legend()
ax[1].plot(lengths, max_diffs, "o-")
ax[1].axhline(1e-4, color="red", linestyle="--", label="atol")
ax[1].set_yscale("log")
ax[1].set_xlabel("past_seq")
ax[1].set_title("max abs diff with eager")
ax[1].legend()
fig.tight_layout()

# %%
# A cache of sliding layers only, which carries one more tensor, is the subject of
# :ref:`l-plot-export-cache-sliding`.
