"""The runner: real exports of a few cases, known failures, timeouts and crashes of workers."""

from __future__ import annotations

import importlib
import os
import time

import pytest

from fx2onnx.scenarios import run

# the function fx2onnx.scenarios.run hides the module of the same name
run_module = importlib.import_module("fx2onnx.scenarios.run")


@pytest.fixture(scope="module")
def rows():
    cases = ["OneTensor", "IfOnValue", "IntArgument", "ListVariableLength"]
    return {
        (r["case"], r["exporter"], r["dynamic"]): r
        for r in run(cases, exporters=["export-nostrict", "custom"], workers=0, progress=False)
    }


def test_success_static_and_dynamic(rows):
    for exporter in ("export-nostrict", "custom"):
        for dynamic in (False, True):
            r = rows["OneTensor", exporter, dynamic]
            assert r["success"], r
            assert r["step"] is None and r["error"] is None
            assert r["max_abs"] <= 1e-4 and r["time"] > 0
    assert "Relu" in rows["OneTensor", "custom", True]["graph"]
    assert "relu" in rows["OneTensor", "export-nostrict", True]["graph"]


def test_known_failure_at_export(rows):
    r = rows["IfOnValue", "export-nostrict", False]
    assert not r["success"] and r["step"] == "export"
    assert "data-dependent" in r["error"]
    # to_onnx rewrites the `if` into torch.cond (an ONNX If), checked on both input sets
    for dynamic in (False, True):
        r = rows["IfOnValue", "custom", dynamic]
        assert r["success"], r
        assert "If" in r["graph"]


def test_int_argument_becomes_a_constant(rows):
    # static: exported and checked with n=3, fine
    assert rows["IntArgument", "custom", False]["success"]
    # dynamic: checked with n=4, the ONNX model still multiplies by 3
    r = rows["IntArgument", "custom", True]
    assert not r["success"] and r["step"] == "discrepancy" and r["max_abs"] > 0.1
    # the exported program refuses the new value with a guard
    r = rows["IntArgument", "export-nostrict", True]
    assert not r["success"] and r["step"] == "run" and "n == 3" in r["error"]


def test_list_length_is_not_dynamic(rows):
    assert rows["ListVariableLength", "custom", False]["success"]
    r = rows["ListVariableLength", "custom", True]
    assert not r["success"] and r["step"] == "onnxruntime" and "expects 2 inputs" in r["error"]


def test_worker_processes_give_the_same_results():
    rows = run(["OneTensor", "IfOnValue"], exporters=["export-nostrict"], workers=2, progress=False)
    assert [(r["case"], r["dynamic"], r["success"], r["step"]) for r in rows] == [
        ("OneTensor", False, True, None),
        ("OneTensor", True, True, None),
        ("IfOnValue", False, False, "export"),
        ("IfOnValue", True, False, "export"),
    ]


def _hang_or_die(case_name, exporter, dynamic):
    if case_name == "OneTensor":
        time.sleep(600)
    os._exit(3)


def test_timeout_and_crash(monkeypatch):
    # forked workers inherit the patched function
    monkeypatch.setattr(run_module, "run_task", _hang_or_die)
    begin = time.perf_counter()
    rows = run(["OneTensor", "TwoTensors"], exporters=["custom"], dynamic=(False,), workers=2, timeout=8, progress=False, mp_context="fork")
    assert time.perf_counter() - begin < 60
    assert [(r["case"], r["step"]) for r in rows] == [("OneTensor", "timeout"), ("TwoTensors", "crash")]
    assert not any(r["success"] for r in rows)
    assert "exit code 3" in rows[1]["error"]


def test_unknown_exporter():
    with pytest.raises(ValueError, match="Unknown exporters"):
        run(["OneTensor"], exporters=["onnx-magic"])
