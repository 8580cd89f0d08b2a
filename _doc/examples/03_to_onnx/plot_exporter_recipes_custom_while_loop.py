"""
.. _l-plot-exporter-recipes-custom-while-loop:

to_onnx and while_loop: a loop stopping on the data becomes a Loop node
=======================================================================

A Python ``while`` loop is unrolled by :epkg:`torch.export`, and a loop whose number of
iterations depends on the data cannot be unrolled at all.
``torch._higher_order_ops.while_loop(cond_fn, body_fn, carried_inputs)`` keeps the loop:
``body_fn`` runs as long as ``cond_fn`` returns True. :func:`fx2onnx.to_onnx` converts it
into an ONNX ``Loop``: the first condition is computed before the loop, the next ones at
the end of the body on the new carried values. Carried values may be tensors or ints.

The model: Newton's method for a square root
---------------------------------------------

The iteration stops when every value converged or after 50 steps; the number of
steps is returned too (a carried int).
"""

import matplotlib.pyplot as plt
import onnx
import torch
from torch._higher_order_ops.while_loop import while_loop

import fx2onnx
from fx2onnx.validation import run_onnx, validate


class NewtonSqrt(torch.nn.Module):
    def forward(self, a, tol):
        def cond_fn(step, x):
            not_converged = (x * x - a).abs().max() > tol
            return not_converged & (step < 50)

        def body_fn(step, x):
            return step + 1, 0.5 * (x + a / x)

        step0 = torch.zeros((), dtype=torch.int64)
        steps, root = while_loop(cond_fn, body_fn, (step0, a.clone()))
        return root, steps * 1.0  # a float tensor for the number of steps


model = NewtonSqrt().eval()
a, tol = torch.tensor([2.0, 9.0, 100.0]), torch.tensor(1e-4)
root, steps = model(a, tol)
print(f"eager: sqrt{a.tolist()} = {root.tolist()} after {int(steps)} steps")

# %%
# Export with a dynamic number of values
# --------------------------------------

onx = fx2onnx.to_onnx(model, (a, tol), dynamic_shapes=({0: "n"}, None))
print("main graph:", [n.op_type for n in onx.graph.node])
loop = next(n for n in onx.graph.node if n.op_type == "Loop")
print("Loop body:", [n.op_type for n in loop.attribute[0].g.node])

# %%
# The number of iterations changes with the inputs, onnxruntime follows.

for values, t in [([2.0, 9.0, 100.0], 1e-4), ([1e6, 0.5], 1e-2), ([4.0], 1e-6), ([7.0] * 10, 1.0)]:
    args = (torch.tensor(values), torch.tensor(t))
    report = validate(onx, model, args, atol=1e-4)
    got_root, got_steps = run_onnx(onx, args)
    print(f"{len(values)} values, tol={t}: {int(got_steps)} steps, {report}")
    assert report.ok, report

# %%
# The official exporter
# ---------------------

official = torch.onnx.export(
    model, (a, tol), dynamic_shapes=({0: "n"}, None), dynamo=True, verbose=False
).model_proto
onnx.checker.check_model(official)
report = validate(official, model, (torch.tensor([1e6, 0.5]), torch.tensor(1e-2)), atol=1e-4)
print(f"torch.onnx.export: {[n.op_type for n in official.graph.node]}: {report}")
assert "Loop" in [n.op_type for n in official.graph.node]
assert report.ok, report

# %%
# Number of steps per tolerance, computed by onnxruntime.

tolerances = [10.0**-k for k in range(0, 7)]
values = torch.tensor([2.0, 1e4, 1e6])
steps_per_tol = [float(run_onnx(onx, (values, torch.tensor(t)))[1]) for t in tolerances]
expected = [float(model(values, torch.tensor(t))[1]) for t in tolerances]
assert steps_per_tol == expected, (steps_per_tol, expected)
fig, ax = plt.subplots(figsize=(6, 3))
ax.semilogx(tolerances, steps_per_tol, "o-")
ax.set_xlabel("tolerance")
ax.set_ylabel("iterations of the ONNX Loop")
ax.set_title("Newton's method for sqrt([2, 1e4, 1e6])")
fig.tight_layout()
