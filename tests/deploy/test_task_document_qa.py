"""A LayoutLM folder made in code, exported with no flag as one model (``input_ids``, ``bbox``, ``attention_mask``,
``token_type_ids`` -> ``start_logits``, ``end_logits``) and run by ``fx2onnx.pipeline`` / ``python -m fx2onnx run
--word-boxes``: the answers of transformers' document-question-answering pipeline on the same words and boxes (words
and spans equal, scores within 1e-4), over one span and over several (a short ``max_seq_len``)."""

import json
import os

import pytest

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.testing.pipeline_folders import write_layoutlm_folder, write_layoutlmv3_folder

from test_encoder_tasks import _reference, _same

WORDS = [("paris", [10, 10, 100, 40]), ("is", [110, 10, 150, 40]), ("the", [160, 10, 220, 40]),
         ("capital", [230, 10, 400, 40]), ("of", [10, 60, 50, 90]), ("france", [60, 60, 200, 90]),
         ("a", [210, 60, 230, 90]), ("city", [240, 60, 330, 90]), ("by", [10, 110, 60, 140]),
         ("the", [70, 110, 130, 140]), ("sea", [140, 110, 220, 140])]


@pytest.mark.slow  # an export (about 30 s)
def test_layoutlm_folder_equals_transformers(tmp_path_factory, tmp_path, capsys):
    root = tmp_path_factory.mktemp("layoutlm")
    checkpoint = write_layoutlm_folder(root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    out = str(root / "out")
    assert result.task == "document-question-answering"
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert piece["inputs"] == ["input_ids", "bbox", "attention_mask", "token_type_ids"]
    assert piece["outputs"] == ["start_logits", "end_logits"]
    ours, reference = fx2onnx.pipeline(out), _reference("document-question-answering", checkpoint)
    for question, options in (("what is the capital of france?", {}), ("which city is by the sea?", dict(top_k=4)),
                              ("what is the capital?", dict(top_k=3, max_seq_len=16, doc_stride=4)),
                              ("where is paris?", dict(handle_impossible_answer=True, top_k=2))):
        expected = reference(image=None, question=question, word_boxes=WORDS, **options)
        assert expected and expected[0]["answer"], expected
        _same(ours(question=question, word_boxes=WORDS, **options), expected)
    # the command line: the words and boxes in a JSON file
    path = tmp_path / "page.json"
    path.write_text(json.dumps(WORDS))
    assert main(["run", out, "which city is by the sea?", "--word-boxes", str(path), "--top-k", "2", "--json"]) == 0
    _same(json.loads(capsys.readouterr().out),
          reference(image=None, question="which city is by the sea?", word_boxes=WORDS, top_k=2))
    for args, words in ([["what?"], "give the words of the page"], [["--image", "page.png"], "takes texts"],
                        [["what?", "--word-boxes", str(tmp_path / "none.json")], "does not exist"]):
        assert main(["run", out, *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err


@pytest.mark.slow  # an export
def test_layoutlmv3_folder_equals_transformers(tmp_path_factory):
    """LayoutLMv3 given the words: its tokenizer gives each token's box, no pixels (as the pipeline runs it)."""
    root = tmp_path_factory.mktemp("layoutlmv3")
    checkpoint = write_layoutlmv3_folder(root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    assert result.task == "document-question-answering"
    ours, reference = fx2onnx.pipeline(str(root / "out")), _reference("document-question-answering", checkpoint)
    for question, options in (("what is the capital of france?", dict(top_k=3)),
                              ("what is the capital?", dict(top_k=2, max_seq_len=24, doc_stride=4))):
        expected = reference(image=None, question=question, word_boxes=WORDS, **options)
        assert expected and expected[0]["answer"], expected
        _same(ours(question=question, word_boxes=WORDS, **options), expected)
