"""Every case of torch's export database converts with to_onnx and matches eager.

The cases come from ``torch._export.db.examples.all_examples()`` and carry their
inputs and dynamic shapes. A case torch.export itself cannot capture is checked
to fail in torch.export too (so the list changes when torch changes).
"""

from __future__ import annotations

import copy

import pytest
import torch

import fx2onnx

from torch._export.db.examples import all_examples

CASES = dict(sorted(all_examples().items()))

#: cases torch.export.export rejects itself, strict or not (torch 2.13), which to_onnx captures
#: with size-oblivious sizes (``round(x.shape[0] / 2)``)
TORCH_EXPORT_FAILS = {"dynamic_shape_round"}

#: cases needing a control flow converter (torch.cond -> If, torch.map -> Scan)
CONTROL_FLOW = {
    "cond_closed_over_variable": torch.ops.higher_order.cond,
    "cond_operands": torch.ops.higher_order.cond,
    "dynamic_shape_map": torch.ops.higher_order.map_impl,
}


def _grow_dynamic_dims(value, spec):
    """A second input where every dynamic dimension is 2 larger (other shapes, other values)."""
    if isinstance(value, torch.Tensor):
        shape = list(value.shape)
        if isinstance(spec, dict):
            for axis in spec:
                shape[axis] += 2
        if value.dtype.is_floating_point:
            return torch.randn(shape, dtype=value.dtype)
        return torch.randint(0, 5, shape, dtype=value.dtype)
    return value


def _second_inputs(case):
    ds = case.dynamic_shapes
    if not ds:
        return None
    import inspect

    names = list(inspect.signature(case.model.forward).parameters)
    args = tuple(
        _grow_dynamic_dims(a, ds.get(names[i]) if isinstance(ds, dict) else ds[i])
        for i, a in enumerate(case.example_args)
    )
    return args, dict(case.example_kwargs)


def test_database_is_the_expected_one():
    # if torch adds or removes cases, this list must be reviewed
    assert len(CASES) == 36, sorted(CASES)
    assert TORCH_EXPORT_FAILS | set(CONTROL_FLOW) <= set(CASES)


# every case non-strict in the fast tier, strict (dynamo, slower) in the slow tier too
@pytest.mark.parametrize("strict", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["nonstrict", "strict"])
@pytest.mark.parametrize("name", list(CASES))
def test_exportdb_case(name, strict):
    case = CASES[name]
    model = case.model
    args, kwargs, ds = case.example_args, dict(case.example_kwargs), case.dynamic_shapes
    if name in TORCH_EXPORT_FAILS:
        with pytest.raises(Exception):
            torch.export.export(model, args, kwargs, dynamic_shapes=ds, strict=strict)
    onx = fx2onnx.to_onnx(model, copy.deepcopy(args), copy.deepcopy(kwargs), dynamic_shapes=ds, strict=strict)
    if name in CONTROL_FLOW:
        assert {"If", "Scan", "Loop"} & {n.op_type for n in onx.graph.node}, "the control flow was lost"
    report = fx2onnx.validate(onx, model, args, kwargs, atol=1e-4)
    assert report.ok, report
    second = _second_inputs(case)
    if second is not None:
        report = fx2onnx.validate(onx, model, *second, atol=1e-4)
        assert report.ok, report
