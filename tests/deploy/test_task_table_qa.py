"""A TAPAS folder made in code, exported with no flag as one model (``input_ids``, ``attention_mask``,
``token_type_ids`` -> ``logits``, ``logits_aggregation``) and run by ``fx2onnx.pipeline`` / ``python -m fx2onnx run
--table``: the answers of transformers' table-question-answering pipeline (cells, coordinates and aggregator
equal)."""

import json
import os

import pytest

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.testing.pipeline_folders import write_tapas_folder

from test_encoder_tasks import _reference

TABLE = {"city": ["paris", "london", "rome", "nice"], "people": ["2", "9", "3", "4"],
         "sea": ["no", "no", "no", "yes"]}
QUESTIONS = ["how many people in paris?", "which city is by the sea?", "what is the sum of people?",
             "is london a city?", "how many people in rome and nice?"]


@pytest.fixture(scope="module")
def tapas(tmp_path_factory):
    root = tmp_path_factory.mktemp("tapas")
    checkpoint = write_tapas_folder(root / "checkpoint")
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.written, result.check_lines()
    return str(checkpoint), str(root / "out"), result


@pytest.mark.slow  # the export of a tiny TAPAS (about 30 s)
def test_tapas_folder_equals_transformers(tapas, tmp_path, capsys):
    checkpoint, out, result = tapas
    assert result.task == "table-question-answering" and len(result.checks) == 2
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert piece["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert piece["outputs"] == ["logits", "logits_aggregation"]
    # the block transformers.js reads (its weights' files), as for every folder whose pieces are under onnx/
    assert "use_external_data_format" in json.load(open(os.path.join(out, "config.json")))["transformers.js_config"]
    ours, reference = fx2onnx.pipeline(out), _reference("table-question-answering", checkpoint)
    expected = reference(table=TABLE, query=QUESTIONS)
    assert ours(table=TABLE, query=QUESTIONS) == expected
    assert any(answer["cells"] for answer in expected)  # some cells selected: the comparison means something
    assert ours({"table": TABLE, "query": QUESTIONS[0]}) == reference(table=TABLE, query=QUESTIONS[0])
    # the command line: a CSV table, the questions as texts
    csv = tmp_path / "table.csv"
    csv.write_text("city,people,sea\n" + "\n".join(",".join(row) for row in zip(*TABLE.values())) + "\n")
    assert main(["run", out, *QUESTIONS[:2], "--table", str(csv), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(expected[:2]))  # coordinates as lists
    # no table, a table to another task's option, an empty question
    for args, words in ([[QUESTIONS[0]], "needs a table"], [["", "--table", str(csv)], "non-empty text"],
                        [[QUESTIONS[0], "--table", str(tmp_path / "missing.csv")], "does not exist"]):
        assert main(["run", out, *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
