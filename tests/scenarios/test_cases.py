"""The zoo's cases: enough of them, documented, two input sets of different shapes, eager runs."""

from __future__ import annotations

import pytest
import torch

from fx2onnx.scenarios.cases import ZOO_FAMILIES, get_case, get_cases
from fx2onnx.validation import flatten_inputs

ZOO = get_cases(list(ZOO_FAMILIES))


def test_zoo_size():
    assert len(ZOO) >= 80
    assert {c.family for c in ZOO.values()} == set(ZOO_FAMILIES)


def test_exportdb_cases():
    cases = get_cases(["exportdb"])
    assert len(cases) >= 30
    case = cases["exportdb_cond_operands"]
    assert case.has_dynamic and "cond" in case.doc
    assert get_case("exportdb_cond_operands") is case


def test_unknown_case():
    with pytest.raises(KeyError, match="No scenario named"):
        get_case("NotACase")


@pytest.mark.parametrize("name", sorted(ZOO))
def test_case_runs_in_eager(name):
    case = ZOO[name]
    assert case.doc and case.code.startswith("class ")
    assert len(case.inputs) >= 2 and case.has_dynamic
    shapes = [[tuple(t.shape) for t in flatten_inputs(*case.inputs[i]) if isinstance(t, torch.Tensor)] for i in (0, 1)]
    assert shapes[0] != shapes[1], f"{name}: the two input sets have the same shapes"
    for i in (0, 1):
        args, kwargs = case.input_set(i)
        with torch.no_grad():
            assert case.make_model()(*args, **kwargs) is not None


def test_input_set_is_a_copy():
    case = ZOO["AddInplaceOnInput"]
    before = case.inputs[0][0][0].clone()
    args, kwargs = case.input_set(0)
    case.make_model()(*args, **kwargs)
    torch.testing.assert_close(case.inputs[0][0][0], before)


def test_dynamic_strings_become_dims():
    ds = ZOO["TwoTensors"].torch_dynamic_shapes()
    assert ds[0][0] is torch.export.Dim.DYNAMIC and ds[1][1] is torch.export.Dim.DYNAMIC
