"""
.. _l-plot-exporter-recipes-onnx-exporter-custom-ops-inplace:

torch.onnx.export and a custom op modifying its input in place
==============================================================

A custom op declared with ``mutates_args`` writes into one of its inputs. ONNX has no
in-place operation, so :epkg:`torch.export` rewrites every call into a functional
form, ``auto_functionalized_v2(op, ...)``, returning the op's outputs followed by the
new values of the mutated tensors. With torch==2.13, ``torch.onnx.export(...,
dynamo=True)`` cannot convert that node, with or without a translation of the op.
This example shows the exact failure, then a recipe that works: a functional twin of
the op.

An in-place custom op
---------------------
"""

import onnxscript
import torch
from onnxscript import FLOAT
from onnxscript import opset18 as op

import fx2onnx
from fx2onnx.inspect.dot import GraphPicture


@torch.library.custom_op("recipes_oe::accumulate_", mutates_args=("total",))
def accumulate_(total: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``total += x.sum(0)``, returns ``x.mean(0)``."""
    total.add_(x.sum(dim=0))
    return x.mean(dim=0)


@accumulate_.register_fake
def _(total, x):
    return x.new_empty(x.shape[1:])


class Model(torch.nn.Module):
    def forward(self, x, total):
        total = total.clone()
        mean = accumulate_(total, x * 2)  # total changes, mean is returned
        return total, mean


torch.manual_seed(0)
model = Model().eval()
x, total = torch.randn(6, 3), torch.zeros(3)
dynamic_shapes = ({0: "rows"}, None)

# %%
# The functional graph the exporter receives:

ep = torch.export.export(model, (x, total), dynamic_shapes=({0: torch.export.Dim.DYNAMIC}, None))
ep = ep.run_decompositions()
(node,) = [n for n in ep.graph.nodes if n.target is torch.ops.higher_order.auto_functionalized_v2]
print(node.format_node())
print("outputs:", node.meta["val"])

# %%
# The failure
# -----------
#
# A translation of ``accumulate_`` returning the mean and the new total, in the
# order of the outputs of ``auto_functionalized_v2``, does not help: the exporter
# fails before looking for a translation.


@onnxscript.script()
def accumulate_onnx(total: FLOAT, x: FLOAT) -> tuple[FLOAT, FLOAT]:
    axes = op.Constant(value_ints=[0])
    return op.ReduceMean(x, axes, keepdims=0), total + op.ReduceSum(x, axes, keepdims=0)


for table in (None, {torch.ops.recipes_oe.accumulate_.default: accumulate_onnx}):
    try:
        torch.onnx.export(
            model,
            (x, total),
            dynamic_shapes=dynamic_shapes,
            dynamo=True,
            custom_translation_table=table,
            verbose=False,
        )
        raise AssertionError("torch.onnx.export converted auto_functionalized_v2: update this example")
    except torch.onnx.OnnxExporterError as e:
        cause = e.__cause__
        print(f"table={table is not None}: {type(e).__name__}: {str(cause).splitlines()[0][:90]}...")
        print(f"    caused by {type(cause.__cause__).__name__}: {cause.__cause__}")
        assert "auto_functionalized_v2" in str(cause)
        assert isinstance(cause.__cause__, KeyError)
        assert "recipes_oe.accumulate_" in str(cause.__cause__)

# %%
# The first argument of ``auto_functionalized_v2`` is the operator itself. The
# exporter converts every argument of a node into an ONNX value and takes any
# object with a ``name`` attribute for a node of the graph: it looks up the
# operator's ``name`` method among the values, hence the ``KeyError``. No
# translation table can fix this: the op must not reach the exporter as an in-place op.
#
# The recipe: a functional twin
# -----------------------------
#
# A second custom op, without ``mutates_args``, runs the in-place kernel on a copy
# and returns every new value. Eager results are unchanged and the exporter sees a
# plain op, translated like any other custom op.


@torch.library.custom_op("recipes_oe::accumulate", mutates_args=())
def accumulate(total: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    new_total = total.clone()
    mean = accumulate_(new_total, x)
    return mean, new_total


@accumulate.register_fake
def _(total, x):
    return x.new_empty(x.shape[1:]), torch.empty_like(total)


class FunctionalModel(torch.nn.Module):
    def forward(self, x, total):
        mean, total = accumulate(total, x * 2)
        return total, mean


functional = FunctionalModel().eval()
onx = torch.onnx.export(
    functional,
    (x, total),
    dynamic_shapes=dynamic_shapes,
    dynamo=True,
    custom_translation_table={torch.ops.recipes_oe.accumulate.default: accumulate_onnx},
    verbose=False,
).model_proto
print("nodes:", [n.op_type for n in onx.graph.node])
picture = GraphPicture(onx, title="the functional twin exported by torch.onnx.export")
assert "ReduceMean" in picture.svg  # the translation of accumulate, inlined

# %%
# The ONNX model of the functional twin is checked against the **original**
# in-place model in eager mode, on several numbers of rows.

for rows in (6, 2, 40):
    args = (torch.randn(rows, 3), torch.randn(3))
    report = fx2onnx.validate(onx, model, args, atol=1e-5)
    print(f"rows={rows}: {report}")
    assert report.ok, report

# %%
# :func:`fx2onnx.to_onnx` converts ``auto_functionalized_v2`` itself: the converter
# of the in-place op returns its outputs followed by the new values of the mutated
# arguments, see :ref:`l-plot-exporter-recipes-custom-custom-ops-inplace`.
