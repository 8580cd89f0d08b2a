"""
.. _l-plot-torch-linreg-101-oe:

torch.onnx.export: a linear regression with a dynamic batch
===========================================================

The simplest recipe of :func:`torch.onnx.export` with ``dynamo=True``: a linear
regression is trained on synthetic data, exported with a dynamic batch dimension
named ``batch``, then run with :epkg:`onnxruntime` on batches of other sizes. The
ONNX outputs must match eager PyTorch within ``atol=1e-5``.

Train a linear regression
-------------------------
"""

import matplotlib.pyplot as plt
import numpy as np
import onnxruntime
import torch

torch.manual_seed(0)
true_weight = torch.tensor([[2.0, -1.0, 0.5]])
X = torch.randn(512, 3)
y = X @ true_weight.T + 0.3 + 0.05 * torch.randn(512, 1)

model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(30):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(X), y)
    loss.backward()
    optimizer.step()
print(
    f"loss={loss.item():.4f} weight={model.weight.detach().numpy().round(2)} "
    f"bias={model.bias.item():.2f}"
)
assert loss.item() < 0.1, loss

# %%
# Export with a dynamic batch
# ---------------------------
#
# ``dynamic_shapes`` follows the structure of the inputs: one dictionary per
# positional input mapping an axis to a dimension. A string names the dimension;
# the ONNX model keeps the name. ``torch.export.Dim("batch")`` works too.

model.eval()
onnx_program = torch.onnx.export(
    model, (X[:4],), dynamic_shapes=({0: "batch"},), dynamo=True, verbose=False
)
onx = onnx_program.model_proto


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


for value in [*onx.graph.input, *onx.graph.output]:
    print(f"{value.name:10s} {dims(value)}")
print("nodes:", [n.op_type for n in onx.graph.node])
assert dims(onx.graph.input[0]) == ["batch", 3]
assert dims(onx.graph.output[0]) == ["batch", 1]
assert [n.op_type for n in onx.graph.node] == ["Gemm"]

# %%
# The :class:`torch.onnx.ONNXProgram` returned by the exporter can run the model
# itself (it uses onnxruntime) and save it with ``onnx_program.save(path)``.

(from_program,) = onnx_program(X[:7])
np.testing.assert_allclose(from_program.numpy(), model(X[:7]).detach().numpy(), atol=1e-5)

# %%
# Run with onnxruntime on other batch sizes
# -----------------------------------------
#
# The model was exported with 4 rows. It runs with 1, 7 or 100 rows.

session = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
input_name = session.get_inputs()[0].name
diffs = {}
for batch in (1, 7, 100):
    x = torch.randn(batch, 3)
    (got,) = session.run(None, {input_name: x.numpy()})
    with torch.no_grad():
        expected = model(x).numpy()
    diffs[batch] = float(np.abs(got - expected).max())
    print(f"batch={batch:3d} output shape={got.shape} max abs diff={diffs[batch]:.2g}")
    assert got.shape == (batch, 1)
    np.testing.assert_allclose(got, expected, atol=1e-5)

# %%
# A static export
# ---------------
#
# Without ``dynamic_shapes``, every dimension is fixed to the shape of the
# example input and onnxruntime refuses another batch size.

static = torch.onnx.export(model, (X[:4],), dynamo=True, verbose=False).model_proto
assert dims(static.graph.input[0]) == [4, 3]
static_session = onnxruntime.InferenceSession(
    static.SerializeToString(), providers=["CPUExecutionProvider"]
)
try:
    static_session.run(None, {static_session.get_inputs()[0].name: np.zeros((7, 3), dtype=np.float32)})
    raise AssertionError("a static model should refuse a batch of 7 rows")
except onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument as e:
    print(str(e).splitlines()[0])
    assert "Got invalid dimensions" in str(e)

# %%
# Predictions of the ONNX model
# -----------------------------

x_plot = torch.linspace(-3, 3, 50).reshape(-1, 1) * torch.tensor([[1.0, 0.0, 0.0]])
(y_plot,) = session.run(None, {input_name: x_plot.numpy()})
fig, ax = plt.subplots(figsize=(5, 3))
ax.scatter(X[:, 0], y[:, 0], s=4, alpha=0.3, label="training data")
ax.plot(x_plot[:, 0], y_plot[:, 0], "r", label="ONNX model, x1=x2=0")
ax.set_xlabel("x0")
ax.set_ylabel("y")
ax.set_title("training data and ONNX predictions")
ax.legend()
fig.tight_layout()
