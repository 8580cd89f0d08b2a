"""The relative positions of the conformer encoders computed for the sequence given, not sliced from a cached table.

``Wav2Vec2ConformerRelPositionalEmbedding.forward`` (and its copies in Wav2Vec2-BERT and SeamlessM4T) keeps a table
of sinusoidal relative positions made at ``__init__`` for ``max_source_positions`` frames and grows it when a longer
sequence comes (``if pe.size(1) >= x.size(1) * 2 - 1``). torch.export takes the branch of the example: it narrows the
number of frames to the table's (the audio's samples to ``max_source_positions`` frames) and the exported model slices
a table too short for a longer audio (onnxruntime's Reshape fails on a longer sound, where eager grows the table).

The patch computes the ``2 * frames - 1`` rows of the sequence itself, with the model's own ``extend_pe`` without a
table: each row is the same sine or cosine of the same position eager slices from its table, so the values are eager's
at every length, and the graph has no bound on the frames.

.. code-block:: python

    import fx2onnx

    # inside to_onnx(patches="auto") or torch_export_patches(patch_transformers=True)
    # a Wav2Vec2ConformerForCTC exports for audios of any length
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import source_guard

#: (modeling module, class) of the relative position tables grown by a branch on the sequence's length
RELATIVE_POSITION_TABLES: tuple[tuple[str, str], ...] = (
    ("transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer", "Wav2Vec2ConformerRelPositionalEmbedding"),
    ("transformers.models.wav2vec2_bert.modeling_wav2vec2_bert", "Wav2Vec2BertRelPositionalEmbedding"),
    ("transformers.models.seamless_m4t.modeling_seamless_m4t", "SeamlessM4TConformerRelPositionalEmbedding"),
)

#: the lines of the original forward the patch replaces (the table grown, then sliced around its center)
guard_relative_positions = source_guard(
    "RelPositionalEmbedding.forward", "self.extend_pe(hidden_states, self.pe)", "self.pe.size(1) // 2",
    absent="not the table of relative positions grown by extend_pe",
)


def make_relative_positions(original: Any) -> Any:
    """``forward(self, hidden_states)`` returning the relative positions of ``hidden_states``' frames, computed for
    them (``extend_pe`` without a table: ``2 * frames - 1`` rows), the table left as it is."""

    def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.extend_pe(hidden_states)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward
