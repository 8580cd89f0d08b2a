"""
.. _l-plot-convolution-matmul-102:

Convolution or im2col + MatMul?
===============================

A 2D convolution is a matrix multiplication in disguise: *im2col* copies every
``k x k`` patch of the image into a column, then one ``MatMul`` by the flattened
kernel computes every output pixel at once. Libraries use that trick or smarter
ones (Winograd, direct kernels). This example writes im2col with padding and
slices, checks it matches :class:`torch.nn.Conv2d` (``atol=1e-4``), exports both
models with :func:`fx2onnx.to_onnx` and times them over a few image sizes in
PyTorch and in :epkg:`onnxruntime`.

Two models, the same weights
----------------------------
"""

import statistics
import time

import matplotlib.pyplot as plt
import numpy as np
import onnxruntime
import torch

import fx2onnx


class Im2ColConv(torch.nn.Module):
    """The convolution of ``conv`` (stride 1, same padding) as im2col + MatMul."""

    def __init__(self, conv: torch.nn.Conv2d):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        n, c, h, w = x.shape
        k, p = self.conv.kernel_size[0], self.conv.padding[0]
        padded = torch.nn.functional.pad(x, (p, p, p, p))
        patches = [padded[:, :, i : i + h, j : j + w] for i in range(k) for j in range(k)]
        cols = torch.stack(patches, dim=2).reshape(n, c * k * k, h * w)  # the im2col matrix
        out = self.conv.weight.flatten(1) @ cols + self.conv.bias[:, None]
        return out.reshape(n, -1, h, w)


torch.manual_seed(0)
conv = torch.nn.Conv2d(16, 32, 3, padding=1).eval()
im2col = Im2ColConv(conv).eval()
x = torch.randn(2, 16, 24, 24)
with torch.no_grad():
    diff = (conv(x) - im2col(x)).abs().max().item()
print(f"max difference Conv2d vs im2col + MatMul: {diff:.1e}")
assert diff < 1e-4

# %%
# Export
# ------
#
# Batch, height and width are dynamic, one model serves every size. The
# convolution becomes one ``Conv`` node, the other model ``Pad``, ``Slice``,
# ``Concat``, ``MatMul`` and the shape computations of the dynamic dimensions.

dynamic_shapes = ({0: "batch", 2: "height", 3: "width"},)
sessions = {}
for name, model in [("Conv", conv), ("im2col+MatMul", im2col)]:
    onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic_shapes)
    ops = [node.op_type for node in onx.graph.node]
    print(f"{name}: {len(ops)} nodes, {sorted(set(ops))}")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    sessions[name] = onnxruntime.InferenceSession(
        onx.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
assert [n.op_type for n in fx2onnx.to_onnx(conv, (x,)).graph.node] == ["Conv"]
assert "MatMul" in ops and "Conv" not in ops

# %%
# Timings
# -------
#
# Median of a few calls per image size, batch 4, one thread for both runtimes
# (the kernels are compared, not the thread pools). Every result of onnxruntime is
# compared with PyTorch's convolution.


def median_time(fn, repeat=7):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


sizes = [8, 16, 32, 64]
torch_threads = torch.get_num_threads()
torch.set_num_threads(1)
timings = {f"{runtime} {name}": [] for runtime in ("torch", "onnxruntime") for name in sessions}
for size in sizes:
    xs = torch.randn(4, 16, size, size)
    feed = xs.numpy()
    with torch.no_grad():
        expected = conv(xs).numpy()
        for name, model in [("Conv", conv), ("im2col+MatMul", im2col)]:
            timings[f"torch {name}"].append(median_time(lambda: model(xs)))
    for name, sess in sessions.items():
        input_name = sess.get_inputs()[0].name
        got = sess.run(None, {input_name: feed})[0]
        assert np.abs(got - expected).max() < 1e-4, (name, size)
        timings[f"onnxruntime {name}"].append(median_time(lambda: sess.run(None, {input_name: feed})))
    print(f"{size:>3}x{size:<3}", "  ".join(f"{k}: {v[-1] * 1e3:.3f} ms" for k, v in timings.items()))
torch.set_num_threads(torch_threads)

# %%
# The im2col matrix is ``k * k = 9`` times bigger than the image: building it
# means copies a dedicated convolution kernel avoids. The ratios below and the plot
# tell which way wins on the machine which built this page.

for runtime in ("torch", "onnxruntime"):
    ratios = [a / b for a, b in zip(timings[f"{runtime} im2col+MatMul"], timings[f"{runtime} Conv"])]
    print(f"{runtime:>11}: im2col+MatMul / Conv =", "  ".join(f"{r:.2f}" for r in ratios))
assert all(v > 0 for values in timings.values() for v in values)

fig, ax = plt.subplots(figsize=(7, 4))
for key, values in timings.items():
    style = "-" if key.startswith("torch") else "--"
    ax.plot(sizes, [v * 1e3 for v in values], style, marker="o", label=key)
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("image size (height = width)")
ax.set_ylabel("median time (ms)")
ax.set_title("Conv2d(16, 32, 3) on 4 images")
ax.legend()
fig.tight_layout()
