"""The model of a text-to-audio folder of one pass (VITS, MMS-TTS): ``onnx/model.onnx``, ``input_ids`` and
``attention_mask`` -> ``waveform (batch, samples)`` and ``spectrogram``, as optimum and transformers.js export VITS.

The waveform's length is computed in the graph from the predicted durations of the tokens (a dimension the data
gives). The duration predictor's spline moves its inputs inside ``[-tail_bound, tail_bound]`` through boolean
masks (a data-dependent shape the converter does not lower): the export computes the spline on every element
clamped to the bound and keeps the input outside it (:func:`dense_spline`, the same values), the check runs the
model's own code. The noise of the model (``noise_scale``, ``noise_scale_duration``) is drawn in the graph as in
eager: with a noise, each run gives another waveform, as transformers' pipeline does. The graph is of opset 21
(:data:`RANDOM_OPSET`): onnxruntime implements no ``RandomNormalLike`` of a later opset.

.. code-block:: python

    from fx2onnx.deploy import export_folder

    print(export_folder("mms_tts_folder", "tts_onnx"))  # task text-to-audio, onnx/model.onnx
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np
import torch

from ..runtime.pipelines import MODEL_FILE
from ..weights.empty import parameters_on_meta
from .encoder import SENTENCES, _processor
from .onnx_pieces import export_onnx_pieces
from .speech import Piece
from .speecht5 import export_speecht5_pieces
from .text_to_audio_codebooks import CODEBOOK_MODEL_TYPES

#: the model types exported as one pass from the text to the waveform (VITS, MMS-TTS)
TEXT_TO_AUDIO_MODEL_TYPES = ("vits",)
#: the model types exported as an encoder, a spectrogram decoder with its cache and the postnet with the vocoder of
#: the folder's ``vocoder/`` (:mod:`.speecht5`: the family ``spectrogram``)
SPECTROGRAM_MODEL_TYPES = ("speecht5",)
#: the highest opset whose RandomNormalLike onnxruntime implements (the model draws its noise in the graph)
RANDOM_OPSET = 21
#: the outputs, as optimum names them
OUTPUTS = ("waveform", "spectrogram")


class WaveformPiece(torch.nn.Module):
    """The model from the token ids to the waveform and its spectrogram."""

    base_model_prefix = "model"

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return out.waveform, out.spectrogram


def dense_spline(inputs: torch.Tensor, unnormalized_widths: torch.Tensor, unnormalized_heights: torch.Tensor,
                 unnormalized_derivatives: torch.Tensor, reverse: bool = False, tail_bound: float = 5.0,
                 min_bin_width: float = 1e-3, min_bin_height: float = 1e-3,
                 min_derivative: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor]:
    """VITS' unconstrained rational quadratic spline without boolean indexing: the spline of every element clamped
    to the tail bound, the identity (and a null log-determinant) outside it."""
    from transformers.models.vits import modeling_vits  # deferred: heavy

    inside = (inputs >= -tail_bound) & (inputs <= tail_bound)
    constant = float(np.log(np.exp(1 - min_derivative) - 1))
    edge = torch.full_like(unnormalized_derivatives[..., :1], constant)
    derivatives = torch.cat([edge, unnormalized_derivatives, edge], dim=-1)
    outputs, log_abs_det = modeling_vits._rational_quadratic_spline(
        inputs=inputs.clamp(-tail_bound, tail_bound), unnormalized_widths=unnormalized_widths,
        unnormalized_heights=unnormalized_heights, unnormalized_derivatives=derivatives, reverse=reverse,
        tail_bound=tail_bound, min_bin_width=min_bin_width, min_bin_height=min_bin_height,
        min_derivative=min_derivative)
    return torch.where(inside, outputs, inputs), torch.where(inside, log_abs_det, torch.zeros_like(log_abs_det))


@contextlib.contextmanager
def spline_without_masks() -> Iterator[None]:
    """Replaces VITS' spline by :func:`dense_spline` for the export, restored afterwards."""
    from transformers.models.vits import modeling_vits  # deferred: heavy

    original = modeling_vits._unconstrained_rational_quadratic_spline
    modeling_vits._unconstrained_rational_quadratic_spline = dense_spline
    try:
        yield
    finally:
        modeling_vits._unconstrained_rational_quadratic_spline = original


def waveform_piece(model: Any, folder: str) -> Piece:
    """The piece of a VITS folder with two input sets of its tokenizer: two sentences, then three (padded; a batch of
    one captured would be taken for a constant)."""
    tokenizer = _processor(folder, "text")
    sets = [{k: v for k, v in tokenizer(list(texts), padding=True, return_tensors="pt").items()
             if k in ("input_ids", "attention_mask")} for texts in SENTENCES]
    names = ["input_ids", "attention_mask"]
    return Piece("model", MODEL_FILE, WaveformPiece(model), sets[0], sets[1],
                 {n: {0: "batch", 1: "sequence"} for n in names}, names, list(OUTPUTS))


def _random_opset(config: Any, options: dict[str, Any]) -> int:
    """The opset of a model drawing random values in its graph: :data:`RANDOM_OPSET` unless ``--opset`` says less."""
    opset = RANDOM_OPSET if options["opset"] is None else options["opset"]
    if opset > RANDOM_OPSET:
        raise ValueError(f"{config.architectures[0]} draws random values in the graph (RandomNormalLike, "
                         f"RandomUniformLike), which onnxruntime runs up to opset {RANDOM_OPSET}: give --opset "
                         f"{RANDOM_OPSET} or less.")
    return opset


def export_spectrogram_pieces(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                              options: dict[str, Any]) -> tuple[list[Piece], Any]:
    """Exports a SpeechT5 folder with its ``vocoder/`` (:func:`.speecht5.export_speecht5_pieces`: its prenet's
    dropout draws a mask in the graph, RandomUniformLike)."""
    opset = _random_opset(config, options)
    return export_speecht5_pieces(folder, out_dir, config, dtype, dict(options, opset=opset))


def export_text_to_audio_pieces(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                                options: dict[str, Any]) -> tuple[list[Piece], Any]:
    """Exports the model of a VITS folder into ``out_dir/onnx/model.onnx`` (the weights streamed from the
    checkpoint); returns the piece and the function rebuilding it around the eager model for the check."""
    import transformers  # deferred: heavy

    if config.model_type not in TEXT_TO_AUDIO_MODEL_TYPES:
        raise ValueError(f"{config.architectures[0]} is a text-to-audio model of type {config.model_type!r}: "
                         f"exporting such a folder supports {list(TEXT_TO_AUDIO_MODEL_TYPES)} (one pass from the "
                         f"text to the waveform), {list(SPECTROGRAM_MODEL_TYPES)} (a spectrogram decoder and its "
                         f"vocoder) and {list(CODEBOOK_MODEL_TYPES)} (codes of several codebooks) today.")
    opset = _random_opset(config, options)
    with parameters_on_meta():
        model = getattr(transformers, config.architectures[0])._from_config(config, dtype=dtype).eval()
    piece = waveform_piece(model, folder)
    export_onnx_pieces(folder, out_dir, [piece], config, dtype, options, task="text-to-audio", opset=opset,
                       context=spline_without_masks)
    return [piece], lambda eager, _config: [waveform_piece(eager, folder)]
