"""
.. _l-plot-custom-backend:

A torch.compile backend running on onnxruntime
==============================================

:func:`torch.compile` captures a model into FX graphs with dynamo and hands each
graph to a *backend*. The backend :data:`fx2onnx.backend.onnxruntime_backend`
lowers every graph to aten operators (aot_autograd), converts it into ONNX with
fx2onnx's converters and runs it with :epkg:`onnxruntime`. This example compiles
a small model with a graph break, prints the graphs the backend received and the
ONNX models it built, and checks the outputs match eager PyTorch within ``atol=1e-5``.

A model with a graph break
--------------------------

``torch._dynamo.graph_break()`` stands for any Python code dynamo cannot capture
(a ``print``, a call to numpy...): dynamo splits the model into two graphs, runs
what is between them in Python and calls the backend once per graph.
"""

import time

import matplotlib.pyplot as plt
import torch

from fx2onnx.backend import make_onnxruntime_backend


class TwoParts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32)
        )
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = self.encoder(x)
        torch._dynamo.graph_break()
        return torch.softmax(self.head(h), dim=-1)


torch.manual_seed(0)
model = TwoParts().eval()
x = torch.randn(8, 16)

# %%
# Compile and run
# ---------------
#
# ``make_onnxruntime_backend`` sets the options; ``verbose=1`` prints every
# conversion. ``dynamic=True`` keeps the batch dimension symbolic in the ONNX
# models, so another batch size reuses the same onnxruntime session.

backend = make_onnxruntime_backend(dynamic=True, verbose=1)
compiled = torch.compile(model, backend=backend, dynamic=True)

with torch.no_grad():
    got = compiled(x)
    expected = model(x)
diff = (got - expected).abs().max().item()
print(f"max absolute difference with eager: {diff:.2e}")
assert diff < 1e-5, diff

# %%
# The graphs the backend received
# -------------------------------
#
# Each :class:`fx2onnx.backend.GraphRunner` keeps the aten graph it converted and
# the ONNX model it built from it. The placeholders include the weights: a
# backend sees them as inputs.

for runner in backend.runners:
    print(f"--- {runner.name}: {len(runner.gm.graph.nodes)} FX nodes")
    print(runner.gm.code.strip())

# %%
# And the ONNX models. Symbolic dimensions (``s...``) come from dynamo.

for runner in backend.runners:
    graph = runner.model.graph
    print(f"--- {runner.name}: {len(graph)} ONNX nodes")
    print("inputs: ", [(i.name, str(i.shape)) for i in graph.inputs])
    print("ops:    ", [node.op_type for node in graph])

# %%
# Sessions are cached
# -------------------
#
# Other batch sizes reuse the sessions: no new conversion, no new session
# (a batch of 1 would make dynamo compile again: it specializes sizes 0 and 1).

timings = {"eager": [], "onnxruntime backend": []}
with torch.no_grad():
    for batch in (2, 4, 16, 64, 256):
        xb = torch.randn(batch, 16)
        for name, fn in (("eager", model), ("onnxruntime backend", compiled)):
            begin = time.perf_counter()
            for _ in range(5):
                y = fn(xb)
            timings[name].append((time.perf_counter() - begin) / 5)
        diff = (compiled(xb) - model(xb)).abs().max().item()
        assert diff < 1e-5, (batch, diff)

print(backend.stats())
assert backend.stats()["sessions"] == 2  # one per graph
assert backend.stats()["cache_hits"] > 0

# %%
# Time per call. On such a tiny model the
# cost is dominated by the calls, not by the computation.

fig, ax = plt.subplots(figsize=(6, 3))
for name, values in timings.items():
    ax.plot([2, 4, 16, 64, 256], [v * 1000 for v in values], marker="o", label=name)
ax.set_xscale("log")
ax.set_xlabel("batch size")
ax.set_ylabel("ms per call")
ax.set_title("TwoParts: eager vs torch.compile(backend=onnxruntime)")
ax.legend()
fig.tight_layout()
