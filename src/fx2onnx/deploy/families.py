"""The families a checkpoint folder is exported as: how a task's model is cut into pieces.

A family says which models it takes (a test on the checkpoint's configuration and on its model built on the
meta device), how it exports their pieces, what ``fx2onnx.json`` records (its ``split``, which the runtime's
registry :mod:`fx2onnx.runtime.families` reads back to open the folder's loop) and what each piece is checked against. The folder export
(:mod:`fx2onnx.deploy.export`) takes the first family of its task that applies; the pages list them from
:data:`FAMILIES`. A new family is one module with its pieces and one entry here; a family may write its whole folder itself
(text generation: one decoder, :mod:`fx2onnx.deploy.text_generation`).

.. code-block:: python

    from fx2onnx.deploy.families import FAMILIES

    for family in FAMILIES:
        print(family.task, family.name, family.split)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import torch

from ..inputs.audio_inputs import audio_token
from ..inputs.vlm_inputs import image_token
from ..runtime.families import GENERATORS
from .audio_text_generic import generic_audio_pieces
from ..runtime.pipelines import PIPELINE_TASKS
from ..runtime.seq2seq import TEXT2TEXT_TASKS
from .captioner import captioner_generation, is_cross_attention_captioner
from .encoder import export_encoder_pieces
from .image_prefix import image_prefix_pieces, is_image_prefix_model
from .detr_segmentation import export_detr_segmentation_pieces, is_detr_segmenter
from .document_qa import export_document_qa_pieces
from .image_text import export_vision_pieces, vision_pieces
from .keypoint_matching import export_keypoint_matching_pieces
from .mask_generation import export_mask_generation_pieces
from .speech import Piece
from .speech_generic import eager_pieces, export_generic_speech_pieces, meta_model_with_buffers
from .seq2seq import write_seq2seq_folder
from .seq2seq_generic import write_generic_seq2seq_folder
from .text_generation import write_text_generation_folder
from .table_qa import export_table_qa_pieces
from .text_to_audio import SPECTROGRAM_MODEL_TYPES, export_spectrogram_pieces, export_text_to_audio_pieces
from .text_to_audio_codebooks import CODEBOOK_MODEL_TYPES, write_codebooks_folder


@dataclasses.dataclass
class FolderFacts:
    """What the families of a task test, read once from a checkpoint's configuration (and, for an image-text
    model without an image token, from its model on the meta device)."""

    task: str
    model_type: str | None
    encoder_decoder: bool
    audio_token: int | None
    image_token: int | None
    #: a vision model and a text decoder attending to it (BLIP)
    cross_attention_captioner: bool = False
    #: the image features in front of the prompt, no placeholder (GIT)
    image_prefix: bool = False
    #: what the export records beside the pieces (a captioner's start and end tokens)
    generation: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, task: str, config: Any, dtype: torch.dtype) -> FolderFacts:
        facts = cls(task, getattr(config, "model_type", None), bool(getattr(config, "is_encoder_decoder", False)),
                    audio_token(config), image_token(config))
        if task == "image-text-to-text" and not facts.encoder_decoder and facts.image_token is None:
            meta = meta_model_with_buffers(config, dtype)
            if is_cross_attention_captioner(meta):  # BLIP: shown to the encoder-decoder split
                facts.encoder_decoder, facts.cross_attention_captioner = True, True
                facts.generation = captioner_generation(meta)
            facts.image_prefix = is_image_prefix_model(meta)
            del meta
        return facts


#: ``export(folder, out_dir, config, dtype, options)`` -> the pieces written and the function rebuilding their eager
#: wrappers for the check (``make_pieces(model, config, dtype)``, None: the family's own check)
Exporter = Callable[[str, str, Any, torch.dtype, dict[str, Any]], tuple[list[Piece], Any]]


@dataclasses.dataclass(frozen=True)
class Family:
    """A way to cut the models of a task into pieces."""

    #: a short name (the pages, the errors)
    name: str
    task: str
    #: what ``fx2onnx.json`` records as ``split`` (None: the task's first family, no ``split`` written)
    split: str | None
    #: the models it takes, in words (the pages)
    takes: str
    applies: Callable[[FolderFacts], bool]
    #: exports the pieces (None: the family writes its whole folder, ``write_folder``)
    export: Exporter | None
    #: what each piece is checked against when exported
    reference: str
    #: ``write_folder(folder, out_dir, filename, config, task, dtype, begin, say, **options)`` -> the
    #: :class:`~fx2onnx.deploy.result.FolderExport` of a family writing its folder itself (text generation)
    write_folder: Callable[..., Any] | None = None

    @property
    def runtime(self) -> str:
        """The class running the folder, from the runtime's registry (:data:`fx2onnx.runtime.families.GENERATORS`)."""
        return GENERATORS[self.task, self.split]


def _speech_language_model(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                           options: dict[str, Any]) -> tuple[list[Piece], Any]:
    pieces = export_vision_pieces(folder, out_dir, config, dtype, make_pieces=generic_audio_pieces, **options)
    return pieces, generic_audio_pieces


def _image_prefix(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                  options: dict[str, Any]) -> tuple[list[Piece], Any]:
    pieces = export_vision_pieces(folder, out_dir, config, dtype, make_pieces=image_prefix_pieces, **options)
    return pieces, image_prefix_pieces


def _encoder_decoder(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                     options: dict[str, Any]) -> tuple[list[Piece], Any]:
    options = {k: v for k, v in options.items() if k != "cache_in_place"}
    pieces, layout = export_generic_speech_pieces(folder, out_dir, config, dtype, **options)
    return pieces, eager_pieces(layout)


def _image_text(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                options: dict[str, Any]) -> tuple[list[Piece], Any]:
    return export_vision_pieces(folder, out_dir, config, dtype, **options), vision_pieces


#: the families of every task a folder is exported for, in the order they are tried (the first that applies)
FAMILIES: tuple[Family, ...] = (
    Family("decoder", "text-generation", None,
           "every causal LM of transformers' causal-LM auto mapping: one decoder with its cache (keys and values, "
           "latent, convolution and recurrent states, read from the model)", lambda f: True, None,
           "the decoder with its cache on two input sets (other batch, prompt and cache lengths) against eager "
           "float32", write_folder=write_text_generation_folder),
    Family("speech language model", "speech-seq2seq", "placeholders",
           "a decoder-only model naming an audio placeholder (Granite Speech, VibeVoice-ASR, Voxtral)",
           lambda f: f.model_type != "whisper" and not f.encoder_decoder and f.audio_token is not None,
           _speech_language_model,
           "the audio piece and the decoder, each against the same wrapper in eager float32"),
    # Whisper and the text encoder-decoders: onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx, the files and
    # names transformers.js and optimum load (fx2onnx.deploy.seq2seq)
    Family("Whisper", "speech-seq2seq", None, "Whisper", lambda f: f.model_type == "whisper", None,
           "the encoder and the merged decoder (its two branches: cross keys and values computed or given) against "
           "eager float32", write_folder=write_seq2seq_folder),
    *(Family("encoder-decoder", task, None, "transformers' seq2seq LM classes (T5, BART, Marian, M2M100...)",
             lambda f: True, None,
             "the encoder and the merged decoder (its two branches: cross keys and values computed or given) against "
             "eager float32", write_folder=write_seq2seq_folder) for task in TEXT2TEXT_TASKS),
    Family("speech encoder-decoder", "speech-seq2seq", "generic", "any other encoder-decoder speech model",
           lambda f: True, _encoder_decoder,
           "the encoder and the merged decoder (onnx/encoder_model.onnx, onnx/decoder_model_merged.onnx: its two "
           "branches) against the same wrappers in eager float32", write_folder=write_generic_seq2seq_folder),
    Family("image prefix", "image-text-to-text", "prefix", "the image features in front of the prompt (GIT)",
           lambda f: f.image_prefix, _image_prefix,
           "the vision piece and the decoder against the same wrappers in eager float32"),
    Family("image encoder-decoder", "image-text-to-text", "generic",
           "an encoder reading pixels and a decoder (TrOCR, Donut, Florence-2, BLIP's captioner)",
           lambda f: f.encoder_decoder, _encoder_decoder,
           "the encoder and the merged decoder (onnx/encoder_model.onnx, onnx/decoder_model_merged.onnx: its two "
           "branches) against the same wrappers in eager float32", write_folder=write_generic_seq2seq_folder),
    Family("image-text", "image-text-to-text", None,
           "a decoder writing image features over its placeholders (LLaVA, Gemma 3, Qwen-VL, Mistral 3, any "
           "other the generic split takes)", lambda f: True, _image_text,
           "the vision piece and the decoder against the same wrappers in eager float32"),
    # DETR's panoptic segmenter: its outputs named as DETR names them (the encoder family's are Mask2Former's)
    Family("DETR segmenter", "universal-segmentation", "detr", "DETR with its mask head (DetrForSegmentation)",
           lambda f: is_detr_segmenter(f.model_type, f.task), export_detr_segmentation_pieces,
           "the logits, boxes and masks of two input sets of its image processor against eager float32"),
    # the single-pass encoders: one model, onnx/model.onnx (fx2onnx.deploy.encoder), one entry per pipeline task
    *(Family("encoder", task, None, "a natural language inference classifier (an entailment label) reading texts"
             if task == "zero-shot-classification" else
             f"the classes of the {task} auto mapping, reading {dict(audio='sounds').get(modality, modality + 's')}",
             lambda f: True,
             functools.partial(export_encoder_pieces, task),
             f"the model's {' and '.join(outputs)} on two input sets of its processor against eager float32")
      for task, (modality, outputs) in PIPELINE_TASKS.items()),
    # the tasks of several pieces run by a pipeline of their own (fx2onnx.runtime.pipelines.OWN_PIPELINES)
    Family("SAM", "mask-generation", None,
           "SAM: the image encoder, then the prompt encoder and mask decoder on points (optimum's two files)",
           lambda f: True, export_mask_generation_pieces,
           "the image encoder and the prompt encoder and mask decoder on two input sets against eager float32"),
    Family("codebooks", "text-to-audio", "codebooks",
           "MusicGen: a text encoder, a decoder over codebooks with its cache, the audio codec's decoder",
           lambda f: f.model_type in CODEBOOK_MODEL_TYPES, None,
           "the text encoder, the audio decoder and the merged decoder (its two branches) against eager float32",
           write_folder=write_codebooks_folder),
    Family("spectrogram", "text-to-audio", "spectrogram",
           "SpeechT5 with the vocoder of its folder's vocoder/: a text encoder, a spectrogram decoder with its cache, "
           "the postnet and the vocoder", lambda f: f.model_type in SPECTROGRAM_MODEL_TYPES, export_spectrogram_pieces,
           "the encoder, the decoder's step and the postnet with the vocoder against eager float32"),
    Family("waveform", "text-to-audio", None, "VITS and MMS-TTS: one pass from the text to the waveform",
           lambda f: True, export_text_to_audio_pieces,
           "the waveform and spectrogram of two input sets of its tokenizer (two and three texts, padded) "
           "against eager float32"),
    Family("table", "table-question-answering", None, "TAPAS: the cells of the answer and their aggregation",
           lambda f: True, export_table_qa_pieces,
           "the cell and aggregation logits of two input sets of its tokenizer (a table, 2 and 3 questions) against "
           "eager float32"),
    Family("words and boxes", "document-question-answering", None,
           "LayoutLM and LayoutLMv3 (no pixels): the answer's words among the page's words and their boxes",
           lambda f: True, export_document_qa_pieces,
           "the start and end logits of two input sets of its tokenizer (a page, 1 and 2 questions) against eager "
           "float32"),
    Family("image pair", "keypoint-matching", None,
           "EfficientLoFTR: the matches of a pair of images (SuperGlue and LightGlue refused: a number of keypoints "
           "known at run time)", lambda f: True, export_keypoint_matching_pieces,
           "the matches, scores and keypoints of two pairs of its image processor (two sizes) against eager float32"),
)


def choose_family(facts: FolderFacts) -> Family:
    """The first family of the task of ``facts`` that applies."""
    for family in FAMILIES:
        if family.task == facts.task and family.applies(facts):
            return family
    raise ValueError(f"A model of task {facts.task!r} is exported as one model or not at all: no family of "
                     f"pieces takes it.")
