"""
.. _l-plot-torch-dort-201:

Training a tiny Llama with forward and backward on onnxruntime
==============================================================

With :func:`torch.compile`, the backend receives the graphs of the forward and
of the backward pass (aot_autograd computes the backward graph). The backend
:func:`fx2onnx.backend.make_onnxruntime_backend` converts both into ONNX and
runs them with :epkg:`onnxruntime`; the optimizer stays in PyTorch. This example
trains two copies of a tiny Llama for a few steps, one in eager mode and one
compiled, plots both loss curves and checks the losses match within ``1e-4``
and the gradients of the first step within ``atol=1e-4, rtol=1e-3``.

Two identical models
--------------------

The tiny Llama is built from a configuration (one layer, hidden size 32,
random weights). The loss (cross entropy over the next token) is computed
inside the model when ``labels`` is given, so it is part of the compiled graph.
"""

import copy
import os
import shutil
import tempfile

import matplotlib.pyplot as plt
import onnx
import torch

import fx2onnx
from fx2onnx.backend import make_onnxruntime_backend
from fx2onnx.zoo import get_tiny_model

tiny = get_tiny_model("llama")
eager_model = tiny.model.train()
compiled_source = copy.deepcopy(eager_model)

backend = make_onnxruntime_backend()
compiled_model = torch.compile(compiled_source, backend=backend)

torch.manual_seed(0)
# two batches seen five times each: the model learns them by heart, the loss goes down
batches = [torch.randint(3, tiny.config.vocab_size, (2, 12)) for _ in range(2)] * 5

# %%
# The training loop
# -----------------
#
# The same loop runs both models. Every ONNX model the backend builds while
# :func:`fx2onnx.dump_onnx` is active is saved with the FX graph it comes from.


def train(model, steps, record_grads=None):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for i, input_ids in enumerate(batches[:steps]):
        optimizer.zero_grad()
        loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        if i == 0 and record_grads is not None:
            # a compiled model prefixes the names with "_orig_mod."
            record_grads.update(
                {n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters()}
            )
        optimizer.step()
        losses.append(loss.item())
    return losses


dump_folder = tempfile.mkdtemp(prefix="dort_")
eager_grads, compiled_grads = {}, {}
eager_losses = train(eager_model, len(batches), eager_grads)
with fx2onnx.dump_onnx("llama", folder=dump_folder) as dumped:
    compiled_losses = train(compiled_model, len(batches), compiled_grads)

for step, (a, b) in enumerate(zip(eager_losses, compiled_losses)):
    print(f"step {step}: eager {a:.5f}  onnxruntime {b:.5f}  diff {abs(a - b):.1e}")

# %%
# The losses and the gradients of the first step match.

max_loss_diff = max(abs(a - b) for a, b in zip(eager_losses, compiled_losses))
assert max_loss_diff < 1e-4, max_loss_diff
for name, grad in eager_grads.items():
    torch.testing.assert_close(compiled_grads[name], grad, atol=1e-4, rtol=1e-3)
max_grad_diff = max((compiled_grads[n] - g).abs().max().item() for n, g in eager_grads.items())
print(f"max loss difference {max_loss_diff:.1e}, max gradient difference (step 0) {max_grad_diff:.1e}")

# %%
# What the backend did
# --------------------
#
# Two graphs (forward, backward), each converted once, one session each, reused
# at every step.

print(backend.stats())
for runner in backend.runners:
    print(
        f"{runner.name}: {len(runner.gm.graph.nodes)} FX nodes -> {runner.node_count} ONNX nodes, "
        f"calls={runner.n_calls}"
    )
assert backend.stats()["graphs"] == 2 and backend.stats()["sessions"] == 2

# %%
# The dumped models, with their number of nodes and the most frequent operators.
# The backward graph holds the gradients of the weights: ``MatMul`` and ``Transpose``
# for the linear layers, ``ScatterND`` for the embedding.

for path in sorted(dumped):
    if path.endswith(".onnx"):
        onx = onnx.load(path)
        ops = {}
        for node in onx.graph.node:
            ops[node.op_type] = ops.get(node.op_type, 0) + 1
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:6]
        print(
            f"{os.path.basename(path)}: {len(onx.graph.node)} nodes, {len(onx.graph.input)} inputs, "
            f"top ops {top}"
        )
    else:
        with open(path) as f:
            print(f"{os.path.basename(path)}: FX graph, {len(f.read().splitlines())} lines")
assert len([p for p in dumped if p.endswith(".onnx")]) == 2

# %%
# Loss curves
# -----------
#
# Both curves are on top of each other.

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(eager_losses, marker="o", label="eager")
ax.plot(compiled_losses, marker="x", linestyle="--", label="torch.compile, onnxruntime backend")
ax.set_xlabel("step")
ax.set_ylabel("loss")
ax.set_title("tiny Llama, AdamW, same initial weights")
ax.legend()
fig.tight_layout()
shutil.rmtree(dump_folder)  # the temporary folder
