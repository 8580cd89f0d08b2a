"""The tasks page's *folder* column: the rows of ``bench/sweep_folder_tasks.py`` (committed JSON) counted per task,
each failure with its reason, the pairs not run listed; tasks no folder exports show ``-``."""


def test_tasks_page_renders_the_folder_sweep():
    from fx2onnx.zoo.library_report import tasks_page
    from fx2onnx.zoo.library_zoo import _empty_row

    rows = []
    for key in ("image-classification/vit", "image-classification/beit", "ctc/hubert", "time-series/patchtst"):
        r = _empty_row("tasks", key, key.split("/")[1].upper(), "to_onnx", "batch")
        r.update(success=True, max_abs=1e-6, parameters=10_000)
        rows.append(r)
    meta = {"command": "python -m fx2onnx.zoo.library_zoo tasks", "date": "2026-12-07",
            "discovered": {r["architecture"]: r["model"] for r in rows}}
    folder = {"date": "2026-12-07 07:00 UTC", "not_run": ["ctc/hubert"], "rows": [
        {"architecture": "image-classification/vit", "task": "image-classification", "step": "compare", "equal": True},
        {"architecture": "image-classification/beit", "task": "image-classification", "step": "export",
         "error": "error: Step 'capture' failed: Unsupported"}]}
    text = tasks_page(rows, meta, folder)
    summary = text[:text.index(".. _lib-tasks-")]
    assert "      - folder" in summary and "      - 1 / 2" in summary and "**1 / 2**" in summary
    vision = text[text.index(".. _lib-tasks-image-classification:"):text.index(".. _lib-tasks-time-series:")]
    assert "1 of 2 equal" in vision and "``beit``, step *export*: error: Step 'capture' failed" in vision
    assert "Folder not run yet (1): ``hubert``" in text
    series = text[text.index(".. _lib-tasks-time-series:"):]
    assert "**Folder**" not in series
    assert "folder" not in tasks_page(rows, meta)[:text.index(".. _lib-tasks-")].split("list-table")[1][:400]
