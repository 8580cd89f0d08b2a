"""The single-pass encoders of transformers' pipelines: one model, no cache, one run per input.

A classifier (text, image, audio, video), a token tagger, a masked language model, a text or image embedder, a
detector, a semantic segmenter, a depth estimator, a CTC speech recognizer and the two towers of a zero-shot model
(CLIP, SigLIP, CLAP, OWL-ViT: the texts of the candidate labels beside the images or sounds) are each exported as
one model, ``onnx/model.onnx``, as optimum and transformers.js lay such a folder out: its inputs named as the
processor names them (``input_ids``, ``attention_mask``, ``token_type_ids``, ``pixel_values``, ``pixel_mask``,
``input_values``), its outputs as transformers' pipeline reads them (``logits``, ``pred_boxes``,
``predicted_depth``, or ``last_hidden_state`` for an embedder; ``token_embeddings`` and ``sentence_embedding`` for a
sentence-transformers folder, its pooling in the graph: :mod:`fx2onnx.deploy.sentence`). The tasks and what they
keep are listed by the runtime (:data:`fx2onnx.runtime.pipelines.PIPELINE_TASKS`), which runs such a folder.

The example inputs come from the folder's own processor: its tokenizer on sentences, its image processor on
images, its feature extractor on sounds, two sets of other batch sizes and lengths. The batch and the length of a
text or a sound are dynamic; an image's height and width are the processor's, but a detector's (DETR resizes
each image keeping its aspect ratio). Each set is checked against the same
wrapper around the eager float32 model (:func:`fx2onnx.deploy.speech.check_speech_pieces`).

.. code-block:: python

    from fx2onnx.deploy import export_folder

    print(export_folder("bert_classifier", "bert_onnx"))  # task text-classification, onnx/model.onnx
"""

from __future__ import annotations

import copy
import inspect
import os
from typing import Any

import numpy as np
import torch

from ..patches import torch_export_patches
from ..runtime.pipelines import MODEL_FILE, PIPELINE_TASKS, TWO_TOWER_TASKS
from ..weights import to_onnx_from_checkpoint
from ..weights.empty import parameters_on_meta
from ..weights.save import load_without_weights
from .saved_model import rename_external_data, rename_values
from .sentence import SentenceModules, SentencePooling, copy_sentence_modules, read_sentence_modules
from .speech import Piece
from .transformersjs import data_file_name

#: the sentences of the two text input sets (batch 2, then batch 3, other lengths)
SENTENCES = (("the cat sat on the mat", "paris is the capital of france, a city by the sea"),
             ("a quick brown fox", "the model was exported to onnx and runs in a folder", "good night"))
#: the dimensions of each input left dynamic, by modality (a detector's images keep their sizes: their last two)
DYNAMIC_DIMS = {"text": {0: "batch", 1: "sequence"}, "image": {0: "batch"}, "audio": {0: "batch", 1: "samples"},
                "video": {0: "batch"},
                "sized image": {0: "batch", -2: "height", -1: "width"}}
#: the dimensions left dynamic of a model with two towers (CLIP, SigLIP, CLAP): the texts (the candidate labels) and
#: the images or sounds make two batches of their own
TOWER_DIMS = {"text": {0: "text_batch", 1: "sequence"}, "image": {0: "image_batch"}, "audio": {0: "audio_batch"}}
#: the inputs a tokenizer gives
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: the outputs of a sentence-transformers folder, as optimum names them
SENTENCE_OUTPUTS = ("token_embeddings", "sentence_embedding")
#: the zero-shot detectors exported: an image tower and a text tower scored box by box (OWL-ViT's outputs, read by
#: transformers' post_process_object_detection); Grounding DINO's family fuses the two towers and post-processes
#: otherwise
ZERO_SHOT_DETECTION_MODEL_TYPES = ("owlvit", "owlv2")
#: the hypotheses of the example inputs of a two-tower model (3 labels, then 2)
LABEL_SENTENCES = (("a photo of a cat", "a photo of a dog", "the sea"), ("a robot", "a night in paris"))


class EncoderPiece(torch.nn.Module):
    """The model of a folder returning the outputs its task keeps, by name (``logits``...).

    ``base_model_prefix`` makes the checkpoint's names (``bert.encoder...``) match the wrapper's
    (``model.bert.encoder...``) when the weights are read (:func:`fx2onnx.weights.checkpoint_weights`)."""

    base_model_prefix = "model"

    def __init__(self, model: torch.nn.Module, outputs: tuple[str, ...], pooling: SentencePooling | None = None):
        super().__init__()
        self.model, self.outputs, self.pooling = model, outputs, pooling

    def forward(self, input_ids: Any = None, attention_mask: Any = None, token_type_ids: Any = None,
                pixel_values: Any = None, pixel_mask: Any = None, input_values: Any = None,
                input_features: Any = None, is_longer: Any = None,
                pixel_values_videos: Any = None, pixel_attention_mask: Any = None,
                spatial_shapes: Any = None) -> tuple[torch.Tensor, ...]:
        given = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                     pixel_values=pixel_values, pixel_mask=pixel_mask, input_values=input_values,
                     input_features=input_features, is_longer=is_longer,
                     pixel_values_videos=pixel_values_videos,  # V-JEPA 2's clips
                     # SigLIP 2's patches (NaFlex): which are padding, and each image's grid of patches
                     pixel_attention_mask=pixel_attention_mask, spatial_shapes=spatial_shapes)
        result = self.model(**{k: v for k, v in given.items() if v is not None})
        if self.pooling is not None:  # a sentence-transformers folder: its pooling (and normalization) too
            tokens = result["last_hidden_state"]
            mask = tokens.new_ones(tokens.shape[:2]) if attention_mask is None else attention_mask
            return tokens, self.pooling(tokens, mask)
        return tuple(result[name] for name in self.outputs)


def _processor(folder: str, modality: str) -> Any:
    """The folder's tokenizer, image processor or feature extractor (transformers, offline); one line when the
    folder has none."""
    import transformers

    loader = {"text": transformers.AutoTokenizer, "image": transformers.AutoImageProcessor,
              "audio": transformers.AutoFeatureExtractor, "video": transformers.AutoVideoProcessor}[modality]
    what = {"text": "tokenizer", "image": "image processor", "audio": "feature extractor",
            "video": "video processor"}[modality]
    try:
        return loader.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{folder!r} has no {what} transformers can load ({type(e).__name__}): save the model's "
                         f"{what} in the folder (save_pretrained) before exporting it.") from None


#: a detector's check images: the processor's sizes divided by this (DETR's 800x1333 made the check five times as
#: long as the capture and the conversion together; the graph reads any size, the check gives it two others)
CHECK_IMAGE_SCALE = 3


def smaller_sizes(processor: Any, scale: int = CHECK_IMAGE_SCALE) -> dict[str, Any]:
    """``size=`` for the processor's call giving images ``scale`` times smaller than it makes (multiples of 32,
    at least 64, never larger); ``{}`` when it has no sizes to scale."""
    size = getattr(processor, "size", None)
    fields = dict(size) if isinstance(size, dict) else dict(getattr(size, "__dict__", {}))
    scaled = {k: min(v, max(64, v // scale // 32 * 32)) for k, v in fields.items()
              if isinstance(v, int) and k in ("height", "width", "shortest_edge", "longest_edge", "max_height",
                                              "max_width")}
    return {"size": scaled} if scaled else {}


def pads_to_max_length(processor: Any) -> bool:
    """Whether the feature extractor pads every sound to its own length by default (Whisper's 3000 frames), as
    transformers' pipeline calls it: the model takes that length only."""
    call = getattr(type(processor), "__call__", None)
    try:
        padding = inspect.signature(call).parameters.get("padding") if call is not None else None
    except (TypeError, ValueError):
        return False
    return padding is not None and padding.default == "max_length"


def example_inputs(folder: str, modality: str, accepted: set[str], seed: int = 0,
                   two_towers: bool = False, frames: int = 8, one_query: bool = False,
                   any_size: bool = False) -> list[dict[str, torch.Tensor]]:
    """Two input sets made by the folder's processor (batch 2 then 3, other lengths), keeping the inputs the model
    takes (``accepted``); ``two_towers``: the tokenizer's inputs too, on hypotheses (3 then 2); ``frames``: the
    frames a video model reads; ``one_query``: a zero-shot detector's texts, as many for each image (its queries: two,
    then one); ``any_size``: the model reads images of any size (a detector): the processor makes them smaller
    (:func:`smaller_sizes`)."""
    processor = _processor(folder, modality)
    resize = smaller_sizes(processor) if any_size and modality == "image" else {}
    rng = np.random.default_rng(seed)
    sets = []
    for batch, sentences in ((2, SENTENCES[0]), (3, SENTENCES[1])):
        if modality == "text":
            out = processor(list(sentences), padding=True, return_tensors="pt")
        elif modality == "video":  # the frames the model reads sampled from clips twice as long, as the pipeline
            videos = [rng.integers(0, 256, (2 * frames, 24 + 8 * i, 40 - 4 * i, 3), dtype=np.uint8)
                      for i in range(batch)]
            out = processor(videos, num_frames=frames, do_sample_frames=True, return_tensors="pt")
        elif modality == "image":
            images = [rng.integers(0, 256, (24 + 8 * i, 40 - 4 * i, 3), dtype=np.uint8) for i in range(batch)]
            try:
                out = processor(images=images, return_tensors="pt", **resize)
            except ValueError:  # a processor keeping each image's aspect ratio (ZoeDepth, EoMT): one size a batch
                shape = (32, 40, 3) if batch == 2 else (48, 32, 3)  # each set its own size: both dynamic
                unit = int(getattr(processor, "size_divisor", None) or 0)  # GLPN rounds sizes down to multiples
                if unit > 16:
                    shape = (2 * unit, 3 * unit, 3) if batch == 2 else (3 * unit, 2 * unit, 3)
                same = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(batch)]
                out = processor(images=same, return_tensors="pt")
        else:
            rate = int(getattr(processor, "sampling_rate", 16000))
            sounds = [rng.standard_normal(rate // 4 + 800 * (i + batch)).astype(np.float32) for i in range(batch)]
            # CLAP pads each sound to its length itself, Whisper's extractor to its 30 s (the length its encoder takes)
            padding = {} if two_towers or pads_to_max_length(processor) else dict(padding=True)
            out = processor(sounds, sampling_rate=rate, return_tensors="pt", **padding)
        if two_towers:  # the candidate labels: another batch (3 then 2), or a detector's queries
            # 2 per image then 1: the count is dynamic (transformers.js feeds every label of an image in one run)
            texts = [t for t in SENTENCES[batch - 2] for _ in range(4 - batch)] if one_query else \
                LABEL_SENTENCES[batch - 2]
            out = dict(out, **_processor(folder, "text")(list(texts), padding=True, return_tensors="pt"))
        # int32 masks (wav2vec2's feature extractor) as int64: transformers.js and optimum feed int64
        sets.append({k: v.to(torch.int64) if v.dtype == torch.int32 else v for k, v in dict(out).items()
                     if k in accepted and isinstance(v, torch.Tensor)})
    return sets


def encoder_pieces(model: torch.nn.Module, task: str, folder: str,
                   sentence: SentenceModules | None = None) -> list[Piece]:
    """The one piece of a folder of ``task``: the wrapper around ``model`` (the meta device for the export, the
    CPU for the check), its two input sets and their dynamic dimensions; ``sentence``: the pooling of a
    sentence-transformers folder, computed after the model (outputs ``token_embeddings``, ``sentence_embedding``)."""
    modality, outputs = PIPELINE_TASKS[task]
    pooling = None if sentence is None else SentencePooling(sentence.modes, sentence.normalize)
    outputs = SENTENCE_OUTPUTS if sentence is not None else outputs
    wrapped = inspect.signature(EncoderPiece.forward).parameters
    accepted = set(inspect.signature(model.forward).parameters) & set(wrapped)
    if not getattr(getattr(model.config, "audio_config", None), "enable_fusion", True):
        accepted.discard("is_longer")  # CLAP without fusion reads no is_longer: the graph would drop it
    two_towers = task in TWO_TOWER_TASKS
    one_query = task == "zero-shot-object-detection"  # the same number of texts for each image: its queries
    inputs, inputs2 = example_inputs(folder, modality, accepted, two_towers=two_towers,
                                     frames=int(getattr(model.config, "num_frames", 8) or 8), one_query=one_query,
                                     any_size=task == "object-detection")
    names = [n for n in wrapped if n in inputs]
    # a processor keeping each image's aspect ratio (ZoeDepth, EoMT) gives the two sets other heights or widths
    sized = modality == "image" and "pixel_values" in inputs and \
        inputs["pixel_values"].shape[-2:] != inputs2["pixel_values"].shape[-2:]

    def dims(name: str) -> dict[int, str]:
        if two_towers:
            return TOWER_DIMS["text" if name in TEXT_INPUTS else modality]
        return DYNAMIC_DIMS["sized image" if task == "object-detection" or sized else modality]

    def varies(n: str, d: int) -> bool:  # a feature extractor padding every sound to one length (AST, Whisper)
        return modality != "audio" or d % inputs[n].dim() == 0 or inputs[n].shape[d] != inputs2[n].shape[d]

    dynamic_shapes = {n: {d % rank: name for d, name in dims(n).items() if -rank <= d < rank and varies(n, d)}
                      for n, rank in ((n, inputs[n].dim()) for n in names)}
    return [Piece("model", MODEL_FILE, EncoderPiece(model, outputs, pooling), {n: inputs[n] for n in names},
                  {n: inputs2[n] for n in names}, dynamic_shapes, names, list(outputs))]


def padding_changes_outputs(path: str, inputs: dict[str, torch.Tensor], output_names: list[str],
                            pad_token_id: int | None = None) -> bool:
    """Whether the exported text model at ``path`` gives a padded text other outputs than the text alone (ConvBERT's
    convolutions and FNet's Fourier transform read the pads): the padded batch ``inputs`` against each text run alone,
    on its tokens (``attention_mask``, else the ids other than ``pad_token_id``: FNet takes no mask), within 1e-5 of
    each output's largest value."""
    import onnxruntime

    from ..runtime.folder import session_options

    mask = inputs.get("attention_mask")
    if mask is None and pad_token_id is not None and "input_ids" in inputs:
        mask = inputs["input_ids"] != pad_token_id
    if mask is None or bool(mask.all()):
        return False
    session = onnxruntime.InferenceSession(path, session_options(), providers=["CPUExecutionProvider"])
    feeds = {k: v.numpy() for k, v in inputs.items()}
    batch = session.run(output_names, feeds)
    for row, keep in enumerate(mask.numpy().astype(bool)):
        alone = session.run(output_names, {k: v[row:row + 1, keep] if v.ndim > 1 and v.shape[1] == keep.size
                                           else v[row:row + 1] for k, v in feeds.items()})
        for padded, single in zip(batch, alone):
            padded = padded[row:row + 1, keep] if padded.ndim > 2 and padded.shape[1] == keep.size else \
                padded[row:row + 1]
            scale = float(np.abs(single).max()) if single.size else 0.0  # a tiny model's logits are tiny too
            if padded.shape != single.shape or float(np.abs(padded - single).max()) > 1e-5 * scale:
                return True
    return False


def export_encoder_pieces(task: str, folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                          options: dict[str, Any]) -> tuple[list[Piece], Any]:
    """Exports the model of a folder of ``task`` into ``out_dir/onnx/model.onnx`` (the weights streamed from the
    checkpoint, the model built with its parameters on the meta device); returns the piece and the function
    rebuilding it around the eager model for the check."""
    import transformers  # deferred: heavy

    if task == "zero-shot-classification" and not any(str(k).lower().startswith("entail")
                                                      for k in (getattr(config, "label2id", None) or {})):
        raise ValueError(f"{config.architectures[0]} has no 'entailment' label (config.json's label2id: "
                         f"{sorted(getattr(config, 'label2id', {}) or {})}): zero-shot-classification takes a natural "
                         "language inference classifier.")
    if task == "zero-shot-object-detection" and config.model_type not in ZERO_SHOT_DETECTION_MODEL_TYPES:
        raise ValueError(f"{config.architectures[0]} is a zero-shot detector of type {config.model_type!r}: exporting "
                         f"such a folder supports {list(ZERO_SHOT_DETECTION_MODEL_TYPES)} (an image tower and a text "
                         "tower scored box by box) today.")
    with parameters_on_meta():  # the buffers computed (BERT's position and token type ids)
        model = getattr(transformers, config.architectures[0])._from_config(config, dtype=dtype).eval()
    # BART's classifier, tagger and base model start their decoder from the input ids: one pass, not a generator;
    # so does its generator filling a mask (transformers' fill-mask pipeline: one pass, the logits at the mask)
    if "decoder_input_ids" in inspect.signature(model.forward).parameters and model.can_generate() and \
            task != "fill-mask":
        raise ValueError(f"{config.architectures[0]} is an encoder-decoder generating tokens: a {task} folder holds "
                         "a single-pass model; export its encoder class (T5EncoderModel...) or a seq2seq task.")
    sentence = read_sentence_modules(folder) if task == "feature-extraction" else None
    pieces = encoder_pieces(model, task, folder, sentence)
    optimize, quantize = options["optimize"], options["quantize"]
    for piece in pieces:
        options["say"](f"exporting {config.architectures[0]} ({task}, {str(dtype).replace('torch.', '')}, "
                       f"optimize={optimize}{', ' + quantize if quantize else ''})")
        path = os.path.join(out_dir, piece.filename)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with torch_export_patches(patch_transformers=True) as modificator:
            to_onnx_from_checkpoint(
                folder, (), modificator(copy.deepcopy(piece.inputs)), filename=path, model=piece.module,
                dtype=dtype, progress=options["progress"], dynamic_shapes=piece.dynamic_shapes,
                target_opset=options["opset"], optimize=False if optimize == "none" else optimize, quantize=quantize,
                quantize_block_size=options["block_size"], quantize_symmetric=options["symmetric"])
        proto = load_without_weights(path)
        given = [i.name for i in proto.graph.input]
        if len(given) != len(piece.input_names):
            raise ValueError(f"{config.architectures[0]}: the export kept the inputs {given}, the processor gives "
                             f"{piece.input_names}.")
        rename_values(path, piece.input_names, piece.output_names, {})
        rename_external_data(path, data_file_name(piece.filename))  # model.onnx_data, as transformers.js names it
        if PIPELINE_TASKS[task][0] == "text" and padding_changes_outputs(
                path, piece.inputs, piece.output_names, _processor(folder, "text").pad_token_id):
            piece.module.padding = "per_text"  # fx2onnx.json: run gives the model one text at a time
    if sentence is not None:
        copy_sentence_modules(folder, sentence, out_dir)
    return pieces, lambda eager, _config: encoder_pieces(eager, task, folder, sentence)
