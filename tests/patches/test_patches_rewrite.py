"""Rewriting if statements on tensors into torch.cond with ast."""

from __future__ import annotations

import os

import pytest
import torch

import fx2onnx
from fx2onnx.patches import torch_export_patches
from fx2onnx.patches.rewrite import find_ifs_to_rewrite, rewrite_function

DYN = torch.export.Dim.DYNAMIC


class ReturnBranches(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


class AssignBranches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, y):
        total = x.sum()
        z = y + 1
        if total > 0:
            a = self.linear(x)
            z = z * a
        else:
            a = x - y
        return a + z


class RaiseBranch(torch.nn.Module):
    def forward(self, x):
        if (x < -100).any():
            raise ValueError("values below -100")
        if x.shape[0] > 100:  # a test on shapes: kept
            return x
        return x.abs()


def _export(model, args):
    ds = tuple({0: DYN} for _ in args)
    return torch.export.export(model, args, dynamic_shapes=ds, strict=False)


def test_find_ifs():
    assert [t for _, t in find_ifs_to_rewrite(ReturnBranches.forward)] == ["x.sum() > 0"]
    assert [t for _, t in find_ifs_to_rewrite(AssignBranches.forward)] == ["total > 0"]
    assert [t for _, t in find_ifs_to_rewrite(RaiseBranch.forward)] == ["(x < -100).any()"]


@pytest.mark.parametrize("cls", [ReturnBranches, AssignBranches])
def test_rewritten_function_matches(cls):
    torch.manual_seed(0)
    model = cls().eval()
    rewritten = rewrite_function(cls.forward)
    assert "torch.cond" in rewritten.source and rewritten.lines
    nargs = 1 if cls is ReturnBranches else 2
    for sign in (1, -1):
        args = tuple(sign * torch.rand(3, 4) + sign * 0.1 for _ in range(nargs))
        torch.testing.assert_close(rewritten.function(model, *args), model(*args))


@pytest.mark.parametrize("cls", [ReturnBranches, pytest.param(AssignBranches, marks=pytest.mark.slow)])
def test_rewrite_makes_it_exportable(cls, tmp_path):
    torch.manual_seed(0)
    model = cls().eval()
    nargs = 1 if cls is ReturnBranches else 2
    args = tuple(torch.rand(3, 4) for _ in range(nargs))
    with pytest.raises(Exception, match="data-dependent|Data-dependent|GuardOnDataDependent"):
        _export(model, args)
    dump = tmp_path / "dump"
    with torch_export_patches(rewrite=model, dump_rewriting=dump) as modificator:
        assert [r.status for r in modificator.reports if r.kind == "rewrite"] == ["applied"]
        onx = torch.onnx.export(model, args, dynamic_shapes=tuple({0: "batch"} for _ in args), dynamo=True)
    assert cls.forward.__name__ == "forward" and "torch.cond" not in str(cls.forward.__code__.co_names)
    files = sorted(os.listdir(dump))
    assert len(files) == 3 and any(f.endswith(".diff") for f in files)
    diff = next(open(dump / f).read() for f in files if f.endswith(".diff"))
    assert "+" in diff and "torch.cond" in diff
    # both branches, other batch sizes, on onnxruntime
    for sign in (1, -1):
        other = tuple(sign * torch.rand(5, 4) + sign * 0.1 for _ in range(nargs))
        report = fx2onnx.validate(onx.model_proto, model, other)
        assert report.ok, report


def test_rewrite_raise_into_check():
    model = RaiseBranch()
    rewritten = rewrite_function(RaiseBranch.forward)
    assert "_fx2onnx_check_false" in rewritten.source
    assert "x.shape[0] > 100" in rewritten.source  # not rewritten
    with pytest.raises(RuntimeError, match="values below -100"):
        rewritten.function(model, torch.full((2, 3), -200.0))
    with torch_export_patches(rewrite=RaiseBranch):
        ep = _export(model, (torch.randn(3, 4),))
    x = torch.randn(6, 4)
    torch.testing.assert_close(ep.module()(x), x.abs())


def test_rewrite_closure_and_errors():
    factor = 3.0

    def with_closure(x):
        if x.sum() > 0:
            return x * factor
        return x

    g = rewrite_function(with_closure).function
    torch.testing.assert_close(g(torch.ones(2)), torch.ones(2) * 3)
    with pytest.raises(ValueError, match="local function"):
        with torch_export_patches(rewrite=[with_closure]):
            pass
    with pytest.raises(TypeError, match="rewrite must be"):
        with torch_export_patches(rewrite=3):
            pass


def test_code_needing_rewriting():
    rows = fx2onnx.code_needing_rewriting("LlamaForCausalLM")
    rope = [r for r in rows if r["function"].endswith("dynamic_frequency_update")]
    assert rope and all(r["handled_by"] for r in rope)
    assert any("seq_len > max_seq_len_cached" in r["test"] for r in rope)
    with pytest.raises(ValueError, match="no class"):
        fx2onnx.code_needing_rewriting("NotAModel")


class Chained(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        if x.mean() < -1:
            return x + 10
        return x - 1


def test_rewrite_chained_ifs():
    rewritten = rewrite_function(Chained.forward)
    assert rewritten.source.count("torch.cond(") == 2 and "_fx2onnx_true_1" in rewritten.source
    model = Chained()
    with torch_export_patches(rewrite=model):
        ep = _export(model, (torch.ones(3, 2),))
    for x in (torch.ones(4, 2), -5 * torch.ones(4, 2), -0.5 * torch.ones(4, 2)):
        torch.testing.assert_close(ep.module()(x), model(x))
