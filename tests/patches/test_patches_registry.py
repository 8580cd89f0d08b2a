"""Patches: targets, skipped patches, restore on exit (also after an exception), custom patches."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch.utils import _pytree as pytree

import fx2onnx
from fx2onnx.zoo import get_tiny_model
from fx2onnx.patches import Patch, list_patches, torch_export_patches
from fx2onnx.patches.context import collect_patches
from fx2onnx.patches.registry import PatchSet, resolve_target


class Small(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


def _all_patches():
    get_tiny_model("llama")  # imports the modeling module: its rotary embedding gets a patch
    return collect_patches(
        patch_torch=True,
        patch_transformers=True,
        stop_if_static=1,
        rewrite=Small,
        custom_patches=[CustomSmall],
    )


class CustomSmall:
    """Replaces Small.forward."""

    target_class = Small

    def forward(self, x):
        return x + 100


def _snapshot():
    values = {}
    for patch in _all_patches():
        owner, attribute, _ = resolve_target(patch.target)
        values[patch.target] = inspect.getattr_static(owner, attribute)
    return values, dict(pytree.SUPPORTED_NODES)


def test_public_names():
    assert fx2onnx.torch_export_patches is torch_export_patches
    assert fx2onnx.bypass_export_some_errors is torch_export_patches
    assert fx2onnx.list_patches is list_patches


def test_every_target_exists_and_is_restored():
    before, nodes_before = _snapshot()
    assert len(before) >= 5  # rewrite and custom patch share Small.forward
    with torch_export_patches(
        patch_transformers=True, stop_if_static=1, rewrite=Small, custom_patches=[CustomSmall]
    ) as modificator:
        statuses = {r.name: r.status for r in modificator.reports}
        assert statuses["catch_constraints"] == "applied"
        assert statuses["stop_if_static"] == "applied"
        assert statuses["DynamicLayer.lazy_initialization"] == "applied"
        assert statuses["LlamaRotaryEmbedding.forward"] == "applied"
        from transformers.cache_utils import DynamicCache

        # registered unless someone else did it before (then kept as it is)
        assert statuses["DynamicCache"] == ("skipped" if DynamicCache in nodes_before else "applied")
        # the rewrite and the custom patch target the same method: the last one wins
        assert Small().forward(torch.ones(2)).tolist() == [101.0, 101.0]
        during, nodes_during = _snapshot()
        # a target found by its signature (the gated delta rules) is not found while replaced: changed too
        changed = [t for t in before if during.get(t) is not before[t]]
        assert len(changed) == len(before)
        assert DynamicCache in nodes_during
    after, nodes_after = _snapshot()
    assert all(after[t] is before[t] for t in before)
    assert nodes_after.keys() == nodes_before.keys()


def test_restored_after_exception():
    before, nodes_before = _snapshot()
    with pytest.raises(RuntimeError, match="boom"):
        with torch_export_patches(patch_transformers=True, stop_if_static=2, rewrite=Small):
            raise RuntimeError("boom")
    after, nodes_after = _snapshot()
    assert all(after[t] is before[t] for t in before)
    assert nodes_after.keys() == nodes_before.keys()


def test_skipped_patches_have_a_reason():
    missing = Patch("missing", "custom", "torch.not_a_module.not_a_function", make=lambda f: f)
    missing_attr = Patch("missing_attr", "custom", "math.not_a_function", make=lambda f: f)
    changed = Patch("changed", "custom", "math.sqrt", make=lambda f: f, expected_args=("x", "y"))
    guarded = Patch("guarded", "custom", "math.sqrt", make=lambda f: f, guard=lambda f: "not needed here")
    with torch_export_patches(
        patch_torch=False, custom_patches=[missing, missing_attr, changed, guarded]
    ) as m:
        reports = {r.name: r for r in m.reports if r.kind == "custom"}
    assert all(r.status == "skipped" for r in reports.values())
    assert "target missing" in reports["missing"].reason
    assert "math.not_a_function does not exist" in reports["missing_attr"].reason
    assert "signature changed" in reports["changed"].reason and "'y'" in reports["changed"].reason
    assert reports["guarded"].reason == "not needed here"
    assert math.sqrt(4) == 2


def test_patchset_on_inherited_attribute():
    class A:
        def f(self):
            return 1

    class B(A):
        pass

    import sys

    module = sys.modules[__name__]
    module.B_for_test = B
    try:
        patch = Patch("b", "custom", f"{__name__}.B_for_test.f", make=lambda original: lambda self: 2)
        with PatchSet([patch]):
            assert B().f() == 2 and A().f() == 1
        assert B().f() == 1 and "f" not in B.__dict__
    finally:
        del module.B_for_test


def test_custom_patch_class():
    with torch_export_patches(patch_torch=False, custom_patches=[CustomSmall]) as m:
        assert [r.status for r in m.reports if r.kind == "custom"] == ["applied"]
        assert Small()(torch.zeros(2)).tolist() == [100.0, 100.0]
    assert Small()(torch.zeros(2)).tolist() == [-1.0, -1.0]
    with pytest.raises(TypeError, match="target_class"):
        with torch_export_patches(custom_patches=[object()]):
            pass


def test_list_patches():
    get_tiny_model("llama")
    rows = list_patches()
    kinds = {r["kind"] for r in rows}
    assert {"torch", "transformers", "cache"} <= kinds
    assert all(r["status"] in ("applicable", "skipped") for r in rows)
    assert all(r["status"] == "applicable" or r["reason"] for r in rows)
    names = {r["name"] for r in rows}
    assert {
        "catch_constraints",
        "stop_if_static",
        "DynamicLayer.lazy_initialization",
        "DynamicCache",
    } <= names


def test_transformers_patch_skipped_when_target_changed(monkeypatch):
    """A version of transformers without torch.tensor([]) in lazy_initialization: skipped."""
    from transformers.cache_utils import DynamicLayer

    def lazy_initialization(self, key_states, value_states):
        self.keys = key_states[..., :0, :]
        self.values = value_states[..., :0, :]
        self.is_initialized = True

    monkeypatch.setattr(DynamicLayer, "lazy_initialization", lazy_initialization)
    with torch_export_patches(patch_transformers=True) as m:
        report = {r.name: r for r in m.reports}["DynamicLayer.lazy_initialization"]
        assert DynamicLayer.lazy_initialization is lazy_initialization
    assert report.status == "skipped" and "does not create torch.tensor([])" in report.reason

    def other_signature(self, keys):
        pass

    monkeypatch.setattr(DynamicLayer, "lazy_initialization", other_signature)
    with torch_export_patches(patch_transformers=True) as m:
        report = {r.name: r for r in m.reports}["DynamicLayer.lazy_initialization"]
    assert report.status == "skipped" and "signature changed" in report.reason
