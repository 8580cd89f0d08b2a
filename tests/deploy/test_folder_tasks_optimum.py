"""The tasks page's table of folders per pipeline task: the model types equal to transformers' pipeline beside the
model types optimum registers for the task (stored by ``bench/sweep_folder_tasks.py``), and a section per text task
(no tasks page row: its folders only)."""


def test_tasks_page_shows_optimum_counts_and_text_tasks():
    from fx2onnx.zoo.library_report import tasks_page
    from fx2onnx.zoo.library_zoo import _empty_row

    r = _empty_row("tasks", "image-classification/vit", "ViT", "to_onnx", "batch")
    r.update(success=True, max_abs=1e-6, parameters=10_000)
    meta = {"command": "python -m fx2onnx.zoo.library_zoo tasks", "date": "2026-12-07",
            "discovered": {r["architecture"]: r["model"]}}
    folder = {"date": "2026-12-07 10:00 UTC", "not_run": ["fill-mask/roberta", "ctc/hubert"],
              "tasks_of": {"ctc": "automatic-speech-recognition", "fill-mask": "fill-mask"},
              "optimum": {"version": "optimum-onnx==0.1.0",
                          "model_types": {"fill-mask": ["bert", "roberta", "xlm-roberta"], "image-classification": [],
                                          "feature-extraction": ["bert", "vit", "wav2vec2"]}},
              "rows": [{"architecture": "image-classification/vit", "task": "image-classification", "step": "compare",
                        "equal": True},
                       {"architecture": "fill-mask/bert", "task": "fill-mask", "step": "compare", "equal": True},
                       {"architecture": "fill-mask/xlm_roberta", "task": "fill-mask", "step": "export",
                        "error": "error: something"},
                       {"architecture": "feature-extraction/bert", "task": "feature-extraction", "step": "compare",
                        "equal": True},
                       {"architecture": "image-feature-extraction/vit", "task": "image-feature-extraction",
                        "step": "compare", "equal": True},
                       {"architecture": "image-feature-extraction/dinat", "task": "image-feature-extraction",
                        "step": "compare", "equal": True}]}
    text = tasks_page([r], meta, folder)
    table = text[text.index("Folders per pipeline task"):text.index("*equal*: model types")]
    fill = table[table.index("    * - fill-mask"):].split("    * -")[1]
    # equal 1, exported 1 (the bert row ran to compare), run 2, not run 1, counted 1, optimum 3, of which counted 1
    assert [c.strip() for c in fill.split("- ")[1:]] == ["1", "1", "2", "1", "1", "3", "1"]
    speech = table[table.index("automatic-speech-recognition"):].split("    * -")[0]
    assert [c.strip() for c in speech.split("- ")[1:]] == ["0", "0", "0", "1", "0", "?", "?"]
    # optimum's feature-extraction names base models of every modality: the image embedders count there
    texts = table[table.index("    * - feature-extraction"):].split("    * -")[1]
    assert [c.strip() for c in texts.split("- ")[1:]] == ["1", "1", "1", "0", "3", "3", "2"]
    images = table[table.index("    * - image-feature-extraction"):].split("    * -")[1]
    assert [c.strip() for c in images.split("- ")[1:]] == ["2", "2", "2", "0", "in feature-extraction", "-", "-"]
    assert "image-feature-extraction (images)" in text
    section = text[text.index(".. _lib-tasks-fill-mask:"):]
    assert "1 of 2 equal" in section and "``xlm_roberta``, step *export*: error: something" in section
    assert "Folder not run yet (1): ``roberta``" in section


def test_the_page_names_optimum_model_types_transformers_does_not_have():
    import transformers

    from fx2onnx.zoo.library_report import removed_model_types, tasks_page

    types = {"automatic-speech-recognition": ["mctct", "wav2vec2", "speech-to-text"], "fill-mask": ["bert"]}
    assert removed_model_types(types) == {"automatic-speech-recognition": ["mctct"]}  # removed in transformers 5
    folder = {"date": "2026-12-07 10:00 UTC", "not_run": [], "tasks_of": {"ctc": "automatic-speech-recognition"},
              "optimum": {"version": "optimum-onnx==0.1.0", "model_types": types},
              "rows": [{"architecture": "ctc/wav2vec2", "task": "automatic-speech-recognition", "step": "compare",
                        "equal": True}]}
    text = tasks_page([], {"command": "x", "date": "2026-12-07", "discovered": {}}, folder)
    assert f"transformers {transformers.__version__} has no configuration for" in text
    assert "(automatic-speech-recognition: ``mctct``)" in text
