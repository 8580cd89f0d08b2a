"""Texts, images and sounds to what transformers' ``pipeline`` returns, with a folder of a single-pass encoder
(``python -m fx2onnx run OUT ...``, ``fx2onnx.pipeline(OUT)``).

:class:`Pipeline` opens ``onnx/model.onnx`` of a folder ``export`` wrote for one of :data:`PIPELINE_TASKS` with
onnxruntime, prepares the inputs with the folder's own tokenizer, image processor or feature extractor
(transformers, offline), runs the model and post-processes its output as transformers' pipeline of the task does:
labels and scores (softmax, or sigmoid for one label or several labels at once, from ``config.json``), a tagger's
entities (grouped by transformers' aggregation strategies), the ``top_k`` tokens of a mask, candidate labels scored
by an NLI classifier or by a two-tower model (CLIP, SigLIP, CLAP) against an image or a sound, a CTC
transcription (greedy, the tokenizer's decoding), an embedding (``last_hidden_state``, nested lists; a
sentence-transformers folder's ``sentence_embedding``, one vector per text), and, through
the image processor's own post-processing, a detector's boxes and a depth map. One input gives one result, a list
gives a list.

.. code-block:: python

    import fx2onnx

    classify = fx2onnx.pipeline("bert_onnx")
    print(classify("the movie was great"))  # [{'label': 'positive', 'score': 0.91}]
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Sequence

import numpy as np

from ..formats import FOLDER_METADATA
from .folder import _read_json, session_options
from .entities import AGGREGATIONS, group_entities, tag_tokens
from .input_ranges import check_input_ranges
from .integrity import check_folder_files
from .speech_base import read_wav
from .vision import image_batches, read_image

#: the model of a single-pass folder, where transformers.js and optimum look for it
MODEL_FILE = "onnx/model.onnx"
#: what to do with an input outside the sizes the export narrowed (:mod:`fx2onnx.runtime.input_ranges`)
RANGE_FIXES = {"text": "shorten the text", "image": "give an image of the size the export was made on",
               "audio": "cut the audio", "video": "give fewer or smaller frames"}
#: task -> (what it reads: text, image or audio; the model's outputs it keeps)
PIPELINE_TASKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "feature-extraction": ("text", ("last_hidden_state",)),
    "fill-mask": ("text", ("logits",)),
    "text-classification": ("text", ("logits",)),
    # a natural language inference classifier (an "entailment" label) scoring a text against candidate labels
    "zero-shot-classification": ("text", ("logits",)),
    "token-classification": ("text", ("logits",)),
    "image-classification": ("image", ("logits",)),
    "image-feature-extraction": ("image", ("last_hidden_state",)),
    # boxes from the image processor's post_process_object_detection (DETR, YOLOS...)
    "object-detection": ("image", ("logits", "pred_boxes")),
    # a semantic segmenter's masks, one per label found (the image processor's post_process_semantic_segmentation)
    "image-segmentation": ("image", ("logits",)),
    # a universal segmenter's (Mask2Former...) panoptic, instance or semantic masks: transformers' image-segmentation
    "universal-segmentation": ("image", ("class_queries_logits", "masks_queries_logits")),
    # a depth map per image, at the image's size (the image processor's post_process_depth_estimation)
    "depth-estimation": ("image", ("predicted_depth",)),
    # candidate labels scored against an image by a model of two towers (CLIP: softmax, SigLIP: sigmoid), the
    # embeddings of both beside the logits as optimum exports CLIP
    "zero-shot-image-classification": ("image", ("logits_per_image", "text_embeds", "image_embeds")),
    # boxes of candidate labels (OWL-ViT: one label per run, as the pipeline), the post-processing of its processor
    "zero-shot-object-detection": ("image", ("logits", "pred_boxes", "text_embeds", "image_embeds")),
    "audio-classification": ("audio", ("logits",)),
    # candidate labels scored against a sound by a model of two towers (CLAP: softmax over the labels)
    "zero-shot-audio-classification": ("audio", ("logits_per_audio", "text_embeds", "audio_embeds")),
    "automatic-speech-recognition": ("audio", ("logits",)),
    # a clip's labels: the frames the model reads sampled by the folder's video processor (VideoMAE...)
    "video-classification": ("video", ("logits",)),
}
#: the tasks whose folder holds several pieces, run by a pipeline class of their own module (named, not imported):
#: task -> (what it reads, the class)
OWN_PIPELINES: dict[str, tuple[str, str]] = {
    # SAM's image encoder, then its prompt encoder and mask decoder on a grid of points
    "mask-generation": ("image", "fx2onnx.runtime.mask_generation.MaskGenerationPipeline"),
    # VITS: the waveform of a text in one pass
    "text-to-audio": ("text", "fx2onnx.runtime.text_to_audio.TextToAudioPipeline"),
    # TAPAS: the cells answering questions about a table (the tokenizer's own post-processing)
    "table-question-answering": ("text", "fx2onnx.runtime.table_qa.TableQuestionAnsweringPipeline"),
    # LayoutLM: the answer's words among the words of a page and their boxes
    "document-question-answering": ("text", "fx2onnx.runtime.document_qa.DocumentQuestionAnsweringPipeline"),
    # EfficientLoFTR: the matches of a pair of images (the image processor's post_process_keypoint_matching)
    "keypoint-matching": ("image", "fx2onnx.runtime.keypoint_matching.KeypointMatchingPipeline"),
}
#: (task, split) -> the pipeline class of a folder cut otherwise than its task's first family
SPLIT_PIPELINES: dict[tuple[str, str], str] = {
    ("text-to-audio", "codebooks"): "fx2onnx.runtime.text_to_audio_codebooks.CodebookTextToAudioPipeline",
    ("text-to-audio", "spectrogram"): "fx2onnx.runtime.speecht5.SpeechT5Pipeline",
}
#: the tasks of a model of two towers: the texts (candidate labels) and the images or sounds, each its own batch
TWO_TOWER_TASKS = ("zero-shot-image-classification", "zero-shot-audio-classification", "zero-shot-object-detection")
#: the hypothesis template of the candidate labels, by task (transformers' pipelines' defaults)
TEMPLATES = {"zero-shot-classification": "This example is {}.",
             "zero-shot-image-classification": "This is a photo of {}.",
             "zero-shot-audio-classification": "This is a sound of {}.", "zero-shot-object-detection": "{}"}
#: the tasks of transformers' image-segmentation pipeline
SEGMENTATION_TASKS = ("image-segmentation", "universal-segmentation")
#: the endings of a path meant as an image (a missing one is a missing file, not a text)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff")
#: the option of the command line giving each modality
MODALITY_OPTION = {"text": "texts", "image": "--image PATH", "audio": "--audio PATH", "video": "--video PATH"}


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _decoded_image(path: str) -> Any:
    """The RGB image of ``path``; one line naming the file when it does not decode (Pillow raises many types)."""
    try:
        return read_image(path)
    except Exception as e:  # noqa: BLE001 - a cut or renamed file fails in many ways
        raise ValueError(f"{path!r} does not decode as an image (PNG, JPEG...) ({type(e).__name__}): give a whole "
                         "image file (a download cut short, or another format renamed, fails here).") from None


def read_video(path: str) -> np.ndarray:
    """The RGB frames (frames, height, width, 3) of a video file, decoded by PyAV; one line when PyAV is missing or
    the file does not decode."""
    try:
        import av  # deferred: optional
    except ImportError:
        raise ValueError(f"decoding the video file {path!r} needs PyAV (pip install av): give a folder of frames or a "
                         ".npy array (frames, height, width, 3) instead.") from None
    try:
        with av.open(path) as container:
            frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    except (av.FFmpegError, ValueError, IndexError) as e:
        raise ValueError(f"{path!r} does not decode as a video ({type(e).__name__}): give a whole video file, a "
                         "folder of frames or a .npy array (frames, height, width, 3).") from None
    if not frames:
        raise ValueError(f"{path!r} holds no video frame.")
    return np.stack(frames)


def open_task_folder(pipeline: Any, folder: str | os.PathLike, task: str, providers: Sequence[str] | None,
                     threads: int | None) -> None:
    """Sets ``pipeline`` on a folder of one model written for ``task``, a task with a pipeline class of its own
    (table and document question answering, text to audio): text first, no labels."""
    pipeline.folder = os.fspath(folder)
    metadata = _read_json(os.path.join(pipeline.folder, FOLDER_METADATA))
    pipeline.task, piece = metadata.get("task"), metadata.get("pieces", {}).get("model")
    if pipeline.task != task or piece is None:
        raise ValueError(f"{pipeline.folder!r} is a folder of task {pipeline.task!r}, not a {task} folder.")
    pipeline.modality, pipeline.outputs, pipeline.sentence = "text", tuple(piece["outputs"]), False
    _open_model(pipeline, metadata, piece, providers, threads)
    pipeline.id2label = {}


def _open_model(pipeline: Any, metadata: dict, piece: dict, providers: Sequence[str] | None,
                threads: int | None) -> None:
    """What every pipeline reads of its folder's model piece: the files checked, the inputs, the padding rule,
    the session, ``config.json``; the processors loaded on first use."""
    import onnxruntime

    check_folder_files(pipeline.folder, metadata)
    pipeline.input_names = list(piece["inputs"])
    #: a text model whose outputs change with padding (ConvBERT, FNet): each text run alone, as the pipeline
    pipeline.per_text = piece.get("padding") == "per_text"
    pipeline.session = onnxruntime.InferenceSession(os.path.join(pipeline.folder, piece["file"]),
                                                    session_options(threads),
                                                    providers=list(providers or ["CPUExecutionProvider"]))
    #: the integer inputs the graph takes as int64 (a feature extractor's int32 mask is fed as such)
    pipeline.int64_inputs = {i.name for i in pipeline.session.get_inputs() if i.type == "tensor(int64)"}
    pipeline.config = _read_json(os.path.join(pipeline.folder, "config.json"))
    pipeline._processor = None
    pipeline._tokenizer = None


class Pipeline:
    """A folder of a single-pass encoder, called as transformers' pipeline of its task.

    :param folder: a folder written by ``python -m fx2onnx export`` for one of :data:`PIPELINE_TASKS`
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None):
        self.folder = os.fspath(folder)
        metadata = _read_json(os.path.join(self.folder, FOLDER_METADATA))
        self.task = metadata.get("task")
        piece = metadata.get("pieces", {}).get("model")
        if self.task not in PIPELINE_TASKS or piece is None:
            raise ValueError(f"{self.folder!r} is a folder of task {self.task!r}, which run does not serve: run takes "
                             f"a folder of {sorted(PIPELINE_TASKS)} (generate runs the generation tasks).")
        self.modality, self.outputs = PIPELINE_TASKS[self.task]
        self.outputs = tuple(piece.get("outputs") or self.outputs)  # a sentence-transformers folder's are its own
        #: a sentence-transformers folder: the pooled (normalized) embedding of each text, as its ``encode``
        self.sentence = "sentence_embedding" in self.outputs
        self._processor: Any = None
        self._tokenizer: Any = None
        _open_model(self, metadata, piece, providers, threads)
        self.id2label = {int(k): v for k, v in (self.config.get("id2label") or {}).items()}

    @property
    def processor(self) -> Any:
        """The folder's tokenizer, image processor or feature extractor (loaded on first use, offline)."""
        if self._processor is None:
            import transformers

            loader, what = {"text": (transformers.AutoTokenizer, "tokenizer"),
                            "image": (transformers.AutoImageProcessor, "image processor"),
                            "audio": (transformers.AutoFeatureExtractor, "feature extractor"),
                            "video": (transformers.AutoVideoProcessor, "video processor")}[self.modality]
            try:
                self._processor = loader.from_pretrained(self.folder, local_files_only=True)
            except (OSError, ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{self.folder!r} has no {what} transformers can load ({type(e).__name__}): copy "
                                 "the processor files of the checkpoint into the folder.") from None
        return self._processor

    @property
    def tokenizer(self) -> Any:
        """The tokenizer decoding a transcription (a CTC folder's own), or of a two-tower model's candidate labels
        (offline)."""
        if self._tokenizer is None:
            import transformers

            self._tokenizer = self.processor if self.modality == "text" else \
                transformers.AutoTokenizer.from_pretrained(self.folder, local_files_only=True)
        return self._tokenizer

    def _run(self, feeds: dict[str, Any], all_outputs: bool = False) -> Any:
        """The model's first output on ``feeds`` (the processor's outputs), or all of them."""
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise ValueError(f"the {self.modality} processor of {self.folder!r} gives no {missing}: the folder's "
                             "processor files are not those it was exported with; export it again.")
        check_input_ranges(self.session, feeds, f"The {self.modality}", RANGE_FIXES[self.modality])
        mask = np.asarray(feeds["attention_mask"]) if "attention_mask" in feeds else None
        pad = getattr(self.tokenizer, "pad_token_id", None) if self.per_text and mask is None else None
        if pad is not None and "input_ids" in feeds:  # a tokenizer giving no mask (FNet's): the ids but the pads
            mask = np.asarray(feeds["input_ids"]) != pad
        if self.per_text and mask is not None and not mask.all():
            outputs = self._run_unpadded(feeds, mask.astype(bool))
        else:
            outputs = self.session.run(list(self.outputs), {n: self._feed(n, feeds[n]) for n in self.input_names})
        return outputs if all_outputs else outputs[0]

    def _feed(self, name: str, value: Any) -> np.ndarray:
        """``value`` as the graph takes input ``name``: an int32 mask (wav2vec2's feature extractor) as int64 where
        the graph takes int64 (the folders since the masks are exported as int64, as transformers.js feeds them)."""
        value = np.asarray(value)
        if name in getattr(self, "int64_inputs", ()) and value.dtype.kind in "iub" and value.dtype != np.int64:
            return value.astype(np.int64)
        return value

    def _run_unpadded(self, feeds: dict[str, Any], mask: np.ndarray) -> list[np.ndarray]:
        """The outputs of a padded batch, each text run alone on its tokens (``mask``): a token's output back at its
        place, zeros at the pads."""
        length = mask.shape[1]
        fed = {n: self._feed(n, feeds[n]) for n in self.input_names}
        rows = []
        for row, keep in enumerate(mask):
            alone = {n: fed[n][row:row + 1] for n in self.input_names}
            alone = {n: v[:, keep] if v.ndim > 1 and v.shape[1] == length else v for n, v in alone.items()}
            rows.append(self.session.run(list(self.outputs), alone))
        outputs = []
        for index, first in enumerate(rows[0]):
            if first.ndim > 2 and first.shape[1] == int(mask[0].sum()):  # (batch, sequence, ...)
                out = np.zeros((len(rows), length, *first.shape[2:]), dtype=first.dtype)
                for row, (keep, result) in enumerate(zip(mask, rows)):
                    out[row, keep] = result[index][0]
                outputs.append(out)
            else:
                outputs.append(np.concatenate([result[index] for result in rows]))
        return outputs

    # -- inputs

    def _refuse(self, value: Any) -> None:
        kind = {"text": "a text", "image": "an image", "audio": "an audio", "video": "a video"}[self.modality]
        raise ValueError(f"{self.folder!r} is a folder of task {self.task!r}: it takes {kind} "
                         f"({MODALITY_OPTION[self.modality]}), not {value!r:.60}.")

    def _images(self, items: list[Any]) -> list[Any]:
        images = []
        for item in items:
            if isinstance(item, (str, os.PathLike)):
                if not os.path.isfile(item):
                    if os.path.splitext(os.fspath(item))[1].lower() in IMAGE_SUFFIXES:
                        raise FileNotFoundError(f"Image file {os.fspath(item)!r} does not exist.")
                    self._refuse(item)  # a text
                item = _decoded_image(os.fspath(item))
            elif not (hasattr(item, "convert") or isinstance(item, np.ndarray) and item.ndim == 3):
                self._refuse(item)  # a PIL image or an array (height, width, channels)
            images.append(item)
        return images

    def _audios(self, items: list[Any]) -> list[np.ndarray]:
        rate = int(getattr(self.processor, "sampling_rate", 16000))
        audios = []
        for item in items:
            if isinstance(item, (str, os.PathLike)):
                if not os.fspath(item).lower().endswith(".wav") and not os.path.isfile(item):
                    self._refuse(item)
                audios.append(read_wav(item, rate))
            elif isinstance(item, np.ndarray) and item.ndim == 1:
                audios.append(item.astype(np.float32))
            else:
                self._refuse(item)
        return audios

    def _videos(self, items: list[Any]) -> list[Any]:
        """Each video as its frames (an array (frames, height, width, channels)): given, a ``.npy`` file, a folder of
        images in the order of their names or a video file (decoded by PyAV)."""
        videos = []
        for item in items:
            if isinstance(item, np.ndarray) and item.ndim == 4:
                videos.append(item)
                continue
            if not isinstance(item, (str, os.PathLike)):
                self._refuse(item)
            path = os.fspath(item)
            if os.path.isdir(path):
                names = sorted(n for n in os.listdir(path) if n.lower().endswith(IMAGE_SUFFIXES))
                if not names:
                    raise ValueError(f"the folder {path!r} holds no image: a video is a folder of frames (PNG, "
                                     "JPEG...), a .npy array (frames, height, width, 3) or a video file.")
                videos.append(np.stack([np.asarray(_decoded_image(os.path.join(path, n))) for n in names]))
            elif not os.path.isfile(path):
                raise FileNotFoundError(f"Video {path!r} does not exist.")
            elif path.lower().endswith(".npy"):
                frames = np.load(path)
                if frames.ndim != 4 or frames.shape[-1] != 3:
                    raise ValueError(f"{path!r} holds an array of shape {frames.shape}: a video is an array "
                                     "(frames, height, width, 3).")
                videos.append(frames)
            else:
                videos.append(read_video(path))
        return videos

    def _texts(self, items: list[Any]) -> list[str]:
        if not all(isinstance(t, str) for t in items):
            self._refuse(next(t for t in items if not isinstance(t, str)))
        return items

    # -- the tasks

    def __call__(self, inputs: Any, top_k: int | None = None, candidate_labels: str | Sequence[str] | None = None,
                 hypothesis_template: str | None = None, multi_label: bool = False,
                 threshold: float | None = None, aggregation_strategy: str = "none", subtask: str | None = None) -> Any:
        """What transformers' ``pipeline(task, model=folder)(inputs)`` returns (``top_k``: the labels or tokens kept;
        default: the pipeline's; ``candidate_labels``, ``hypothesis_template``, ``multi_label``: those of
        zero-shot-classification; ``threshold``: the lowest score of a detected object; ``aggregation_strategy``: a
        tagger's grouping of tokens into entities, one of :data:`fx2onnx.runtime.entities.AGGREGATIONS`; ``subtask``:
        a segmenter's ``panoptic``, ``instance`` or ``semantic`` masks, default the first its processor makes)."""
        single = not isinstance(inputs, (list, tuple))
        items = [inputs] if single else list(inputs)
        if not items:
            raise ValueError("nothing to run: give at least one input.")
        template = TEMPLATES.get(self.task, "") if hypothesis_template is None else hypothesis_template
        if threshold is None and self.task not in SEGMENTATION_TASKS:  # the pipelines' defaults
            threshold = 0.1 if self.task == "zero-shot-object-detection" else 0.5
        if self.task == "zero-shot-classification":
            results = [self._zero_shot(text, candidate_labels, template, multi_label) for text in self._texts(items)]
        elif self.task == "zero-shot-image-classification":  # one image at a time, as the pipeline
            labels = self._candidates(candidate_labels, template)
            results = [self._zero_shot_image(image, labels, template) for image in self._images(items)]
        elif self.task == "zero-shot-object-detection":  # one image and one label at a time, as the pipeline
            labels = self._candidates(candidate_labels, template)
            results = [self._zero_shot_detect(image, labels, threshold, top_k) for image in self._images(items)]
        elif self.task == "zero-shot-audio-classification":
            labels = self._candidates(candidate_labels, template)
            results = [self._zero_shot_audio(audio, labels, template) for audio in self._audios(items)]
        elif self.modality == "text":
            if aggregation_strategy not in AGGREGATIONS:
                raise ValueError(f"the aggregation {aggregation_strategy!r} is not one of transformers' "
                                 f"{list(AGGREGATIONS)}.")
            results = self._text_task(self._texts(items), top_k, aggregation_strategy)
        elif self.task == "object-detection":  # one image at a time, as the pipeline (no padding to the largest)
            results = [self._detect(image, threshold) for image in self._images(items)]
        elif self.task == "depth-estimation":
            results = [self._depth(image) for image in self._images(items)]
        elif self.task in SEGMENTATION_TASKS:
            results = [self._segment(image, subtask, 0.9 if threshold is None else threshold)
                       for image in self._images(items)]
        elif self.modality == "image":
            results = self._image_task(self._images(items), top_k)
        elif self.modality == "video":
            results = [self._video_task(video, top_k) for video in self._videos(items)]
        else:
            results = [self._audio_task(audio, top_k) for audio in self._audios(items)]
        if self.task == "text-classification" and top_k is None:  # transformers: a list for one text too
            return [r[0] for r in results] if not single else [results[0][0]]
        return results[0] if single else results

    def _scores(self, logits: np.ndarray, sigmoid_for_one: bool = True) -> np.ndarray:
        problem = self.config.get("problem_type")
        if problem == "regression":
            return logits
        if problem == "multi_label_classification" or (sigmoid_for_one and logits.shape[-1] == 1):
            return _sigmoid(logits)
        return _softmax(logits)

    def _labels(self, scores: np.ndarray, top_k: int | None) -> list[dict[str, Any]]:
        order = np.argsort(-scores, kind="stable")[:top_k]
        return [{"label": self.id2label.get(int(i), f"LABEL_{int(i)}"), "score": float(scores[i])} for i in order]

    def _text_task(self, texts: list[str], top_k: int | None, aggregation: str = "none") -> list[Any]:
        tokenizer = self.processor
        if tokenizer.pad_token is None and len(texts) > 1:  # no padding: one text at a time, as the pipeline
            return [r for text in texts for r in self._text_task([text], top_k, aggregation)]
        # the mask even where the model takes none (FNet): each text's own tokens, its pads left out
        encoded = tokenizer(texts, padding=True, return_tensors="np", return_special_tokens_mask=True,
                            return_attention_mask=True, return_offsets_mapping=self.task == "token-classification")
        if self.sentence:  # one vector per text (truncated to the tokenizer's length, as sentence-transformers)
            encoded = tokenizer(texts, padding=True, truncation=True, return_tensors="np")
            pooled = self._run(encoded, all_outputs=True)[self.outputs.index("sentence_embedding")]
            return [row.tolist() for row in pooled]
        output = self._run(encoded)
        lengths = encoded["attention_mask"].sum(axis=1) if "attention_mask" in encoded else \
            [encoded["input_ids"].shape[1]] * len(texts)
        results = []
        for row, (text, length) in enumerate(zip(texts, lengths)):
            if self.task == "text-classification":  # (batch, labels)
                results.append(self._labels(self._scores(output[row]), 1 if top_k is None else top_k))
                continue
            ids, out = encoded["input_ids"][row][:length], output[row][:length]  # (batch, sequence, ...)
            if self.task == "feature-extraction":
                results.append(out[None].tolist())
            elif self.task == "fill-mask":
                results.append(self._fill_mask(ids, out, 5 if top_k is None else top_k))
            else:
                special = encoded["special_tokens_mask"][row][:length]
                offsets = encoded["offset_mapping"][row][:length]
                results.append(self._entities(text, ids, _softmax(out), special, offsets, aggregation))
        return results

    def _candidates(self, labels: str | Sequence[str] | None, template: str) -> list[str]:
        """The candidate labels (a list, or comma-separated), checked with the hypothesis template."""
        labels = [x.strip() for x in labels.split(",") if x.strip()] if isinstance(labels, str) else list(labels or [])
        if not labels:
            raise ValueError(f"a {self.task} folder needs candidate labels (--labels sports,politics).")
        if template.format(labels[0]) == template:
            raise ValueError(f"the hypothesis template {template!r} has no {{}} where the label goes.")
        return labels

    def _zero_shot(self, text: str, labels: str | Sequence[str] | None, template: str, multi_label: bool) -> Any:
        """The candidate labels sorted by how much the classifier finds the text entails "This example is {label}"."""
        labels = self._candidates(labels, template)
        entail = next((i for i, name in self.id2label.items() if name.lower().startswith("entail")), -1)
        encoded = self.processor([text] * len(labels), [template.format(x) for x in labels], padding=True,
                                 truncation="only_first", return_tensors="np")
        logits = self._run(encoded).astype(np.float32)
        if multi_label or len(labels) == 1:
            pair = logits[:, [-1 if entail == 0 else 0, entail]]
            scores = _softmax(pair)[:, 1]
        else:
            scores = _softmax(logits[:, entail])
        order = list(reversed(scores.argsort()))
        return {"sequence": text, "labels": [labels[i] for i in order], "scores": [float(scores[i]) for i in order]}

    def _zero_shot_image(self, image: Any, labels: list[str], template: str) -> list[dict[str, Any]]:
        """The candidate labels sorted by the similarity of "This is a photo of {label}." to the image: a softmax
        over the labels (CLIP), or each label's sigmoid (SigLIP, its texts padded to 64 tokens)."""
        sigmoid = "siglip" in str(self.config.get("model_type", ""))
        padding = dict(padding="max_length", max_length=64, truncation=True) if sigmoid else dict(padding=True)
        feeds = dict(self.processor(images=[image], return_tensors="np"))
        return self._two_towers(feeds, labels, template, padding, sigmoid)

    def _zero_shot_detect(self, image: Any, labels: list[str], threshold: float,
                          top_k: int | None) -> list[dict[str, Any]]:
        """The boxes of each candidate label in one image (the image processor's ``post_process_object_detection``),
        sorted by score."""
        import types

        import torch  # deferred: transformers' post-processing takes torch tensors

        pixels = dict(self.processor(images=[image], return_tensors="np"))
        size = tuple(int(v) for v in np.asarray(image).shape[:2])
        found = []
        for label in labels:
            feeds = dict(pixels, **self.tokenizer(label, return_tensors="np"))
            logits, boxes = self._run(feeds, all_outputs=True)[:2]
            objects = self.processor.post_process_object_detection(
                types.SimpleNamespace(logits=torch.from_numpy(logits), pred_boxes=torch.from_numpy(boxes)),
                threshold=threshold, target_sizes=[size])[0]
            for index in objects["scores"].nonzero():
                box = objects["boxes"][index][0].int().tolist()
                found.append({"score": objects["scores"][index].item(), "label": label,
                              "box": dict(zip(("xmin", "ymin", "xmax", "ymax"), box))})
        found = sorted(found, key=lambda x: x["score"], reverse=True)
        return found[:top_k] if top_k else found

    def _zero_shot_audio(self, audio: np.ndarray, labels: list[str], template: str) -> list[dict[str, Any]]:
        """The candidate labels sorted by the similarity of "This is a sound of {label}." to the sound (CLAP)."""
        extractor = self.processor
        feeds = dict(extractor([audio], sampling_rate=int(extractor.sampling_rate), return_tensors="np"))
        return self._two_towers(feeds, labels, template, dict(padding=True), False)

    def _two_towers(self, feeds: dict[str, Any], labels: list[str], template: str, padding: dict[str, Any],
                    sigmoid: bool) -> list[dict[str, Any]]:
        """The labels and scores of one image or sound (``feeds``) against the hypotheses of the labels."""
        feeds.update(self.tokenizer([template.format(x) for x in labels], return_tensors="np", **padding))
        logits = self._run(feeds)[0].astype(np.float32)
        scores = _sigmoid(logits) if sigmoid else _softmax(logits)
        return [{"score": float(score), "label": label}
                for score, label in sorted(zip(scores.tolist(), labels), key=lambda pair: -pair[0])]

    def _fill_mask(self, ids: np.ndarray, logits: np.ndarray, top_k: int) -> list[Any]:
        tokenizer = self.processor
        masked = np.nonzero(ids == tokenizer.mask_token_id)[0]
        if masked.size == 0:
            raise ValueError(f"no mask token {tokenizer.mask_token!r} in the text: put one where a word is to be "
                             "filled in.")
        probs = _softmax(logits[masked])
        rows = []
        for i, p in enumerate(probs):
            best = np.argsort(-p, kind="stable")[:top_k]
            row = []
            for token in best:
                filled = ids.copy()
                filled[masked[i]] = token
                filled = filled[filled != tokenizer.pad_token_id]
                row.append({"score": float(p[token]), "token": int(token), "token_str": tokenizer.decode([int(token)]),
                            "sequence": tokenizer.decode(filled, skip_special_tokens=masked.size == 1)})
            rows.append(row)
        return rows[0] if masked.size == 1 else rows

    def _entities(self, text: str, ids: np.ndarray, scores: np.ndarray, special: np.ndarray,
                  offsets: np.ndarray, aggregation: str) -> list[dict[str, Any]]:
        """The entities of one text for transformers' ``aggregation_strategy`` (:mod:`fx2onnx.runtime.entities`)."""
        tokenizer = self.processor
        backend = getattr(tokenizer, "_tokenizer", None)
        word_pieces = bool(getattr(getattr(backend, "model", None), "continuing_subword_prefix", None))
        tagged = tag_tokens(text, tokenizer.convert_ids_to_tokens([int(i) for i in ids]), ids, scores, special,
                            offsets, tokenizer.unk_token_id, word_pieces)
        return group_entities(tagged, aggregation, self.id2label, tokenizer.convert_tokens_to_string)

    def _image_task(self, images: list[Any], top_k: int | None) -> list[Any]:
        # one batch, or one run per image where the processor keeps each image's own size
        output = [row for pixels in image_batches(self.processor, images) for row in self._run(pixels)]
        if self.task == "image-feature-extraction":
            return [row[None].tolist() for row in output]
        top_k = min(5 if top_k is None else top_k, output[0].shape[-1])  # config.json may name no label
        return [self._labels(self._scores(row), top_k) for row in output]

    def _detect(self, image: Any, threshold: float) -> list[dict[str, Any]]:
        """The objects of one image: the folder's image processor's ``post_process_object_detection``."""
        import types

        import torch  # deferred: transformers' post-processing takes torch tensors

        processor = self.processor
        logits, boxes = self._run(processor(images=[image], return_tensors="np"), all_outputs=True)
        size = np.asarray(image).shape[:2]  # (height, width) of the original image
        found = processor.post_process_object_detection(
            types.SimpleNamespace(logits=torch.from_numpy(logits), pred_boxes=torch.from_numpy(boxes)),
            threshold=threshold, target_sizes=[tuple(int(v) for v in size)])[0]
        return [{"score": float(score), "label": self.id2label.get(int(label), f"LABEL_{int(label)}"),
                 "box": dict(zip(("xmin", "ymin", "xmax", "ymax"), (int(v) for v in box.int().tolist())))}
                for score, label, box in zip(found["scores"], found["labels"], found["boxes"])]

    def _depth(self, image: Any) -> dict[str, Any]:
        """The depth map of one image at its size (``predicted_depth``), and as a grey image from 0 to 255
        (``depth``)."""
        import types

        import PIL.Image
        import torch  # deferred: transformers' post-processing takes torch tensors

        processor = self.processor
        predicted = self._run(processor(images=[image], return_tensors="np"))
        size = tuple(int(v) for v in np.asarray(image).shape[:2])
        depth = processor.post_process_depth_estimation(
            types.SimpleNamespace(predicted_depth=torch.from_numpy(predicted)), [size])[0]["predicted_depth"]
        depth = depth.detach().numpy()
        scaled = (depth - depth.min()) / (depth.max() - depth.min())
        return {"predicted_depth": depth, "depth": PIL.Image.fromarray((scaled * 255).astype("uint8"))}

    def _segment(self, image: Any, subtask: str | None, threshold: float) -> list[dict[str, Any]]:
        """One mask per segment of the image at its size (255 where it is): the image processor's panoptic, instance
        or semantic post-processing, the first it has which ``subtask`` allows, as transformers' pipeline."""
        import types

        import PIL.Image
        import torch  # deferred: transformers' post-processing takes torch tensors

        if subtask not in (None, "panoptic", "instance", "semantic"):
            raise ValueError(f"the subtask {subtask!r} is not one of panoptic, instance, semantic.")
        processor = self.processor
        outputs = self._run(processor(images=[image], return_tensors="np"), all_outputs=True)
        outputs = types.SimpleNamespace(**{n: torch.from_numpy(o) for n, o in zip(self.outputs, outputs)})
        size = tuple(int(v) for v in np.asarray(image).shape[:2])
        found = next((getattr(processor, f"post_process_{kind}_segmentation") for kind in ("panoptic", "instance")
                      if subtask in (kind, None) and hasattr(processor, f"post_process_{kind}_segmentation")), None)
        if found is not None:
            result = found(outputs, threshold=threshold, mask_threshold=0.5, overlap_mask_area_threshold=0.5,
                           target_sizes=[size])[0]
            segmentation = result["segmentation"].numpy()
            return [{"score": segment["score"], "label": self.id2label.get(int(segment["label_id"]),
                                                                           f"LABEL_{segment['label_id']}"),
                     "mask": PIL.Image.fromarray(((segmentation == segment["id"]) * 255).astype(np.uint8), mode="L")}
                    for segment in result["segments_info"]]
        if subtask not in ("semantic", None) or not hasattr(processor, "post_process_semantic_segmentation"):
            raise ValueError(f"the image processor of {self.folder!r} makes no {subtask} segmentation.")
        segmentation = processor.post_process_semantic_segmentation(outputs, target_sizes=[size])[0].numpy()
        return [{"score": None, "label": self.id2label.get(int(label), f"LABEL_{int(label)}"),
                 "mask": PIL.Image.fromarray(((segmentation == label) * 255).astype(np.uint8), mode="L")}
                for label in np.unique(segmentation)]

    def _video_task(self, video: np.ndarray, top_k: int | None) -> list[dict[str, Any]]:
        """The labels of one clip, its frames sampled as the pipeline does (the model's number, evenly spaced)."""
        frames = int(self.config.get("num_frames") or 8)
        pixels = self.processor(video, num_frames=frames, do_sample_frames=True, return_tensors="np")
        output = self._run(pixels)[0]
        top_k = min(5 if top_k is None else top_k, output.shape[-1])
        return self._labels(self._scores(output, sigmoid_for_one=False), top_k)

    def _audio_task(self, audio: np.ndarray, top_k: int | None) -> Any:
        extractor = self.processor
        features = extractor(audio, sampling_rate=int(extractor.sampling_rate), return_tensors="np")
        output = self._run(features)[0]
        if self.task == "automatic-speech-recognition":
            return {"text": self.tokenizer.decode(output.argmax(axis=-1), skip_special_tokens=False)}
        top_k = min(5 if top_k is None else top_k, output.shape[-1])
        return self._labels(self._scores(output, sigmoid_for_one=False), top_k)


def pipeline(folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None) -> Any:
    """The pipeline of a folder ``export`` wrote for a single-pass encoder task (:data:`PIPELINE_TASKS`): call it
    on a text, an image or an audio (a path or an array), or a list of them; a folder of
    :data:`OWN_PIPELINES` (or of :data:`SPLIT_PIPELINES`, by its task and split) opens its own class."""
    metadata = _read_json(os.path.join(os.fspath(folder), FOLDER_METADATA))
    task = metadata.get("task")
    path = SPLIT_PIPELINES.get((task, metadata.get("split"))) or OWN_PIPELINES.get(task, (None, None))[1]
    if path is not None:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)(folder, providers, threads)
    return Pipeline(folder, providers, threads)
