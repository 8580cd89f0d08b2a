"""The pipeline tasks of ``bench/sweep_folder_tasks.py`` whose inputs, options or outputs are their own: zero-shot
object detection, mask generation, keypoint matching, zero-shot text and audio classification, text to audio,
document and table question answering.

For each, the model types of transformers' auto mapping of the task (zero-shot-classification: the sequence
classifiers, with an NLI label configuration; zero-shot-audio-classification: :data:`FIXED_PAIRS`, no mapping names
it), a folder made in code (the tested folders of :mod:`fx2onnx.testing.pipeline_folders` where the model type has one,
else the tiny model of the tasks page with the processor its auto mappings name and the WordPiece tokenizer), and the
call of a pipeline (:func:`call`) made alike on ``fx2onnx.pipeline(OUT)`` and ``transformers.pipeline(task,
model=FOLDER)``, its results in a form :func:`sweep_folder_tasks.difference` compares (masks as images: equal on 99 %
of the pixels).
"""

from __future__ import annotations

import os
from typing import Any, Callable

#: pipeline task -> transformers' auto mapping of its model types (a task of the tasks page: its rows instead)
MAPPINGS = {"zero-shot-object-detection": "MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES",
            "mask-generation": "MODEL_FOR_MASK_GENERATION_MAPPING_NAMES",
            "keypoint-matching": "MODEL_FOR_KEYPOINT_MATCHING_MAPPING_NAMES",
            "table-question-answering": "MODEL_FOR_TABLE_QUESTION_ANSWERING_MAPPING_NAMES"}
#: the tasks no auto mapping names: model type -> class (a text and an audio tower)
FIXED_PAIRS = {"zero-shot-audio-classification": {"clap": "ClapModel"}}
#: the tasks of the tasks page's rows (its text-to-audio: the waveform and spectrogram mappings)
PAGE_TASKS = ("text-to-audio", "document-question-answering")
#: every task of this module
TASKS = (*MAPPINGS, *FIXED_PAIRS, *PAGE_TASKS, "zero-shot-classification")
#: the labels of a zero-shot text classifier (an NLI model's)
NLI_LABELS = {0: "contradiction", 1: "neutral", 2: "entailment"}
#: optimum's task a pipeline task is its synonym of (its TasksManager's ``_SYNONYM_TASK_MAP``; document question
#: answering: LayoutLMv3's question answerer is registered as question-answering) -> transformers' mapping of the
#: model types counted (the synonym's task is wider)
OPTIMUM_SYNONYMS = {"mask-generation": ("feature-extraction", "MODEL_FOR_MASK_GENERATION_MAPPING_NAMES"),
                    "zero-shot-classification": ("text-classification",
                                                 "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
                    "document-question-answering": ("question-answering",
                                                    "MODEL_FOR_DOCUMENT_QUESTION_ANSWERING_MAPPING_NAMES")}

LABELS = ["cat", "dog", "the sea"]
TEXTS = ["the cat sat on the mat", "paris is the capital of france, a city by the sea"]
WORDS = [("paris", [10, 10, 100, 40]), ("is", [110, 10, 150, 40]), ("the", [160, 10, 220, 40]),
         ("capital", [230, 10, 400, 40]), ("of", [10, 60, 50, 90]), ("france", [60, 60, 200, 90]),
         ("a", [210, 60, 230, 90]), ("city", [240, 60, 330, 90]), ("by", [10, 110, 60, 140]),
         ("the", [70, 110, 130, 140]), ("sea", [140, 110, 220, 140])]
QUESTIONS = ["what is the capital of france?", "which city is by the sea?"]
TABLE = {"city": ["paris", "london", "rome", "nice"], "people": ["2", "9", "3", "4"], "sea": ["no", "no", "no", "yes"]}
TABLE_QUESTIONS = ["how many people in paris?", "which city is by the sea?", "what is the sum of people?"]
#: a grid of 8x8 points in batches of 24, every mask kept before the suppression
MASK_OPTIONS = dict(points_per_crop=8, points_per_batch=24, pred_iou_thresh=0.0, stability_score_thresh=0.0)


def _owlvit(folder: str) -> str:
    from fx2onnx.testing.encoder_folder import write_encoder_folder

    return write_encoder_folder("OwlViTForObjectDetection", folder)


def _clap(folder: str) -> str:
    from fx2onnx.testing.encoder_folder import write_encoder_folder

    return write_encoder_folder("ClapModel", folder)


def _musicgen(folder: str) -> str:
    from fx2onnx.testing.pipeline_folders import write_musicgen_folder

    # greedy search on both sides: the folder's loop is greedy, the pipeline follows the generation config
    return write_musicgen_folder(folder, do_sample=False)


def _writers() -> dict[tuple[str, str], Callable[[str], Any]]:
    from fx2onnx.testing import pipeline_folders as p
    from fx2onnx.testing.speecht5_folder import write_speecht5_folder

    return {("zero-shot-object-detection", "owlv2"): p.write_owlv2_folder,
            ("text-to-audio", "speecht5"): write_speecht5_folder,
            ("zero-shot-object-detection", "owlvit"): _owlvit, ("mask-generation", "sam"): p.write_sam_folder,
            ("text-to-audio", "vits"): p.write_vits_folder, ("table-question-answering", "tapas"): p.write_tapas_folder,
            ("text-to-audio", "musicgen"): _musicgen,
            ("document-question-answering", "layoutlm"): p.write_layoutlm_folder,
            ("document-question-answering", "layoutlmv3"): p.write_layoutlmv3_folder,
            ("keypoint-matching", "efficientloftr"): p.write_efficientloftr_folder,
            ("zero-shot-audio-classification", "clap"): _clap}


def mapped_pairs(task: str) -> dict[str, str]:
    """model type -> model class of a task of :data:`MAPPINGS` or :data:`FIXED_PAIRS`."""
    from transformers.models.auto import modeling_auto

    if task in FIXED_PAIRS:
        return dict(FIXED_PAIRS[task])
    return {k: v if isinstance(v, str) else v[0] for k, v in getattr(modeling_auto, MAPPINGS[task]).items()}


def write_folder(task: str, arch: Any, folder: str, sizes: dict[str, Any]) -> None:
    """Saves the folder of a pair of :data:`TASKS` but zero-shot-classification (a text task of the sweep): the tested
    folder of its model type, else the tiny model of ``arch`` with a processor made in code."""
    import inspect

    import transformers

    from fx2onnx.inputs.tasks import tiny_task_model
    from fx2onnx.testing.encoder_folder import bert_tokenizer

    writer = _writers().get((task, arch.name))
    if writer is not None:
        writer(folder)
        return
    model, config = tiny_task_model(arch, **sizes)
    config.architectures = [arch.model_class_name]
    model.save_pretrained(folder)
    if task in ("zero-shot-object-detection", "mask-generation", "keypoint-matching"):
        from transformers.models.auto import image_processing_auto

        import sweep_folder_tasks as sweep

        # a video tracker (sam2_video) takes the image processor of its model (sam2)
        cls = sweep._auto_class(image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES, arch.name) or \
            sweep._auto_class(image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES, arch.name.removesuffix("_video"))
        if cls is None:
            raise ValueError(f"no image processor class for model type {arch.name!r}")
        sweep._sized(cls, sweep._image_size(config)).save_pretrained(folder)
        if task != "zero-shot-object-detection":
            return
    if task == "zero-shot-audio-classification":
        raise ValueError(f"no folder made in code for {arch.model_class_name}")
    accepted = inspect.signature(model.forward).parameters
    tokenizer = bert_tokenizer(tuple(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in accepted))
    text = getattr(config, "text_config", None) or config
    if isinstance(getattr(text, "vocab_size", None), int) and text.vocab_size < len(tokenizer):
        raise ValueError(f"the tiny text vocabulary ({text.vocab_size}) is smaller than the sweep's tokenizer "
                         f"({len(tokenizer)})")
    transformers.utils.logging.disable_progress_bar()
    tokenizer.save_pretrained(folder)


def _images(count: int = 2) -> list[Any]:
    import numpy as np
    import PIL.Image

    rng = np.random.default_rng(0)
    return [PIL.Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in ((30, 44), (40, 38))][
        :count]


def _sounds() -> list[Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    return [rng.standard_normal(n).astype(np.float32) for n in (8000, 11200)]


def _as_mask_images(result: dict[str, Any]) -> dict[str, Any]:
    """A mask generator's result with its masks as images (compared on 99 % of the pixels) and scores as arrays."""
    import numpy as np
    import PIL.Image

    def array(x):
        return np.asarray(x.numpy() if hasattr(x, "numpy") else x)

    masks = [PIL.Image.fromarray(array(m).astype(np.uint8) * 255) for m in result["masks"]]
    return {"masks": masks, "scores": array(result["scores"]).astype(np.float32)}


def reference_options(folder: str) -> dict[str, Any]:
    """The options of transformers' pipeline on ``folder``: a SpeechT5 folder's vocoder (``vocoder/``, the pipeline
    would download microsoft/speecht5_hifigan)."""
    import transformers

    path = os.path.join(folder, "vocoder")
    return {"vocoder": transformers.SpeechT5HifiGan.from_pretrained(path)} if os.path.isdir(path) else {}


def call(task: str, pipe: Any, reference: bool) -> Any:
    """What the pipeline ``pipe`` of ``task`` returns on the sweep's inputs (``reference``: transformers' own, whose
    document question answering takes ``image=None`` beside the words)."""
    if task == "zero-shot-object-detection":
        return [pipe(image, candidate_labels=LABELS, threshold=0.0) for image in _images()]
    if task == "mask-generation":
        return [_as_mask_images(pipe(image, **MASK_OPTIONS)) for image in _images()]
    if task == "keypoint-matching":
        from fx2onnx.testing.pipeline_folders import block_picture_views

        views = block_picture_views(3)
        return [pipe(views[:2], threshold=0.0), pipe(views[1:], threshold=0.0)]
    if task == "zero-shot-classification":
        return pipe(TEXTS, candidate_labels=LABELS)
    if task == "zero-shot-audio-classification":
        return [pipe(sound, candidate_labels=LABELS) for sound in _sounds()]
    if task == "text-to-audio":
        if reference and pipe.model.config.model_type == "speecht5":  # the folder's voice, as the pipeline takes it
            import numpy as np
            import torch

            voice = np.load(os.path.join(pipe.model.name_or_path, "speaker_embeddings.npy"))
            return [pipe(text, forward_params={"speaker_embeddings": torch.tensor(voice)[None]}) for text in TEXTS]
        return [pipe(text) for text in TEXTS]
    if task == "document-question-answering":
        image = {"image": None} if reference else {}
        return [pipe(question=q, word_boxes=WORDS, top_k=2, **image) for q in QUESTIONS]
    if task == "table-question-answering":
        return pipe(table=TABLE, query=TABLE_QUESTIONS)
    raise ValueError(f"no inputs for task {task!r}")


def optimum_types(task: str, registered: dict[str, list[str]]) -> list[str] | None:
    """The model types optimum registers for a pipeline task of :data:`OPTIMUM_SYNONYMS` (its wider task's, within
    transformers' mapping of the task), ``-`` for ``_``; None for another task."""
    if task not in OPTIMUM_SYNONYMS:
        return None
    from transformers.models.auto import modeling_auto

    theirs, mapping = OPTIMUM_SYNONYMS[task]
    mine = {k.replace("_", "-") for k in getattr(modeling_auto, mapping)}
    return sorted({t.replace("_", "-") for t in registered.get(theirs, [])} & mine)

