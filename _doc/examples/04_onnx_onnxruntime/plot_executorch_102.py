"""
.. _l-plot-executorch-102:

Export to ExecuTorch and run it
===============================

:epkg:`ExecuTorch` is PyTorch's runtime for phones and embedded devices. Like the
ONNX exporters, it starts from the graph :func:`torch.export.export` captures, then

* :func:`executorch.exir.to_edge` converts it into the *edge dialect*: aten
  operators with stricter rules (``view`` becomes ``view_copy``, the weights of a
  linear layer get an explicit ``permute_copy``...),
* ``to_executorch()`` plans the memory and serializes a *program* (a ``.pte``
  flatbuffer) which the C++ runtime loads without Python.

This example lowers a small CNN with the portable operators (no delegate), saves the
program, runs it with the runtime's Python bindings and checks it matches eager
PyTorch within ``atol=1e-5``, then compares the latency. The runtime also ships the
XNNPACK delegate (``XnnpackPartitioner``); when this page was written, lowering this
small model to it took about 16 s of CPU on a small machine, mostly spent tracing the
patterns of its passes, so the page keeps to the portable operators.

The model and its export
------------------------
"""

import os
import shutil
import statistics
import tempfile
import time
import warnings

import matplotlib.pyplot as plt
import torch

warnings.filterwarnings("ignore")
from executorch.exir import to_edge  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3, padding=1),
    torch.nn.ReLU(),
    torch.nn.Flatten(),
    torch.nn.Linear(8 * 16 * 16, 10),
).eval()
torch.manual_seed(0)
x = torch.randn(2, 3, 16, 16)
exported = torch.export.export(model, (x,))
print(exported.graph_module.code.strip())

# %%
# The edge dialect
# ----------------
#
# Every aten operator becomes its edge counterpart; the weights stay parameters of
# the program.

edge = to_edge(exported)
edge_code = edge.exported_program().graph_module.code
print(edge_code.strip())
edge_ops = [n.target.__name__ for n in edge.exported_program().graph.nodes if n.op == "call_function"]
print(edge_ops)
assert "aten.convolution.default" in edge_ops and "aten.view_copy.default" in edge_ops, edge_ops

# %%
# The program
# -----------
#
# ``to_executorch()`` returns the serialized program; ``buffer`` holds the bytes of
# the ``.pte`` file.

program = edge.to_executorch()
folder = tempfile.mkdtemp(prefix="executorch_")
pte = os.path.join(folder, "cnn.pte")
with open(pte, "wb") as f:
    f.write(program.buffer)
n_weights = sum(p.numel() for p in model.parameters())
print(
    f"{os.path.basename(pte)}: {os.path.getsize(pte)} bytes for {n_weights} float weights "
    f"({n_weights * 4} bytes)"
)
assert os.path.getsize(pte) > n_weights * 4

# %%
# Run it
# ------
#
# :class:`executorch.runtime.Runtime` loads the program, then a method
# (``forward``), whose metadata gives the expected inputs: the shapes are static,
# the ones of the export.

runtime = Runtime.get()
backends = runtime.backend_registry.registered_backend_names
print("backends registered in the runtime:", backends)
assert "XnnpackBackend" in backends
loaded = runtime.load_program(pte)
method = loaded.load_method("forward")
print(method.metadata)
got = method.execute([x])[0]
with torch.no_grad():
    expected = model(x)
diff = (got - expected).abs().max().item()
print(f"max difference with eager: {diff:.1e}")
assert got.shape == expected.shape and diff < 1e-5, diff

# %%
# Other inputs of the same shape give the same results as eager too.

for _ in range(3):
    xi = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(method.execute([xi])[0], model(xi), atol=1e-5, rtol=1e-4)

# %%
# Latency
# -------
#
# Median of a few calls, one thread for torch (its setting is restored after). The
# portable operators are simple reference kernels, eager PyTorch uses optimized
# ones.


def median_ms(fn, repeat=20):
    fn()
    times = []
    for _ in range(repeat):
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
    return statistics.median(times) * 1000


threads = torch.get_num_threads()
torch.set_num_threads(1)
with torch.no_grad():
    latency = {
        "eager": median_ms(lambda: model(x)),
        "ExecuTorch (portable)": median_ms(lambda: method.execute([x])),
    }
torch.set_num_threads(threads)
for name, value in latency.items():
    print(f"{name:>22}: {value:.3f} ms")
assert all(v > 0 for v in latency.values())

fig, ax = plt.subplots(figsize=(5, 3))
ax.bar(list(latency), list(latency.values()), color=["tab:gray", "tab:purple"])
ax.set_ylabel("median latency (ms)")
ax.set_title("small CNN, 2x3x16x16")
fig.tight_layout()
shutil.rmtree(folder)  # the temporary folder
