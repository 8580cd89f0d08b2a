"""
.. _l-plot-export-rewriting-if:

Rewrite a data-dependent if into torch.cond
===========================================

A Python ``if`` on the *values* of a tensor cannot be exported:
:epkg:`torch.export` traces with fake tensors, which have shapes but no values.
:func:`torch.cond` fixes it, but editing the model is not always possible
(a model from a library). :func:`fx2onnx.torch_export_patches` with
``rewrite=`` rewrites the source of the function with :mod:`ast` for the time
of the export: each ``if`` depending on tensor values becomes a
:func:`torch.cond`, and ONNX gets an ``If`` node. ``dump_rewriting=`` writes
the code before and after, and the diff.

A model with a test on data
---------------------------
"""

import contextlib
import io
import os
import tempfile
import warnings

import matplotlib.pyplot as plt
import torch

import fx2onnx


class GatedBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        if y.sum() > 0:
            z = torch.relu(y) * 2
        else:
            z = torch.sigmoid(y) - 1
        return z + x


torch.manual_seed(0)
model = GatedBlock().eval()
x = torch.randn(3, 4)
dynamic_shapes = ({0: "batch"},)

# %%
# Without rewriting
# -----------------
#
# The export stops on the ``if``: the condition is a symbolic boolean whose
# value depends on the data (torch.export also prints the graph traced so far
# on stderr, hidden here).

try:
    with contextlib.redirect_stderr(io.StringIO()):
        torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},), strict=False)
    error = None
except Exception as e:
    error = e
    print(type(e).__name__)
    print("\n".join(str(e).splitlines()[:3]))
assert "data-dependent" in str(error)

# %%
# With rewriting
# --------------
#
# ``rewrite=GatedBlock`` rewrites its ``forward``. The folder given to
# ``dump_rewriting`` receives three files per rewritten function.

folder = tempfile.mkdtemp()
with fx2onnx.torch_export_patches(rewrite=GatedBlock, dump_rewriting=folder) as modificator:
    onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic_shapes)
    print([(r.name, r.status) for r in modificator.reports if r.kind == "rewrite"])
print(sorted(os.listdir(folder)))

# %%
# The diff shows how the branches become two local functions. Each returns the
# variables the ``if`` assigns; the values the branches read are given to
# :func:`torch.cond` as operands.

diff_file = [name for name in os.listdir(folder) if name.endswith(".diff")][0]
with open(os.path.join(folder, diff_file)) as f:
    diff = f.read()
print(diff)
assert "torch.cond" in diff

# %%
# The original ``forward`` is back once the ``with`` block ends.

assert "torch.cond" not in GatedBlock.forward.__code__.co_names

# %%
# :func:`fx2onnx.to_onnx` does the same by itself when its capture fails on such
# an ``if`` in a ``forward`` (``patches=False`` refuses), and says so with a warning.

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    auto = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic_shapes)
print(caught[-1].category.__name__, ":", str(caught[-1].message)[:110], "...")
assert "If" in {n.op_type for n in auto.graph.node}

# %%
# The ONNX model
# --------------
#
# The ``if`` became an ``If`` node holding both branches as subgraphs.

print([node.op_type for node in onx.graph.node])
if_nodes = [node for node in onx.graph.node if node.op_type == "If"]
assert len(if_nodes) == 1
print("then:", [n.op_type for n in if_nodes[0].attribute[0].g.node])
print("else:", [n.op_type for n in if_nodes[0].attribute[1].g.node])

# %%
# Both branches checked against eager
# -----------------------------------
#
# Inputs of several batch sizes, shifted so that the sum of ``linear(x)`` is
# positive for some and negative for the others: the eager model (the original
# code, not rewritten) and the ONNX model must agree in both cases
# (``atol=1e-5``).

branches, diffs = [], []
for i, shift in enumerate([-3.0, -1.0, 1.0, 3.0, -2.0, 2.0]):
    xi = torch.randn(2 + i, 4) + shift
    with torch.no_grad():
        branch = "relu" if model.linear(xi).sum() > 0 else "sigmoid"
    report = fx2onnx.validate(onx, model, (xi,), atol=1e-5)
    assert report.ok, (shift, report)
    branches.append(branch)
    diffs.append(report.max_abs)
    print(f"batch={2 + i} shift={shift:+.0f} branch={branch:7s} {report}")
assert set(branches) == {"relu", "sigmoid"}

fig, ax = plt.subplots(figsize=(6, 3))
colors = ["tab:blue" if b == "relu" else "tab:orange" for b in branches]
ax.bar([f"{b}\n#{i}" for i, b in enumerate(branches)], diffs, color=colors)
ax.axhline(1e-5, color="#c44e52", linestyle="--", label="tolerance 1e-5")
for i, value in enumerate(diffs):
    ax.text(i, value + 2e-7, f"{value:.0e}", ha="center", fontsize=8)
ax.set_ylim(0, 1.2e-5)
ax.legend()
ax.set_ylabel("max abs diff with eager")
ax.set_title("GatedBlock exported with a rewritten if")
fig.tight_layout()
