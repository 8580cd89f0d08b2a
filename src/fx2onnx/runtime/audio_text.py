"""Audio and text in, text out from a folder of a speech language model split by
:mod:`fx2onnx.deploy.audio_text_generic` (Granite Speech, Fun-ASR-Nano, VibeVoice-ASR...).

:class:`AudioTextGenerator` is the loop of :class:`fx2onnx.runtime.vision.VisionGenerator` on the
audio piece: the audio inputs the piece names (the processor's, or the task zoo's) run once, the
features (an onnxruntime value) are fed unchanged to every step of the decoder, which writes them over
the audio placeholders of the prompt; greedy (or sampled) tokens, those of transformers' ``generate``
on the same inputs. A prompt holding another number of placeholders than the features' rows (a batch
padded by the processor whose padding the model drops with a mask the audio piece does not take,
Granite's ``input_features_mask``) is refused, not merged wrongly.

.. code-block:: python

    from fx2onnx.runtime.audio_text import AudioTextGenerator
    gen = AudioTextGenerator("granite_speech_onnx")
    tokens = gen.generate_ids(inputs, max_new_tokens=20)  # the processor's outputs
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .vision import VisionGenerator


class AudioTextGenerator(VisionGenerator):
    """The audio piece, decoder and generation config of a folder exported from a speech language model.

    :param folder: a folder written by :func:`fx2onnx.deploy.export_folder` from such a checkpoint
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    task, first = "speech-seq2seq", "audio"
    refusal = ("{folder} is not a folder of a speech language model (task {task}): export such a checkpoint with "
               "python -m fx2onnx export CHECKPOINT --out FOLDER.")

    def __init__(self, folder: Any, providers: Any = None, threads: int | None = None):
        super().__init__(folder, providers, threads)
        #: the placeholder the decoder writes the features over, as the export recorded it
        self.audio_token_id = self.pieces["decoder"].get("audio_token_id")

    def _features(self, inputs: dict[str, np.ndarray], ids: np.ndarray) -> list[Any]:
        """The audio piece's outputs on the audio inputs, their rows checked against the placeholders."""
        from ..validation import _ort_value_to_numpy

        outputs = self.vision_outputs(inputs)
        rows = _ort_value_to_numpy(outputs[0]).shape[0]
        placeholders = int((ids == self.audio_token_id).sum())
        if rows != placeholders:
            raise ValueError(f"The audio piece gives {rows} feature rows for {placeholders} audio placeholders in the "
                             "prompts: a batch of audios of several lengths padded by the processor is not supported "
                             "(generate one audio at a time).")
        return outputs
