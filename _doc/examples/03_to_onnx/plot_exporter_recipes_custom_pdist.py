"""
.. _l-plot-exporter-recipes-custom-pdist:

to_onnx and scan: pairwise distances computed row by row
========================================================

:func:`torch.cdist` computes all the distances between the rows of ``x`` (n rows) and
the rows of ``y`` (m rows) at once, an intermediate tensor of shape ``(n, m, d)`` when it is
written with broadcasting. With ``scan``, one row of ``x`` is compared with ``y`` at
each step: the memory stays ``O(m d)`` whatever ``n`` is. The loop becomes an ONNX
``Scan`` with :func:`fx2onnx.to_onnx`; ``y`` is read by the loop body from the outer graph.

The model
---------
"""

import time

import matplotlib.pyplot as plt
import onnx
import onnxruntime
import torch
from torch._higher_order_ops.scan import scan

import fx2onnx
from fx2onnx.validation import make_feeds, validate


class PairwiseDistance(torch.nn.Module):
    def forward(self, x, y):
        def one_row(carry, row):
            distances = ((y - row.unsqueeze(0)) ** 2).sum(dim=1).sqrt()
            return carry.clone(), distances  # no state is needed, only the stacked outputs

        _, out = scan(one_row, torch.zeros(1, dtype=x.dtype), x)
        return out


torch.manual_seed(0)
model = PairwiseDistance().eval()
x, y = torch.randn(5, 3), torch.randn(4, 3)
torch.testing.assert_close(model(x, y), torch.cdist(x, y), atol=1e-5, rtol=1e-5)
print("scan matches torch.cdist in eager")

# %%
# Export: both numbers of rows are dynamic
# ----------------------------------------

dynamic_shapes = ({0: "n"}, {0: "m"})
onx = fx2onnx.to_onnx(model, (x, y), dynamic_shapes=dynamic_shapes)
print("main graph:", [n.op_type for n in onx.graph.node])
body = next(n for n in onx.graph.node if n.op_type == "Scan").attribute[0].g
print("Scan body:", [n.op_type for n in body.node])
print(
    "output shape:",
    [d.dim_param or d.dim_value for d in onx.graph.output[0].type.tensor_type.shape.dim],
)

for n, m in [(5, 4), (30, 7), (1, 100)]:
    report = validate(onx, model, (torch.randn(n, 3), torch.randn(m, 3)), atol=1e-5)
    print(f"n={n}, m={m}: {report}")
    assert report.ok, report

# %%
# The official exporter
# ---------------------

official = torch.onnx.export(
    model, (x, y), dynamic_shapes=dynamic_shapes, dynamo=True, verbose=False
).model_proto
onnx.checker.check_model(official)
report = validate(official, model, (torch.randn(30, 3), torch.randn(7, 3)), atol=1e-5)
print(f"torch.onnx.export: {[n.op_type for n in official.graph.node]}: {report}")
assert [n.op_type for n in official.graph.node] == ["Scan"]
assert report.ok, report

# %%
# Time per number of rows
# -----------------------
#
# The loop runs n steps; the broadcast version (one ``(n, m, d)`` tensor) is
# exported for comparison.


class Broadcast(torch.nn.Module):
    def forward(self, x, y):
        return ((x.unsqueeze(1) - y.unsqueeze(0)) ** 2).sum(dim=2).sqrt()


onx_broadcast = fx2onnx.to_onnx(Broadcast(), (x, y), dynamic_shapes=dynamic_shapes)
opts = onnxruntime.SessionOptions()
opts.intra_op_num_threads = 1
sessions = {
    name: onnxruntime.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for name, m in [("scan", onx), ("broadcast", onx_broadcast)]
}
sizes = [10, 100, 400, 1000]
times = {name: [] for name in sessions}
for n in sizes:
    args = (torch.randn(n, 3), torch.randn(200, 3))
    expected = torch.cdist(*args)
    for name, sess in sessions.items():
        feeds = make_feeds(sess, args)
        got = torch.from_numpy(sess.run(None, feeds)[0])
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        begin = time.perf_counter()
        for _ in range(5):
            sess.run(None, feeds)
        times[name].append((time.perf_counter() - begin) / 5)
    print(f"n={n}: " + ", ".join(f"{k} {v[-1] * 1000:.2f} ms" for k, v in times.items()))

fig, ax = plt.subplots(figsize=(6, 3))
for name, values in times.items():
    ax.plot(sizes, [t * 1000 for t in values], "o-", label=name)
ax.set_xlabel("rows of x (y has 200 rows of 3 features)")
ax.set_ylabel("ms per call")
ax.legend()
ax.set_title("pairwise distances on onnxruntime")
fig.tight_layout()
