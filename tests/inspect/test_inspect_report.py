"""export_report: every submodule exported on its own, one row each."""

from __future__ import annotations

import csv

import pytest
import torch

import fx2onnx
from fx2onnx.inspect.report import COLUMNS, deepest_failures, record_calls, report_to_markdown, save_report


@torch.library.custom_op("fx2onnx_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # a test on data: torch.export cannot capture it
            return x.relu()
        return -x


class CustomOp(torch.nn.Module):
    def forward(self, x):
        return twice(x)


class Block(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.inner = inner

    def forward(self, x):
        return self.inner(self.linear(x))


class Model(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.first = Block(torch.nn.ReLU())
        self.second = Block(inner)
        self.shared = torch.nn.Tanh()

    def forward(self, x, scale=2.0):
        return self.shared(self.second(self.shared(self.first(x))) * scale)


def _model(inner: torch.nn.Module) -> Model:
    torch.manual_seed(0)
    return Model(inner).eval()


def test_record_calls_copies_inputs_and_counts_calls():
    model = _model(torch.nn.GELU())
    x = torch.randn(3, 4)
    calls, outputs = record_calls(model, (x,))
    assert list(calls) == ["", "first", "first.linear", "first.inner", "second", "second.linear", "second.inner", "shared"]
    assert calls["shared"].calls == 2 and calls["first"].calls == 1
    torch.testing.assert_close(calls[""].outputs, outputs)
    torch.testing.assert_close(calls["first.inner"].outputs, model.first(x))
    assert list(record_calls(model, (x,), max_depth=1)[0]) == ["", "first", "second", "shared"]


def test_every_submodule_ok_with_dynamic_shapes():
    model = _model(torch.nn.GELU())
    rows = fx2onnx.export_report(model, (torch.randn(3, 4),), dynamic_shapes=({0: "batch"},))
    assert [tuple(r) for r in rows] == [COLUMNS] * len(rows)
    assert all(r["status"] == "OK" for r in rows), [(r["path"], r["error"]) for r in rows]
    assert all(r["validation"] == "OK" and r["max_abs"] < 1e-5 for r in rows)
    assert deepest_failures(rows) == []


def test_capture_failure_is_located():
    rows = fx2onnx.export_report(_model(DataDependent()), (torch.randn(3, 4),), as_frame=True)
    status = dict(zip(rows["path"], rows["status"]))
    assert status == {
        "": "FAIL capture",
        "first": "OK",
        "first.linear": "OK",
        "first.inner": "OK",
        "second": "FAIL capture",
        "second.linear": "OK",
        "second.inner": "FAIL capture",
        "shared": "OK",
    }
    assert deepest_failures(rows.to_dict("records")) == ["second.inner"]
    error = rows.set_index("path").loc["second.inner", "error"]
    assert "data" in error.lower() or "guard" in error.lower(), error
    assert rows.set_index("path").loc["second.inner", "conversion"] == "-"


@pytest.mark.slow
def test_conversion_failure_and_capture_only_exporter():
    model = _model(CustomOp())
    rows = fx2onnx.export_report(model, (torch.randn(3, 4),))
    by_path = {r["path"]: r for r in rows}
    assert by_path["second.inner"]["capture"] == "OK"
    assert by_path["second.inner"]["status"] == "FAIL conversion"
    assert "fx2onnx_test.twice" in by_path["second.inner"]["error"] or "twice" in by_path["second.inner"]["error"]
    assert deepest_failures(rows) == ["second.inner"]
    skipped = fx2onnx.export_report(model, (torch.randn(3, 4),), skip_classes=(torch.nn.Linear, CustomOp))
    assert [r["path"] for r in skipped] == ["", "first", "first.inner", "second", "shared"]
    assert deepest_failures(skipped) == ["second"]
    captured = fx2onnx.export_report(model, (torch.randn(3, 4),), exporter="torch.export", max_depth=1)
    assert [(r["path"], r["status"], r["conversion"]) for r in captured] == [
        ("", "OK", "-"),
        ("first", "OK", "-"),
        ("second", "OK", "-"),
        ("shared", "OK", "-"),
    ]


def test_save_report_csv_and_markdown(tmp_path):
    rows = fx2onnx.export_report(_model(DataDependent()), (torch.randn(3, 4),), max_depth=1)
    save_report(rows, tmp_path / "r.csv")
    with open(tmp_path / "r.csv", newline="") as f:
        read = list(csv.DictReader(f))
    assert [r["status"] for r in read] == [r["status"] for r in rows]
    save_report(rows, tmp_path / "r.md")
    text = (tmp_path / "r.md").read_text()
    assert text == report_to_markdown(rows)
    assert text.splitlines()[0].startswith("| path | class |") and "FAIL capture" in text


def test_command_line_report(tmp_path, monkeypatch, capsys):
    from fx2onnx.__main__ import main

    (tmp_path / "cli_report_model.py").write_text(
        "import torch\n"
        "class Check(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.relu() if x.sum() > 0 else -x\n"
        "def build():\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Check())\n"
        "    return model, (torch.randn(3, 4),), ({0: 'batch'},)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "report.md"
    code = main(["report", "cli_report_model:build", "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 1
    assert "1/3 submodules export" in printed and "1 (Check): FAIL capture" in printed
    assert "| 0 | Linear | 1 | 1 | OK |" in out.read_text()
