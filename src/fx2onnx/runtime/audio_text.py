"""Audio and text in, text out from a folder of a speech language model split by
:mod:`fx2onnx.deploy.audio_text_generic` (Granite Speech, Fun-ASR-Nano, VibeVoice-ASR...).

:class:`AudioTextGenerator` is the loop of :class:`fx2onnx.runtime.vision.VisionGenerator` on the
audio piece: the audio inputs the piece names (the processor's, or the task zoo's) run once, the
features (an onnxruntime value) are fed unchanged to every step of the decoder, which writes them over
the audio placeholders of the prompt; greedy (or sampled) tokens, those of transformers' ``generate``
on the same inputs. A prompt holding another number of placeholders than the features' rows (a batch
padded by the processor whose padding the model drops with a mask the audio piece does not take,
Granite's ``input_features_mask``) is refused, not merged wrongly.

From audio files (``python -m fx2onnx generate OUT --audio talk.wav``, and with a prompt,
``generate OUT "summarize" --audio talk.wav``), the folder's own processor (``AutoProcessor``, offline)
turns the audio and the text into the model's inputs: without a prompt, its transcription request
(``apply_transcription_request``: the checkpoint's chat template asking for a transcript); with one,
the prompt after one audio placeholder per audio (or the prompt as written when it holds them), or with
``chat`` the audio and the prompt as a user message of its chat template. WAV files are read at the
feature extractor's rate (another rate is refused, not resampled). The audio piece takes audios of
any length where the encoder does (exported on two lengths); VibeVoice's is its encoder's mean
(``sample=False``: transformers' default draws noise over the latents, so its tokens vary run to run).

.. code-block:: python

    from fx2onnx.runtime.audio_text import AudioTextGenerator
    gen = AudioTextGenerator("vibevoice_asr_onnx")
    print(gen.generate_text(None, ["talk.wav"], max_new_tokens=20).text)  # the transcription request
    tokens = gen.generate_ids(inputs, max_new_tokens=20)  # the processor's outputs
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..ort_values import ort_value_to_numpy
from .folder import TextResult
from .sampling import Sampling
from .speech_base import read_audios
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
        outputs = self.vision_outputs(inputs)
        rows = ort_value_to_numpy(outputs[0]).shape[0]
        placeholders = int((ids == self.audio_token_id).sum())
        if rows != placeholders:
            raise ValueError(f"The audio piece gives {rows} feature rows for {placeholders} audio placeholders in the "
                             "prompts: a batch of audios of several lengths padded by the processor is not supported "
                             "(generate one audio at a time).")
        return outputs

    def _audio_token(self) -> str:
        """The processor's audio placeholder (the one it expands into the features' rows)."""
        token = getattr(self.processor, "audio_token", None)
        if token is None:
            raise ValueError(f"The processor of {self.folder!r} names no audio_token: write the placeholders in the "
                             "prompt with ids (generate_ids).")
        return token

    def inputs(self, prompt: str | None, audios: Sequence[Any], chat: bool = False,
               videos: Sequence[Any] = ()) -> dict[str, np.ndarray]:
        """The processor's inputs of ``audios`` (WAV paths, or samples at the feature extractor's rate)
        and ``prompt``: None, the processor's transcription request; else the prompt after one audio
        placeholder per audio (as written when it holds them), in the chat template with ``chat``."""
        if not audios:
            raise ValueError("Give at least one audio (--audio talk.wav).")
        if videos:
            raise ValueError("A speech language model takes no video.")
        rate = getattr(self.processor.feature_extractor, "sampling_rate", None)
        samples = read_audios(list(audios), rate)
        audio = samples if len(samples) > 1 else samples[0]
        if prompt is None:
            request = getattr(self.processor, "apply_transcription_request", None)
            if request is None:
                raise ValueError(f"The processor of {self.folder!r} has no transcription request "
                                 f"({type(self.processor).__name__}): give a prompt.")
            if chat:
                raise ValueError("--chat needs a prompt (without one, the processor's transcription request is used).")
            processed = request(audio=audio, return_tensors="pt")
        else:
            token = self._audio_token()
            if chat:
                if token in prompt:
                    raise ValueError(f"With --chat the template places the audio: remove {token!r} from the prompt.")
                if not getattr(self.processor, "chat_template", None):
                    raise ValueError(f"The processor of {self.folder!r} has no chat template: generate without --chat.")
                content = [{"type": "audio"}] * len(samples) + [{"type": "text", "text": prompt}]
                text = self.processor.apply_chat_template([{"role": "user", "content": content}],
                                                          add_generation_prompt=True, tokenize=False)
            else:
                text = prompt if token in prompt else token * len(samples) + "\n" + prompt
            processed = self.processor(text=text, audio=audio, return_tensors="pt")
        return {k: v.numpy() if hasattr(v, "numpy") else np.asarray(v) for k, v in processed.items()}

    def generate_text(
        self,
        prompt: str | None,
        audios: Sequence[Any],
        max_new_tokens: int = 32,
        on_text: Callable[[str], None] | None = None,
        sampling: Sampling | None = None,
        chat: bool = False,
        videos: Sequence[Any] = (),
    ) -> TextResult:
        """Greedy generation (or ``sampling``) after ``prompt`` (None: the processor's transcription request)
        and ``audios``: the tokens transformers' ``generate`` returns on the processor's outputs."""
        return super().generate_text(prompt, audios, max_new_tokens, on_text, sampling, chat, videos)
