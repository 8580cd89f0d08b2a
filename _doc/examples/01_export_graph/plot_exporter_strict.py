"""
.. _l-plot-exporter-strict:

strict=True or strict=False?
============================

:func:`torch.export.export` has two ways to capture a model. ``strict=True``
traces the Python bytecode with TorchDynamo: it understands Python but refuses
what it cannot analyze. ``strict=False`` (the default since torch 2.7, and
:func:`fx2onnx.to_onnx`'s default) runs the Python code as it is with fake
tensors: any Python runs, its results become constants. Most models give the
same graph in both modes; this example shows where they differ and where
both fail.
"""

import time

import numpy as np
import torch
from torch._higher_order_ops.scan import scan

import fx2onnx
from fx2onnx.inspect.dot import GraphPicture


def targets(ep):
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


def export_both(model, args, **kwargs):
    """{strict: ExportedProgram or the exception}."""
    results = {}
    for strict in (True, False):
        try:
            results[strict] = ep = torch.export.export(model, args, strict=strict, **kwargs)
            print(f"strict={strict}: OK, {len(targets(ep))} nodes")
        except Exception as e:
            results[strict] = e
            print(f"strict={strict}: {type(e).__name__}: {str(e).strip().splitlines()[0][:100]}")
    return results


# %%
# A Python function dynamo cannot trace
# -------------------------------------
#
# ``time.perf_counter`` is a builtin: strict mode refuses it, non-strict mode
# calls it once and keeps its result.


class Timer(torch.nn.Module):
    def forward(self, x):
        return x + (1.0 if time.perf_counter() > 0 else 0.0)


x = torch.randn(4, 3)
res = export_both(Timer(), (x,))
assert isinstance(res[True], torch._dynamo.exc.Unsupported) and "time.perf_counter" in str(res[True])
assert targets(res[False]) == ["aten.add.Tensor"]

# %%
# numpy changes the graph
# -----------------------
#
# Dynamo translates numpy calls into torch operators: ``arange`` is in the
# graph. Non-strict mode runs numpy: the result is a constant tensor.


class NumpyOffsets(torch.nn.Module):
    def forward(self, x):
        return x + torch.from_numpy(np.arange(x.shape[1], dtype=np.float32))


res = export_both(NumpyOffsets(), (x,))
kinds = [s.kind.name for s in res[False].graph_signature.input_specs]
print("strict=True ", targets(res[True]), "\nstrict=False", targets(res[False]), kinds)
assert "aten.arange.start_step" in targets(res[True]) and "CONSTANT_TENSOR" in kinds
assert all(torch.allclose(ep.module()(x), NumpyOffsets()(x)) for ep in res.values())

# %%
# scan, side by side
# ------------------
#
# :func:`torch._higher_order_ops.scan` loops over the first dimension; its body
# uses a parameter of the module. Both modes give the same graph, and
# :func:`fx2onnx.to_onnx` turns it into an ONNX ``Scan``. (A body modifying
# anything outside itself, a Python list, fails in both modes.) Both modes give the
# graph drawn below: the loop is a ``scan`` whose body is a submodule.


class CumulativeMatMul(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3) / 3)

    def forward(self, x):
        def step(carry, row):
            carry = carry @ self.w + row
            return carry, carry.sum().reshape(1)

        return scan(step, torch.zeros_like(x[0]), x)


model = CumulativeMatMul()
res = export_both(model, (x,), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
assert res[True].graph_module.code == res[False].graph_module.code
picture = GraphPicture(res[False], title="CumulativeMatMul: scan and its body")
assert picture.dot.count("subgraph cluster_") >= 1
for strict in (True, False):
    onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=({0: "steps"},), strict=strict)
    check = fx2onnx.validate(onx, model, (torch.randn(7, 3),), atol=1e-5)
    print(f"to_onnx(strict={strict}):", [n.op_type for n in onx.graph.node], check)
    assert check.ok and "Scan" in [n.op_type for n in onx.graph.node]

# %%
# In place: ``x[..., i] = y``
# ---------------------------
#
# With a tensor ``i``, the position depends on the data: both modes fail.
# With an int ``i``, both modes specialize it, even declared dynamic: the
# program checks ``i == 1`` when it runs.


class SetColumn(torch.nn.Module):
    def forward(self, x, i, y):
        x = x.clone()
        x[..., i] = y
        return x


y = torch.randn(4)
res = export_both(SetColumn(), (x, torch.tensor(1), y))
assert isinstance(res[True], torch._dynamo.exc.UserError)
assert isinstance(res[False], torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode)
res = export_both(SetColumn(), (x, 1, y), dynamic_shapes=(None, torch.export.Dim.DYNAMIC, None))
for ep in res.values():
    assert "aten.select.int" in targets(ep)
    try:
        ep.module()(x, 2, y)
    except AssertionError as e:  # i is specialized: i=2 fails
        assert "Guard failed: i == 1" in str(e), e
    else:
        raise AssertionError("i is specialized, i=2 should fail")

# %%
# A mask replaces the assignment: no data-dependent index, one graph for
# every ``i``, in both modes.


class SetColumnWhere(torch.nn.Module):
    def forward(self, x, i, y):
        return torch.where(torch.arange(x.shape[-1]) == i, y.unsqueeze(-1), x)


for strict in (True, False):
    onx = fx2onnx.to_onnx(SetColumnWhere(), (x, torch.tensor(1), y), strict=strict)
    assert all(fx2onnx.validate(onx, SetColumn(), (x, torch.tensor(i), y)).ok for i in range(3)), strict
print("x[..., i] = y as torch.where: checked for i = 0, 1, 2 in both modes")
