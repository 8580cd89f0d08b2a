"""
.. _l-torch-aot-201:

aot_autograd: forward and backward graphs, training with eager, inductor and onnxruntime
========================================================================================

:func:`torch.compile` captures the Python code with dynamo; a backend receives an
FX graph of torch functions. For training, most backends hand it to *aot_autograd*:
it traces the model down to aten operators and splits it into a **forward** graph
(which also returns the tensors the backward needs) and a **backward** graph (which
takes those tensors and the gradient of the output). Inductor does it, and so does
:func:`fx2onnx.backend.make_onnxruntime_backend` which converts both graphs into ONNX.

This example prints the two graphs of a small regression model, then trains it for
a few steps with eager PyTorch, inductor and the onnxruntime backend, compares the
gradients with eager (``atol=1e-5``) and plots the time per step and the peak memory.

The two graphs
--------------

The loss is part of the module, so the compiled graph ends with a scalar. A
backend built with :func:`torch._dynamo.backends.common.aot_autograd` and two
compilers which only keep the graphs shows what aot_autograd produces.
"""

import copy
import statistics
import time

import matplotlib.pyplot as plt
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from fx2onnx.backend import make_onnxruntime_backend


class Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
        )

    def forward(self, x, y):
        return torch.nn.functional.mse_loss(self.net(x), y)


torch.manual_seed(0)
model, x, y = Regression(), torch.randn(128, 64), torch.randn(128, 1)

graphs = {}  # filled by the two compilers


def keep(kind):
    def compiler(gm, example_inputs):
        graphs[kind] = gm
        return make_boxed_func(gm.forward)

    return compiler


torch._dynamo.reset()  # forget what dynamo compiled before (other examples, other backends)
recording = torch.compile(
    copy.deepcopy(model), backend=aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"))
)
recording(x, y).backward()
print(graphs["fw"].code.strip())

# %%
# The forward graph takes the four weights and the two inputs in the order dynamo
# met them (``primals_3`` is ``x``, ``primals_6`` is ``y``); it returns the loss and
# the tensors the backward graph needs. The backward graph takes those saved tensors
# and ``tangents_1``, the gradient of the loss, and returns one gradient per input of
# the forward graph: ``None`` for ``x`` and ``y`` which do not require one.

print(graphs["bw"].code.strip())


fw_inputs, bw_inputs = [
    [n.name for n in graphs[k].graph.find_nodes(op="placeholder")] for k in ("fw", "bw")
]
print("forward inputs: ", fw_inputs, "\nbackward inputs:", bw_inputs)
assert fw_inputs == [f"primals_{i}" for i in range(1, 7)] and bw_inputs[-1] == "tangents_1", bw_inputs
fw_outputs, bw_outputs = [graphs[k].graph.find_nodes(op="output")[0].args[0] for k in ("fw", "bw")]
assert len(fw_outputs) == 1 + len(bw_inputs) - 1  # the loss and every saved tensor
assert len(bw_outputs) == 6 and bw_outputs[2] is None and bw_outputs[5] is None, bw_outputs

# %%
# Training with three backends
# ----------------------------
#
# Each backend trains its own copy of the same model: one first step (it includes
# the compilation), then a few timed steps whose median is kept. The peak memory is
# the process's peak resident memory (``VmHWM``, reset before each backend) above
# what it used before: the compilation counts. ``compile_threads=1`` keeps inductor
# from starting a pool of compilation processes on a small machine.


def rss_kb(field):
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith(field)).split()[1])


def train(name, module, steps=8):
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets the peak resident memory of this process
    before = rss_kb("VmRSS")
    times = []  # the first step compiles
    for step in range(steps + 1):
        begin = time.perf_counter()
        optimizer.zero_grad()
        module(x, y).backward()
        if step == 0:
            grads = [p.grad.clone() for p in module.parameters()]
        optimizer.step()
        times.append(time.perf_counter() - begin)
    peak, step = (rss_kb("VmHWM") - before) / 1024, statistics.median(times[1:])
    print(
        f"{name:>11}: first step {times[0] * 1e3:.1f} ms, median step {step * 1e3:.2f} ms, peak "
        f"+{peak:.1f} MiB"
    )
    return dict(first=times[0], step=step, peak=peak, grads=grads)


ort_backend, results = make_onnxruntime_backend(), {"eager": train("eager", copy.deepcopy(model))}
with torch._inductor.config.patch(compile_threads=1):
    results["inductor"] = train("inductor", torch.compile(copy.deepcopy(model), backend="inductor"))
results["onnxruntime"] = train("onnxruntime", torch.compile(copy.deepcopy(model), backend=ort_backend))

# %%
# The gradients of the first step are the same; the onnxruntime backend converted
# two graphs.

for name in ("inductor", "onnxruntime"):
    pairs = list(zip(results[name]["grads"], results["eager"]["grads"]))
    print(
        f"{name}: max gradient difference with eager "
        f"{max((a - b).abs().max().item() for a, b in pairs):.1e}"
    )
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in pairs), name
print(ort_backend.stats())
assert [r.name for r in ort_backend.runners] == ["g0_forward", "g1_backward"]

# %%
# Plot
# ----
#
# On such a small model the step time is mostly the overhead of the calls; the
# first step shows the cost of compiling (inductor generates and compiles C++): a
# log scale, eager's first step takes milliseconds. Eager compiles nothing and its
# tensors are small: its peak memory barely moves.

fig, axes = plt.subplots(3, 1, figsize=(7.4, 8))  # stacked: the page's width
titles = {
    "first": "first step, with compilation (ms)",
    "step": "median step (ms)",
    "peak": "peak memory above (MiB)",
}
for ax, (key, title) in zip(axes, titles.items()):
    values = [r[key] * (1 if key == "peak" else 1000) for r in results.values()]
    bars = ax.bar(list(results), values, color=["gray", "green", "blue"])
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_title(title)
    ax.set_yscale("log" if key == "first" else "linear")
fig.suptitle("Regression model, 128x64 inputs, SGD")
fig.tight_layout()
