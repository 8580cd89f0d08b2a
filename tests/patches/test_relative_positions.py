"""The conformer's relative positions computed for the frames given: no bound on their number once exported."""

import json

import pytest
import torch

import fx2onnx
from fx2onnx.patches.relative_positions import guard_relative_positions, make_relative_positions

transformers = pytest.importorskip("transformers")
from transformers.models.wav2vec2_conformer import modeling_wav2vec2_conformer as conformer  # noqa: E402


def _table(max_positions: int = 8) -> torch.nn.Module:
    config = transformers.Wav2Vec2ConformerConfig(hidden_size=16, max_source_positions=max_positions)
    return conformer.Wav2Vec2ConformerRelPositionalEmbedding(config).eval()


def test_patched_positions_equal_the_table_shorter_and_longer():
    original = conformer.Wav2Vec2ConformerRelPositionalEmbedding.forward
    assert guard_relative_positions(original) is None
    patched = make_relative_positions(original)
    for frames in (3, 8, 13):  # inside the table, its size, beyond it (eager grows it)
        hidden = torch.randn(2, frames, 16)
        expected = original(_table(), hidden)
        torch.testing.assert_close(patched(_table(), hidden), expected, atol=1e-6, rtol=0)
        assert expected.shape == (1, 2 * frames - 1, 16)


@pytest.mark.slow
def test_exported_positions_read_more_frames_than_the_table():
    table = _table()
    onx = fx2onnx.to_onnx(table, (torch.randn(2, 5, 16),), dynamic_shapes=({1: "frames"},))
    frozen = {p.key: json.loads(p.value) for p in onx.metadata_props}.get("fx2onnx.frozen_inputs", {})
    assert frozen == {}  # no dimension narrowed to the table's frames
    report = fx2onnx.validate(onx, _table(), (torch.randn(2, 13, 16),), atol=1e-5)
    assert report.ok, report
