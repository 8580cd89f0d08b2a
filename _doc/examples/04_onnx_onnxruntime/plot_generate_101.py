"""
.. _l-plot-generate-101:

Generate text with an exported LLM on onnxruntime
=================================================

An LLM exported with its cache is judged by one thing: does it generate the same
tokens as :epkg:`transformers`. :func:`fx2onnx.generate` runs greedy decoding on
:epkg:`onnxruntime`: a first call on the prompt with an empty cache, then one call
per new token, the present keys and values of a call fed back as the past of the
next one. The cache never leaves onnxruntime's memory (the values onnxruntime
returns are fed back as they are). This example
exports a tiny Llama, generates 20 tokens for two prompts, one of them left padded,
and compares every token and the speed with ``model.generate(do_sample=False)``.

Export with a cache
-------------------
"""

import copy
import time

import matplotlib.pyplot as plt
import onnx
import onnxruntime
import torch

import fx2onnx
from fx2onnx.zoo import get_tiny_model
from fx2onnx.runtime import OnnxGenerator

tiny = get_tiny_model("llama", with_cache=True, num_hidden_layers=2)
model = tiny.model
model.generation_config.eos_token_id = None  # 20 tokens, no early stop
with fx2onnx.torch_export_patches(patch_transformers=True):
    onx = fx2onnx.to_onnx(
        model, (), kwargs=copy.deepcopy(tiny.inputs), dynamic_shapes=tiny.dynamic_shapes
    )

# %%
# :func:`fx2onnx.to_onnx` writes which output holds the next value of each cache
# input: an output at the same place in the returned structure as an input
# (``past_key_values.key_0``). The generation loop reads it from the metadata.

for prop in onx.metadata_props:
    if prop.key == "fx2onnx.cache":
        print(prop.value)
print([i.name for i in onx.graph.input])
print([o.name for o in onx.graph.output])

# %%
# Generate
# --------
#
# Two prompts of six tokens; the second one is three tokens long, left padded, as
# transformers expects for decoders: the mask holds 0 for the pads and the
# positions start at its first real token.

generator = torch.Generator().manual_seed(0)
input_ids = torch.randint(3, 128, (2, 6), generator=generator)
attention_mask = torch.ones_like(input_ids)
attention_mask[1, :3] = 0
input_ids[1, :3] = 0

tokens = fx2onnx.generate(onx, input_ids, 20, attention_mask=attention_mask)
with torch.no_grad():
    expected = model.generate(
        input_ids, attention_mask=attention_mask, do_sample=False, max_new_tokens=20, pad_token_id=0
    )
print("fx2onnx.generate:")
print(tokens[:, 6:])
print("transformers:")
print(expected[:, 6:])

# %%
# Token by token, both agree.

same = (tokens == expected)[:, 6:]
print(f"{int(same.sum())} of {same.numel()} new tokens are equal")
assert tokens.shape == expected.shape == (2, 26)
assert same.all()

# %%
# Speed and the cost of the loop
# ------------------------------
#
# :class:`fx2onnx.runtime.OnnxGenerator` keeps a session (here one thread, as torch)
# for many generations and records where the time went: the calls to onnxruntime and
# the rest of the loop (the inputs of a step, reading the next token: the argmax of
# the last logits is added to the graph when the generator creates the session).
# The difference per token is the overhead of the loop. Each timing is the best of
# seven runs.


def best_time(fn, repeat=7):
    times = []
    for _ in range(repeat):
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
    return min(times)


torch.set_num_threads(1)
options = onnxruntime.SessionOptions()
options.intra_op_num_threads = 1
onnx_generator = OnnxGenerator(onx, session_options=options)
runs = []


def generate_and_keep_times():
    onnx_generator.generate(input_ids, 20, attention_mask)
    runs.append(onnx_generator.last_times)


onnx_time = best_time(generate_and_keep_times)
with torch.no_grad():
    eager_time = best_time(
        lambda: model.generate(
            input_ids, attention_mask=attention_mask, do_sample=False, max_new_tokens=20, pad_token_id=0
        )
    )
speeds = {"transformers": 20 / eager_time, "fx2onnx.generate": 20 / onnx_time}
for name, speed in speeds.items():
    print(f"{name:>17}: {speed:7.0f} tokens/s (batch 2: {2 * speed:.0f} sequence tokens/s)")

times = min(runs, key=lambda t: t.decode_total)
per_step = times.decode_total / times.decode_steps
per_model = times.decode_model / times.decode_steps
print(
    f"decode step: {per_step * 1e6:.0f} us, model {per_model * 1e6:.0f} us, "
    f"loop overhead {times.overhead_per_token * 1e6:.0f} us per token ({times.overhead_share:.1%})"
)
assert 0 < times.overhead_share < 1
assert onnx.checker.check_model(onx) is None

# %%
# The step of the tiny model is short: the microseconds the loop adds weigh more
# here than beside the milliseconds of a real LLM's step (``bench/bench_generate.py``
# measures a few percent on the benchmark Llama, hidden size 512 and 32000 tokens).

fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
ax[0].bar(list(speeds), list(speeds.values()), color=["#8172b2", "#55a868"])
ax[0].set_ylabel("new tokens per second")
ax[0].set_title("greedy generation, 20 tokens, batch 2")
ax[1].bar(["decode step"], [per_model * 1e6], label="onnxruntime run", color="#4c72b0")
ax[1].bar(
    ["decode step"],
    [(per_step - per_model) * 1e6],
    bottom=[per_model * 1e6],
    label="loop",
    color="#dd8452",
)
ax[1].set_ylabel("microseconds per step")
ax[1].set_title("one decode step: onnxruntime and the loop")
ax[1].legend()
fig.tight_layout()
