"""The timm and diffusers rows: discovery, one row per exporter, the page."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers")
pytest.importorskip("timm")

from fx2onnx.zoo.diffusers_models import TINY, build_diffusers_model, diffusers_classes  # noqa: E402
from fx2onnx.zoo.library_report import library_page, library_summary  # noqa: E402
from fx2onnx.zoo.library_zoo import run_row  # noqa: E402


def test_diffusers_discovery_covers_the_tiny_configurations():
    found = diffusers_classes()
    assert len(found) > 100
    assert set(TINY) <= set(found)
    assert found["AutoencoderKL.decode"] == "AutoencoderKL"


def test_controlnet_outputs_are_not_all_zero():
    case = build_diffusers_model("ControlNetModel")
    outputs = case.model(case.export_input, **case.export_kwargs)
    assert len(outputs) > 2 and all(o.abs().max() > 0 for o in outputs)


@pytest.mark.parametrize("exporter", ["to_onnx", pytest.param("dynamo", marks=pytest.mark.slow)])
def test_diffusers_row_image(exporter):
    row = run_row("diffusers", "AutoencoderTiny.decode", "AutoencoderTiny", exporter, "image")
    assert row["success"], row
    assert row["max_abs"] < 1e-3 and row["parameters"] > 0
    assert row.get("capture_check") is (True if exporter == "to_onnx" else None)


def test_diffusers_row_without_configuration():
    row = run_row("diffusers", "UNet1DModel", "UNet1DModel", "to_onnx", "batch")
    assert not row["success"] and row["step"] == "config"
    assert "no tiny configuration" in row["error"]


@pytest.mark.slow
def test_timm_row_batch():
    row = run_row("timm", "resnet", "test_resnet", "to_onnx", "batch")
    assert row["success"], row


def test_library_page():
    rows = [
        dict(library="timm", architecture="resnet", model="test_resnet", exporter="to_onnx", shapes="batch",
             success=True, step=None, error=None, max_abs=1e-6, time=1.0, parameters=1000),
        dict(library="timm", architecture="vit", model="test_vit", exporter="to_onnx", shapes="batch",
             success=False, step="conversion", error="UnsupportedOpError: aten::foo. More text...", max_abs=None,
             time=1.0, parameters=2000),
    ]
    text = library_page("timm", rows, {"command": "python -m fx2onnx.zoo.library_zoo timm", "date": "2026-11-25"})
    assert "lib-timm-vit-to_onnx-batch" in text and "✔ 1e-06" in text
    table = library_summary(rows)
    assert table[0]["run"] == 2 and table[0]["matched"] == 1 and table[0]["exported"] == 1


@pytest.mark.slow
def test_large_model_runs_from_a_file(monkeypatch):
    """Above LARGE_MODEL parameters the model is saved with external data and run from the file."""
    import fx2onnx.zoo.library_zoo as zoo

    monkeypatch.setattr(zoo, "LARGE_MODEL", 0)
    for exporter in ("to_onnx", "dynamo"):
        row = run_row("timm", "resnet", "test_resnet", exporter, "batch")
        assert row["success"], row


def test_two_runs_writing_one_rows_file_keep_each_others_rows(monkeypatch, tmp_path):
    """Two sweeps of different models write the same rows file: a row of the other run, written
    while this one runs, is kept (each row is merged into the file as it is now)."""
    import fx2onnx.zoo.library_zoo as zoo

    path = tmp_path / "rows_tasks.json"

    def row(architecture):
        r = zoo._empty_row("tasks", architecture, "M", "to_onnx", "batch")
        r.update(success=True, time=1.0)
        return r

    zoo.save_library_rows([row("a/first")], path, {})
    monkeypatch.setattr(zoo, "discover", lambda library: {"a/mine": "M", "a/mine2": "M"})

    def fake_run_tasks(todo, run, failed, on_row, **kwargs):
        assert [t[1] for t in todo] == ["a/mine", "a/mine2"]
        on_row(row("a/mine"))
        rows, meta = zoo.load_library_rows(path)  # the other run writes its row now
        zoo.save_library_rows(rows + [row("b/other")], path, meta)
        on_row(row("a/mine2"))

    monkeypatch.setattr(zoo, "run_tasks", fake_run_tasks)
    rows, _ = zoo.build_library_rows(path, "tasks", exporters=["to_onnx"], workers=1)
    written, _ = zoo.load_library_rows(path)
    expected = ["a/first", "a/mine", "a/mine2", "b/other"]
    assert sorted(r["architecture"] for r in written) == expected
    assert sorted(r["architecture"] for r in rows) == expected


def test_a_mismatch_is_judged_against_float64():
    """When eager float32 is off (simulated here), the ONNX model is judged against eager in float64."""
    import types

    import torch

    from fx2onnx.zoo.library_zoo import _judged_in_float64

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Sigmoid())
    x = torch.randn(3, 8)
    case = types.SimpleNamespace(model=model, check_input=x, check_kwargs={})
    with torch.no_grad():
        exact = model.double()(x.double()).float()
        model.float()
    off = [exact + 0.05]  # an eager float32 which is off
    judged = _judged_in_float64(case, off, [exact.numpy()])
    assert judged["onnx_ok"] and not judged["eager_ok"] and judged["eager_max_abs"] > 0.04
    judged = _judged_in_float64(case, [exact], [(exact + 0.05).numpy()])  # the ONNX model is off
    assert not judged["onnx_ok"] and judged["eager_ok"]
    assert next(model.parameters()).dtype == torch.float32  # the model itself is left in float32


def test_stale_rows_rerun_quickest_first_and_merged_in_order(monkeypatch, tmp_path):
    """``--stale`` reruns only the rows run before the weights were spread (no ``spread``), the quickest
    first; the other rows are kept and the file stays sorted."""
    import fx2onnx.zoo.library_zoo as zoo
    from fx2onnx.zoo.library_report import is_stale

    path = tmp_path / "rows_timm.json"

    def row(architecture, exporter, time, **extra):
        r = zoo._empty_row("timm", architecture, architecture, exporter, "batch")
        r.update({"success": True, "time": time, "max_abs": 1e-6, **extra})
        return r

    old = [row("a", "dynamo", 9.0), row("a", "to_onnx", 1.0, spread=0), row("b", "dynamo", 2.0),
           row("c", "dynamo", 5.0, step="timeout", success=False), row("d", "dynamo", 3.0, step="model")]
    assert [is_stale(r) for r in old] == [True, False, True, False, False]
    zoo.save_library_rows(old, path, {"discovered": {n: n for n in "abcd"}})
    monkeypatch.setattr(zoo, "discover", lambda library: pytest.fail("--stale reruns rows of the file"))

    def fake_run_tasks(todo, run, failed, on_row, **kwargs):
        assert [(t[1], t[3]) for t in todo] == [("b", "dynamo"), ("a", "dynamo")]
        for t in todo:
            on_row(row(t[1], t[3], 0.5, spread=1))

    monkeypatch.setattr(zoo, "run_tasks", fake_run_tasks)
    rows, meta = zoo.build_library_rows(path, "timm", shapes=["batch"], workers=1, stale_only=True)
    written, _ = zoo.load_library_rows(path)
    assert [(r["architecture"], r["exporter"]) for r in written] == [
        ("a", "dynamo"), ("a", "to_onnx"), ("b", "dynamo"), ("c", "dynamo"), ("d", "dynamo")]
    assert not any(is_stale(r) for r in written) and meta["command"].endswith("--stale")
    text = library_page("timm", written, meta)
    assert "3 of the 5 rows ran so; the others checked nothing" in text and "Rows run before" not in text
    assert "the 2 rows marked †" in library_page("timm", old, meta)


def test_capture_check_sentence_counts_checked_and_flagged_rows():
    from fx2onnx.zoo.library_report import capture_check_sentence

    def row(name, exporter="to_onnx", step=None, error=None, checked=True):
        r = dict(architecture=name, exporter=exporter, step=step, error=error)
        if checked:
            r["capture_check"] = True
        return r

    rows = [row("a"), row("b", step="capture", error="CaptureMismatchError: output 0 differs by 0.17"),
            row("c", step="model", error="dropout"), row("d", checked=False), row("e", exporter="dynamo")]
    text = capture_check_sentence(rows)
    assert "3 of the 4 ``to_onnx`` rows ran with it (1 ran before it existed)" in text, text
    assert "checked the 2 captured by torch.export and flagged 1: ``b``." in text, text
    assert capture_check_sentence(rows[:1]).endswith("checked the 1 captured by torch.export and flagged 0.")
    assert capture_check_sentence([row("d", checked=False)]).endswith("ran with it (1 ran before it existed).")


def test_generate_missing_and_regenerate_select_the_generating_rows(monkeypatch, tmp_path):
    """``--generate-missing`` computes the ``generate`` entry of the matched to_onnx rows of both generating
    tasks (image-text-to-text, speech-seq2seq) which have none; ``--regenerate`` those which have one too."""
    import fx2onnx.zoo.library_zoo as zoo

    path = tmp_path / "rows_tasks.json"

    def row(architecture, exporter="to_onnx", success=True, **extra):
        r = zoo._empty_row("tasks", architecture, architecture, exporter, "batch")
        r.update({"success": success, "time": 1.0, "max_abs": 1e-6, "spread": 1, **extra})
        return r

    done = {"equal": True, "new_tokens": 8, "time": 1.0}
    old = [row("image-text-to-text/a"), row("image-text-to-text/b", generate=done), row("speech-seq2seq/c"),
           row("speech-seq2seq/d", generate=dict(done, equal=False, error="generate: IndexError")),
           row("speech-seq2seq/e", exporter="dynamo"), row("speech-seq2seq/f", success=False),
           row("image-classification/g")]
    zoo.save_library_rows(old, path, {"discovered": {r["architecture"]: r["model"] for r in old}, "command": "tasks"})
    monkeypatch.setattr(zoo, "discover", lambda library: pytest.fail("the generate entries come from rows of the file"))
    selected = []

    def fake_run_tasks(todo, run, failed, on_row, **kwargs):
        assert run is zoo._run_generate
        selected.append(sorted(t[0]["architecture"] for t in todo))
        for (r,) in todo:
            on_row(dict(r, generate=dict(done)))

    monkeypatch.setattr(zoo, "run_tasks", fake_run_tasks)
    zoo.build_library_rows(path, "tasks", workers=1, generate_missing=True)
    assert selected[-1] == ["image-text-to-text/a", "speech-seq2seq/c"]
    _, meta = zoo.build_library_rows(path, "tasks", only="^speech", workers=1, regenerate=True)
    assert selected[-1] == ["speech-seq2seq/c", "speech-seq2seq/d"]
    written, _ = zoo.load_library_rows(path)
    assert {r["architecture"]: bool((r.get("generate") or {}).get("equal")) for r in written if r.get("generate")} == {
        "image-text-to-text/a": True, "image-text-to-text/b": True, "speech-seq2seq/c": True, "speech-seq2seq/d": True}
    assert meta["command"] == "tasks"  # the page names the command which computed the rows
