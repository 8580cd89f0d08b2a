"""The models pages state what their rows say: counts, failures and commands derived from the data."""

from __future__ import annotations

from fx2onnx.zoo.library_report import computed_by
from fx2onnx.zoo.report import STORED_ERROR, error_text, page_text


def _row(name, exporter, cache, success, step=None, error=None, generate=None):
    row = dict(architecture=name, kind="causal", exporter=exporter, cache=cache, success=success, step=step,
               error=error, max_abs=1e-6 if success else None, time=1.0)
    if generate:
        row["generate"] = generate
    return row


def test_failing_at_capture_comes_from_the_rows():
    meta = {"command": "python -m fx2onnx models", "date": "2026-01-01"}
    passing = [_row("reformer", "to_onnx", False, True), _row("reformer", "dynamo", False, True)]
    assert "* **Failing at capture** in these rows: none." in page_text(passing, meta, [])
    failing = passing + [_row("funnel", "to_onnx", False, False, "capture", "ExportError: x")]
    text = page_text(failing, meta, [])
    assert "* **Failing at capture** in these rows: ``funnel`` (their errors are listed below)." in text
    assert "Reformer" not in text  # no hand-written claim about a row


def test_generation_error_cut_at_a_sentence():
    head = "fx2onnx.generate: ValueError: the cache input is neither a key/value cache. Nor a state"
    error = (head + " of linear caches" * 20)[: STORED_ERROR - len(" (zero at the start; RWKV's st")]
    error += " (zero at the start; RWKV's st"  # the zoo stores the first STORED_ERROR characters
    assert len(error) == STORED_ERROR
    done = dict(equal=False, error=error, matched=0, new_tokens=20, first_difference=None)
    text = page_text([_row("minimax", "to_onnx", True, True, generate=done)], {}, [])
    line = next(line for line in text.splitlines() if line.startswith("* ``minimax``"))
    assert "RWKV's st" not in line and line.endswith(r"\[...\]"), line


def test_error_text_hides_temporary_folders():
    text = error_text("4 tensors are not in the checkpoint '/tmp/fx2onnx-generate-bx220uh1/checkpoint': a, b")
    assert "/tmp" not in text and "TMP/checkpoint" in text


def test_computed_by_a_restricted_run():
    rows = [dict(architecture=f"image-classification/{n}") for n in ("vit", "deit", "resnet", "beit")]
    meta = {"command": "python -m fx2onnx.zoo.library_zoo tasks --only '/(vit|deit)$'", "date": "2026-01-02"}
    text = computed_by(meta, rows, "torch 2")
    assert "restricted by ``--only`` to 2 of the 4 architectures" in text
    assert text.startswith("Computed by runs of ``python -m fx2onnx.zoo.library_zoo tasks``")
    whole = computed_by({"command": "python -m fx2onnx.zoo.library_zoo timm", "date": "d"}, rows, "v")
    assert whole == "Computed by ``python -m fx2onnx.zoo.library_zoo timm`` on d (v)."
