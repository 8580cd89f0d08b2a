"""The model zoo: rows for a few architectures, in worker processes, merged into a rows file."""

from __future__ import annotations

import tempfile

import pytest
import torch

from fx2onnx.zoo.architectures import (
    build_rows, load_rows, make_tasks, run, run_row, save_rows, select_architectures,
)
from fx2onnx.zoo.zoo_inputs import build_zoo_model, infer_dynamic_shapes
from fx2onnx.inputs.discover import get_architecture


def test_infer_dynamic_shapes():
    a = {"x": torch.zeros(2, 3), "y": [torch.zeros(5, 4)], "flag": True}
    b = {"x": torch.zeros(3, 3), "y": [torch.zeros(7, 4)], "flag": True}
    shapes = infer_dynamic_shapes(a, b, {(2, 3): "batch"})
    assert shapes == {"x": {0: "batch"}, "y": [{0: "dim_5_7"}], "flag": None}


def test_zoo_model_with_cache():
    zoo = build_zoo_model(get_architecture("llama"), with_cache=True)
    cache = zoo.inputs2["past_key_values"]
    assert cache.get_seq_length() == 11  # longer than the sliding window of the tiny configurations
    assert zoo.dynamic_shapes["input_ids"] == {0: "batch", 1: "seq"}
    assert zoo.dynamic_shapes["attention_mask"] == {0: "batch", 1: "total_seq"}
    assert zoo.dynamic_shapes["past_key_values"][0] == {0: "batch", 2: "past_seq"}


def test_tasks_order():
    names = select_architectures("^(bert|llama|gpt2)$")
    assert names == ["llama", "gpt2", "bert"]  # the priority list first
    tasks = make_tasks(["llama", "albert"], ["to_onnx"])
    # a masked LM has no cache row
    assert tasks == [("llama", "to_onnx", False), ("llama", "to_onnx", True), ("albert", "to_onnx", False)]


def test_skipped_row():
    row = run_row("gemma3", "to_onnx", False)
    assert not row["success"] and row["step"] == "config"
    assert "multimodal" in row["error"]


@pytest.fixture(scope="module")
def rows():
    return run(only="^(gpt2|albert)$", exporters=["to_onnx"], workers=1, progress=False)


@pytest.mark.slow
def test_run_in_workers(rows):
    assert [(r["architecture"], r["cache"]) for r in rows] == [("gpt2", False), ("gpt2", True), ("albert", False)]
    for r in rows:
        assert r["success"], r
        assert r["step"] is None and r["max_abs"] < 1e-3 and r["time"] > 0


@pytest.mark.slow
def test_build_rows_merges(tmp_path, rows):
    path = tmp_path / "rows.json"
    # a row of another architecture already in the file is kept
    from fx2onnx.zoo.architectures import save_rows

    other = dict(rows[2], architecture="other", hash="x")
    save_rows([other], path, {})
    merged, meta = build_rows(path, only="^albert$", exporters=["to_onnx"], workers=1, progress=False)
    assert [(r["architecture"], r["success"]) for r in merged] == [("albert", True), ("other", True)]
    assert meta["computed"] == 1 and "--only" in meta["command"]
    # nothing changed: nothing runs again
    again, meta = build_rows(path, only="^albert$", exporters=["to_onnx"], workers=1, progress=False)
    assert meta["computed"] == 0 and load_rows(path)[0] == again
    # a run restricted with --only keeps the command which made the file, and says it updated it
    assert "--only" in meta["command"]
    assert meta["updated_by"] == "python -m fx2onnx models --only '^albert$' --exporters to_onnx"


@pytest.mark.slow
def test_build_rows_generate_missing(tmp_path, rows):
    # the gpt2 cache row without its generate column runs again, the others do not
    from fx2onnx.zoo.architectures import lacks_generation, save_rows

    path = tmp_path / "rows.json"
    old = [dict(r) for r in rows]
    for r in old:
        r.pop("generate", None)
    assert [lacks_generation(r) for r in old] == [False, True, False]  # no cache, cache, a masked LM
    save_rows(old, path, {"command": "python -m fx2onnx models"})
    merged, meta = build_rows(path, exporters=["to_onnx"], workers=1, progress=False, generate_missing=True)
    assert meta["computed"] == 1 and "--generate-missing" in meta["updated_by"]
    gpt2 = next(r for r in merged if r["architecture"] == "gpt2" and r["cache"])
    assert gpt2["generate"]["equal"] and gpt2["generate"]["matched"] == 40, gpt2
    assert not any(lacks_generation(r) for r in merged)


def test_saved_rows_name_no_temporary_folder(tmp_path):
    # an error naming the checkpoint the run read is stored without the run's temporary folder
    checkpoint = f"{tempfile.gettempdir()}/fx2onnx-generate-abc123/checkpoint"
    row = {"architecture": "a", "exporter": "to_onnx", "cache": True,
           "error": f"export: KeyError: \"2 tensor(s) are not in the checkpoint '{checkpoint}': 'x'\""}
    save_rows([row], tmp_path / "rows.json", {})
    (stored,), _ = load_rows(tmp_path / "rows.json")
    assert stored["error"] == "export: KeyError: \"2 tensor(s) are not in the checkpoint '<temporary folder>': 'x'\""
