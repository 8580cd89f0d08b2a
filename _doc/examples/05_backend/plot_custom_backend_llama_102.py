"""
.. _l-plot-custom-backend-llama-102:

The onnxruntime backend on a tiny Llama, with the optimizer's fusions
=====================================================================

The backend :func:`fx2onnx.backend.make_onnxruntime_backend` converts the forward
and backward graphs of a model into ONNX. Those graphs are made of small aten
operators: a RMS normalization becomes ``Pow``, ``ReduceMean``, ``Add``, ``Sqrt``,
``Div``, ``Mul``... :func:`fx2onnx.optimize` with ``level="onnxruntime"`` replaces
such patterns by the fused operators :epkg:`onnxruntime` implements
(``SimplifiedLayerNormalization``, ``com.microsoft.RotaryEmbedding``...).

This example trains a tiny Llama for one step with the fused models, checks the
loss and the gradients against eager PyTorch (``atol=1e-4``) and shows the node
counts before and after the optimization.

A backend optimizing every graph
--------------------------------

The backend's option ``optimize=True`` runs the default level. To run another
level, a subclass optimizes the model of each :class:`fx2onnx.backend.GraphRunner`
right after the conversion, before the first onnxruntime session is created.
"""

import collections
import copy

import matplotlib.pyplot as plt
import onnx_ir as ir
import torch

import fx2onnx
from fx2onnx.backend import OrtBackend, make_onnxruntime_backend
from fx2onnx.zoo import get_tiny_model


class FusingBackend(OrtBackend):
    def __init__(self, level):
        super().__init__(make_onnxruntime_backend().options)
        self.level, self.reports, self.default_reports = level, {}, {}

    def compile_graph(self, gm, example_inputs, kind="forward"):
        runner = super().compile_graph(gm, example_inputs, kind)
        # a copy with the default level, to compare, then the model which runs
        copy_of_model = ir.from_proto(ir.to_proto(runner.model))
        _, self.default_reports[runner.name] = fx2onnx.optimize(
            copy_of_model, level="default", report=True
        )
        runner.model, self.reports[runner.name] = fx2onnx.optimize(
            runner.model, level=self.level, report=True
        )
        return runner


tiny = get_tiny_model("llama")
input_ids = tiny.inputs["input_ids"]


def one_step(model):
    model.zero_grad()
    loss = model(input_ids=input_ids, labels=input_ids).loss
    loss.backward()
    return loss.item(), {
        n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters()
    }


eager_loss, eager_grads = one_step(copy.deepcopy(tiny.model).train())
torch._dynamo.reset()  # forget what dynamo compiled before (other examples, other backends)
backend = FusingBackend("onnxruntime")
fused_loss, fused_grads = one_step(torch.compile(copy.deepcopy(tiny.model).train(), backend=backend))

# %%
# The loss and the gradients match eager PyTorch.

grad_diff = max((fused_grads[n] - g).abs().max().item() for n, g in eager_grads.items())
print(
    f"loss: eager {eager_loss:.6f}, fused models {fused_loss:.6f}; max gradient difference "
    f"{grad_diff:.1e}"
)
assert abs(eager_loss - fused_loss) < 1e-4
for name, grad in eager_grads.items():
    torch.testing.assert_close(fused_grads[name], grad, atol=1e-4, rtol=1e-3)
print(backend.stats())
assert backend.stats()["graphs"] == 2 and backend.stats()["fallbacks"] == 0

# %%
# What the optimizer did
# ----------------------
#
# The report of each graph lists the rules and how many times they matched. The
# fusions apply to the forward graph; the backward graph of a normalization or of
# the rotary embedding has no fused operator in onnxruntime, only the default
# clean-up (constant folding of the shapes, dead code) shrinks it.

for name, report in backend.reports.items():
    print(f"--- {name}")
    print(report)
forward, backward = backend.reports["g0_forward"], backend.reports["g1_backward"]
assert forward.matches("rotary_embedding") == 2 and forward.matches("rms_normalization") == 3
assert backward.nodes_after < backward.nodes_before

# %%
# Node counts of each graph: as converted, with ``level="default"`` (what the
# backend's ``optimize=True`` does) and with ``level="onnxruntime"``.

counts = {
    name: [report.nodes_before, backend.default_reports[name].nodes_after, report.nodes_after]
    for name, report in backend.reports.items()
}
for name, values in counts.items():
    print(f"{name}: converted {values[0]}, default {values[1]}, onnxruntime {values[2]}")
assert (
    counts["g0_forward"][1] < counts["g0_forward"][0]
    and abs(counts["g0_forward"][2] - counts["g0_forward"][1]) <= 3
)

# %%
# The fusions barely change the number of nodes of the forward graph: in training,
# the forward graph also returns what the backward needs (the inverse of the
# standard deviation of each normalization, the normalized values...), so the nodes
# computing them stay next to the fused operators. The operators which changed
# between the two levels:

before = collections.Counter(backend.default_reports["g0_forward"].op_types)
after = collections.Counter(forward.op_types)
changed = sorted(
    (op for op in set(before) | set(after) if before[op] != after[op]),
    key=lambda o: after[o] - before[o],
)
for op in changed:
    print(f"{op:>36}: {before[op]:3d} -> {after[op]:3d}")
assert after["SimplifiedLayerNormalization"] == 3
assert after["RotaryEmbedding"] == 2  # query and key

# %%
# Plot
# ----

fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.4, 7))  # stacked: the page's width
labels = ["converted", "level=default", "level=onnxruntime"]
for i, label in enumerate(labels):
    ax1.bar([k + (i - 1) * 0.27 for k in range(2)], [v[i] for v in counts.values()], 0.27, label=label)
ax1.set_xticks(range(2), list(counts))
ax1.set_ylabel("ONNX nodes")
ax1.set_title("tiny Llama, forward and backward graphs")
ax1.legend()
ax2.barh(
    [k + 0.2 for k in range(len(changed))], [before[o] for o in changed], 0.4, label="level=default"
)
ax2.barh(
    [k - 0.2 for k in range(len(changed))], [after[o] for o in changed], 0.4, label="level=onnxruntime"
)
ax2.set_yticks(range(len(changed)), changed)
ax2.set_xlabel("nodes")
ax2.set_title("forward graph: operators the fusions changed")
ax2.legend()
fig.tight_layout()
