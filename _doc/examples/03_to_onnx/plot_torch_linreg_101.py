"""
.. _l-plot-torch-linreg-101:

Linear regression: train in torch, export with to_onnx
======================================================

The smallest useful model: a linear regression trained with :epkg:`torch` on synthetic
data, exported to ONNX with :func:`fx2onnx.to_onnx` with a dynamic batch dimension, then
run with :epkg:`onnxruntime` on a batch of another size. The ONNX outputs must match eager
PyTorch within ``atol=1e-5``.

Data and training
-----------------

The targets are a known linear function of the features plus some noise,
so we know which coefficients the training should find.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
import onnx
import onnxruntime
import torch

import fx2onnx

torch.manual_seed(0)
n_features = 5
true_weight = torch.tensor([[1.5, -2.0, 0.5, 3.0, -1.0]])
true_bias = torch.tensor([0.7])
X = torch.randn(1000, n_features)
y = X @ true_weight.T + true_bias + 0.1 * torch.randn(1000, 1)

model = torch.nn.Linear(n_features, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.MSELoss()

losses = []
begin = time.perf_counter()
for epoch in range(20):
    for i in range(0, X.shape[0], 50):
        optimizer.zero_grad()
        loss = loss_fn(model(X[i : i + 50]), y[i : i + 50])
        loss.backward()
        optimizer.step()
    losses.append(loss_fn(model(X), y).item())
print(f"training: {time.perf_counter() - begin:.2f}s, final loss {losses[-1]:.4f}")
print("learned weight:", model.weight.detach().numpy().round(2))
print("learned bias:  ", model.bias.detach().numpy().round(2))

# %%
# The noise has a variance of 0.01: the loss cannot go much lower.
assert losses[-1] < 0.02, losses[-1]
assert torch.allclose(model.weight, true_weight, atol=0.05)

# %%
# Export with a dynamic batch
# ---------------------------
#
# :func:`fx2onnx.to_onnx` captures the model with :epkg:`torch.export.export`, then
# converts every ATen operator of the FX graph itself: here ``aten.linear`` becomes one
# ``Gemm``. The first dimension of ``x`` is declared dynamic with a string, ``"batch"``,
# which becomes the name of the dimension in the ONNX model: it accepts any number of rows.

model.eval()
onx = fx2onnx.to_onnx(model, (X[:8],), dynamic_shapes=({0: "batch"},))


def shape_of(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


print("inputs: ", [(i.name, shape_of(i)) for i in onx.graph.input])
print("outputs:", [(o.name, shape_of(o)) for o in onx.graph.output])

# %%
# The batch dimension is symbolic in the ONNX model, not fixed to the 8 rows used
# to export it.
assert shape_of(onx.graph.input[0]) == ["batch", n_features]
assert shape_of(onx.graph.output[0]) == ["batch", 1]

# %%
# The ONNX graph
# --------------
#
# :func:`onnx.printer.to_text` shows the graph in a readable form: one ``Gemm``
# (matrix multiplication plus bias) with the weights stored as initializers.
print(onnx.printer.to_text(onx.graph))
assert [n.op_type for n in onx.graph.node] == ["Gemm"]

# %%
# Run with onnxruntime on another batch size
# ------------------------------------------
#
# The model was exported with 8 rows; it runs here on 37.

sess = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
x_new = torch.randn(37, n_features)
(got,) = sess.run(None, {sess.get_inputs()[0].name: x_new.numpy()})
with torch.no_grad():
    expected = model(x_new).numpy()
print("shape:", got.shape, "max abs diff:", np.abs(got - expected).max())
assert got.shape == (37, 1)
np.testing.assert_allclose(got, expected, atol=1e-5)

# %%
# :func:`fx2onnx.validate` does the same in one call: it runs both, flattens
# the outputs and compares them.
report = fx2onnx.validate(onx, model, (x_new,), atol=1e-5)
print(report)
assert report.ok, report

# %%
# The official exporter, ``torch.onnx.export(..., dynamo=True)``, takes the same
# arguments (:ref:`l-plot-torch-linreg-101-oe` follows it step by step) and gives the
# same predictions.
official = torch.onnx.export(
    model, (X[:8],), dynamic_shapes=({0: "batch"},), dynamo=True, verbose=False
)
report2 = fx2onnx.validate(official.model_proto, model, (x_new,), atol=1e-5)
print("torch.onnx.export:", report2)
assert report2.ok, report2

# %%
# Loss and predictions
# --------------------

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
ax1.plot(range(1, len(losses) + 1), losses, marker="o")
ax1.set_yscale("log")
ax1.set_xlabel("epoch")
ax1.set_ylabel("MSE on the training set")
ax1.set_title("training loss")
y_new = x_new @ true_weight.T + true_bias
ax2.scatter(y_new.numpy(), got, s=12, label="onnxruntime")
ax2.plot([y_new.min(), y_new.max()], [y_new.min(), y_new.max()], "k--", label="y = x")
ax2.set_xlabel("true value")
ax2.set_ylabel("prediction of the ONNX model")
ax2.set_title("predictions on 37 new rows")
ax2.legend()
fig.tight_layout()
