"""
.. _l-plot-export-cache-sliding:

A cache of sliding layers only
==============================

A sliding layer keeps its last ``sliding_window - 1`` tokens but the masks and
positions depend on every token seen. Without a full-attention layer to read
that count from (a Mistral whose layers all slide), the flattening of the cache
adds one tensor, ``tokens_seen``, empty, of shape ``(0, count)``: an input and an
output of the ONNX model, fed back like the keys and values.
See :ref:`l-plot-export-cache-dynamic-shapes` for caches with full-attention layers.

The flattened cache
-------------------
"""

import matplotlib.pyplot as plt
import torch
from torch.utils import _pytree as pytree
from transformers.cache_utils import DynamicCache

import fx2onnx
from fx2onnx.zoo import get_tiny_model

generator = torch.Generator().manual_seed(0)
mistral = get_tiny_model("mistral", with_cache=True, num_hidden_layers=1, sliding_window=4)


def sliding_inputs(past, seq=2, batch=2):
    shape = (batch, 2, past, 8)
    pairs = [(torch.randn(shape, generator=generator), torch.randn(shape, generator=generator))]
    return {
        "input_ids": torch.randint(3, 128, (batch, seq), generator=generator),
        "attention_mask": torch.ones((batch, past + seq), dtype=torch.int64),
        "past_key_values": DynamicCache(pairs, config=mistral.config),  # keeps the last 3
    }


# %%
# One key, one value and ``tokens_seen``; the dynamic shapes give one spec per key
# and value, as for any decoder: the spec of ``tokens_seen`` is derived.

with fx2onnx.torch_export_patches(patch_transformers=True):
    inputs = sliding_inputs(10)
    print(
        [
            (pytree.keystr(p), tuple(t.shape))
            for p, t in pytree.tree_flatten_with_path(inputs["past_key_values"])[0]
        ]
    )
    shapes = {k: v for k, v in mistral.dynamic_shapes.items() if k in inputs}
    shapes["past_key_values"] = [{0: "batch", 2: "past_seq"}] * 2  # one spec per key and value

    onx = fx2onnx.to_onnx(mistral.model, (), kwargs=inputs, dynamic_shapes=shapes)
print(
    [
        (i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
        for i in onx.graph.input
    ]
)

# %%
# Shorter and longer than the window
# ----------------------------------
#
# Every cache length is compared with eager (``atol=1e-4``), on both sides of the window.

pasts, diffs = [1, 2, 3, 4, 6, 10, 20], []
with fx2onnx.torch_export_patches(patch_transformers=True):
    for past in pasts:
        report = fx2onnx.validate(onx, mistral.model, (), sliding_inputs(past), atol=1e-4)
        print(f"past_seq={past:2d}: {report}")
        assert report.ok, (past, report)
        diffs.append(report.max_abs)

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(pasts, diffs, "o-", label="max abs diff with eager")
ax.axvline(mistral.config.sliding_window, color="gray", linestyle=":", label="sliding window")
ax.axhline(1e-4, color="red", linestyle="--", label="atol")
ax.set_yscale("log")
ax.set_xlabel("cache length given (past_seq)")
ax.set_ylabel("max abs diff")
ax.set_title("ONNX model vs eager, both sides of the window")
ax.legend(fontsize=8)
fig.tight_layout()

# %%
# Generation past the window
# --------------------------
#
# With ``tokens_seen`` fed back like the keys and values, :func:`fx2onnx.generate`
# decodes past the window (12 new tokens, a window of 4) the tokens of
# transformers' greedy ``generate``.

mistral.model.generation_config.eos_token_id = None  # no early stop
prompt = torch.randint(3, 128, (1, 5), generator=generator)
expected = mistral.model.generate(
    prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=12, pad_token_id=0
)
got = fx2onnx.generate(onx, prompt, max_new_tokens=12)
print("transformers:  ", expected[0, 5:].tolist())
print("fx2onnx.generate:", got[0, 5:].tolist())
assert torch.equal(got, expected)
