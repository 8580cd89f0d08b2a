"""
.. _l-plot-rewrite-101:

Rewrite an ONNX graph with onnxscript's pattern rewriter
========================================================

:epkg:`onnxscript`'s rewriter replaces a subgraph matching a **pattern** by a
**replacement**, both written as small Python functions calling ONNX operators, with
an optional **condition** deciding whether a match may be replaced. This example
writes two rules and applies them to a model exported from :epkg:`torch`:

* ``x * Sigmoid(x)`` (SiLU written by hand) becomes one ``QuickGelu`` node, an
  :epkg:`onnxruntime` operator of domain ``com.microsoft`` computing
  ``x * Sigmoid(alpha * x)``, here with ``alpha=1``,
* ``Transpose(Transpose(x))`` disappears when the two permutations cancel out.

The model
---------
"""

import collections

import matplotlib.pyplot as plt
import numpy as np
import onnx_ir as ir
import torch
from onnx_ir.passes import common
from onnxscript.rewriter import pattern

import fx2onnx
from fx2onnx.validation import run_onnx


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.linear(x)
        y = torch.sigmoid(y) * y  # SiLU, operands in the other order
        z = y.transpose(1, 2).transpose(1, 2)  # cancels out
        other = x.transpose(1, 2).transpose(0, 1)  # does not cancel out
        return self.head(z * torch.sigmoid(z)), other


torch.manual_seed(0)
model = Model().eval()
x = torch.randn(2, 5, 8)
dynamic_shapes = ({0: "batch", 1: "seq"},)
raw = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic_shapes, optimize=False)
print([n.op_type for n in raw.graph.node])

# %%
# The export is not optimized (``optimize=False``), otherwise the optimizer would
# already remove the transpositions which cancel out. The first and the last
# ``Transpose`` transpose the weights of the two linear layers (constants the
# optimizer would fold).
#
# The rules
# ---------
#
# The pattern and the replacement receive ``op``, a builder: ``op.Mul(...)`` in a
# pattern matches a ``Mul`` node, in a replacement creates one. ``_domain`` sets the
# domain of a node. The variables of the pattern (``x``, ``perm1``) are bound by the
# match and passed to the condition and the replacement.


def silu_pattern(op, x):
    return op.Mul(x, op.Sigmoid(x))


def silu_replacement(op, x):
    return op.QuickGelu(x, alpha=1.0, _domain="com.microsoft")


def transpose_pair_pattern(op, x, perm1, perm2):
    return op.Transpose(op.Transpose(x, perm=perm1), perm=perm2)


def permutations_cancel_out(context, x, perm1, perm2, **_):
    p1, p2 = perm1.as_ints(), perm2.as_ints()
    return [p1[i] for i in p2] == list(range(len(p1)))


def identity(op, x, **_):
    return op.Identity(x)


rules = pattern.RewriteRuleSet(
    [
        pattern.RewriteRule(silu_pattern, silu_replacement, name="silu"),
        pattern.RewriteRule(
            transpose_pair_pattern, identity, permutations_cancel_out, name="transpose_pair"
        ),
    ],
    commute=True,  # Mul(x, Sigmoid(x)) also matches Mul(Sigmoid(x), x)
)

# %%
# Apply them
# ----------
#
# The rules run on the :epkg:`onnx-ir` model; ``Identity`` nodes are then removed by
# one of its passes, and the nodes which became unused by another.

model_ir = ir.from_proto(raw)
count = rules.apply_to_model(model_ir)
ir.passes.Sequential(common.IdentityEliminationPass(), common.RemoveUnusedNodesPass())(model_ir)
rewritten = ir.to_proto(model_ir)
print(f"{count} rewrites:", [n.op_type for n in rewritten.graph.node])

# %%
# Both SiLU are replaced, whatever the order of the operands, and the first pair of
# transpositions is gone. The second pair (``[0, 2, 1]`` then ``[1, 0, 2]``) does
# not cancel out: the condition refused it, both nodes stay.

before = collections.Counter(n.op_type for n in raw.graph.node)
after = collections.Counter(n.op_type for n in rewritten.graph.node)
print(f"before: {dict(before)}\nafter:  {dict(after)}")
assert count == 3 and after["QuickGelu"] == 2 and after["Sigmoid"] == 0 and after["Mul"] == 0
assert after["Transpose"] == before["Transpose"] - 2
assert any(o.domain == "com.microsoft" for o in rewritten.opset_import)  # the rewriter declared it

# %%
# Check with onnxruntime
# ----------------------
#
# The rewritten model must give the results of the original ONNX model and of eager
# PyTorch, on inputs of other shapes.

for shape in [(2, 5, 8), (3, 11, 8)]:
    inputs = torch.randn(*shape)
    report = fx2onnx.validate(rewritten, model, (inputs,), atol=1e-5)
    diff = max(
        float(np.abs(a - b).max())
        for a, b in zip(run_onnx(raw, (inputs,)), run_onnx(rewritten, (inputs,)))
    )
    print(f"shape={shape}: vs eager {report}; vs the original ONNX model: {diff:.2g}")
    assert report.ok, report
    assert diff < 1e-5, diff

# %%
# Nodes before and after
# ----------------------

op_types = sorted(set(before) | set(after))
y = np.arange(len(op_types))
fig, ax = plt.subplots(figsize=(6, 3))
ax.barh(y - 0.2, [before[op] for op in op_types], height=0.4, label="exported")
ax.barh(y + 0.2, [after[op] for op in op_types], height=0.4, label="rewritten")
ax.set_yticks(y)
ax.set_yticklabels(op_types)
ax.set_xlabel("number of nodes")
ax.set_ylabel("operator")
ax.set_title("nodes per operator, before and after the rewriting")
ax.legend()
fig.tight_layout()
