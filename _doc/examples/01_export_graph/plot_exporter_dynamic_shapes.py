"""
.. _l-plot-exporter-dynamic_shapes:

to_onnx and dynamic shapes: names, static dimensions, other inputs
===================================================================

:func:`fx2onnx.to_onnx` takes ``dynamic_shapes`` like :epkg:`torch.export.export`
and keeps the names the user gives to the dimensions: they appear in the
inputs, the outputs and the intermediate results of the ONNX model, and
dimensions computed from them become readable expressions (``past+seq``).
This example also shows what happens when the model's code makes a
dimension static, and checks the model on inputs of other sizes.

A model with two dynamic inputs
-------------------------------

A toy attention block: new tokens ``x`` are appended to the ``past`` ones,
every new token attends to all of them.
"""

import time

import matplotlib.pyplot as plt
import onnxruntime
import torch
from torch.export import Dim

import fx2onnx


class Attend(torch.nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * dim)

    def forward(self, x, past):
        full = torch.cat([past, x], dim=1)  # (batch, past + seq, dim)
        k, v = self.kv(full).chunk(2, dim=-1)
        scores = self.q(x) @ k.transpose(1, 2) / k.shape[-1] ** 0.5
        return {"context": scores.softmax(-1) @ v, "keys": k}


torch.manual_seed(0)
model = Attend().eval()
x, past = torch.randn(2, 3, 16), torch.randn(2, 5, 16)

# %%
# The dimensions are named with strings (``Dim("batch")`` works too).
# The outputs are named after the keys of the returned dictionary.

dynamic_shapes = {"x": {0: "batch", 1: "seq"}, "past": {0: "batch", 1: "past"}}
onx = fx2onnx.to_onnx(model, (x, past), dynamic_shapes=dynamic_shapes)


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


for kind, values in [("input", onx.graph.input), ("output", onx.graph.output)]:
    for v in values:
        print(f"{kind:6} {v.name:8} {dims(v)}")
print("intermediate:", {v.name: dims(v) for v in onx.graph.value_info if v.name == "cat"})

# %%
# The ONNX model must match eager PyTorch on inputs of other sizes.

sizes = [(1, 1, 2), (2, 3, 5), (3, 7, 4), (4, 16, 32), (8, 2, 64)]
diffs = []
for batch, seq, npast in sizes:
    inputs = (torch.randn(batch, seq, 16), torch.randn(batch, npast, 16))
    report = fx2onnx.validate(onx, model, inputs, atol=1e-5)
    assert report.ok, report
    diffs.append(report.max_abs)
    print(f"batch={batch} seq={seq} past={npast}: {report}")

# %%
# When the code makes a dimension static
# --------------------------------------
#
# The model below flattens its input with a hard-coded size: the second
# dimension can only be 3. Naming it means "dynamic", torch refuses, and
# :func:`fx2onnx.to_onnx` says which of the user's dimensions is concerned.


class Flatten(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], 3 * 16).relu()


try:
    fx2onnx.to_onnx(Flatten(), (x,), dynamic_shapes=({0: "batch", 1: "seq"},))
    raise AssertionError("the export should fail")
except fx2onnx.ExportError as e:
    hint = [line for line in str(e).splitlines() if "static" in line][-1]
    print(hint)
    assert "'seq' (x, axis 1)" in hint

# %%
# ``Dim.AUTO`` lets torch decide: the dimension becomes the constant 3 in ONNX,
# and onnxruntime rejects an input of another size.

onx_flat = fx2onnx.to_onnx(Flatten(), (x,), dynamic_shapes=({0: "batch", 1: Dim.AUTO},))
print("input:", dims(onx_flat.graph.input[0]))
assert dims(onx_flat.graph.input[0]) == ["batch", 3, 16]
assert fx2onnx.validate(onx_flat, Flatten(), (torch.randn(5, 3, 16),)).ok
session = onnxruntime.InferenceSession(onx_flat.SerializeToString(), providers=["CPUExecutionProvider"])
try:
    session.run(None, {"x": torch.randn(5, 4, 16).numpy()})
    raise AssertionError("onnxruntime should reject the shape")
except onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument as e:
    message = " ".join(str(e).split("INVALID_ARGUMENT :")[-1].split())
    print("onnxruntime:", message)
    assert "Expected: 3" in message

# %%
# Discrepancies and time
# ----------------------
#
# The discrepancies stay near float32 precision whatever the sizes.
# The export itself takes a fraction of a second.

begin = time.perf_counter()
fx2onnx.to_onnx(model, (x, past), dynamic_shapes=dynamic_shapes)
print(f"export time: {time.perf_counter() - begin:.2f}s")

fig, ax = plt.subplots(figsize=(6, 3))
ax.bar([f"{b}x{s}+{p}" for b, s, p in sizes], diffs)
ax.set_xlabel("batch x seq + past")
ax.set_ylabel("max abs diff vs eager")
ax.set_title("One ONNX model, inputs of many sizes")
fig.tight_layout()
