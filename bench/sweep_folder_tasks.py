"""The model type x task pairs of the tasks page, from a tiny folder to ``run``, against transformers' pipeline.

For each pair of the tasks page (:func:`fx2onnx.inputs.tasks.discover_tasks`) whose task a folder exports as one model
(:data:`fx2onnx.runtime.pipelines.PIPELINE_TASKS`: image, audio and video classification, CTC speech recognition,
zero-shot image classification, semantic segmentation, depth estimation, object detection), the tiny model of the
page is saved as a ``save_pretrained`` folder beside a processor made in code (the class transformers' auto
mappings name for the model type, its size set to the tiny model's images; the WordPiece tokenizer of
:mod:`fx2onnx.testing.encoder_folder` for the texts, its CTC tokenizer for the transcriptions), exported as a user
does (``python -m fx2onnx export FOLDER --out OUT``, no flag), then ``fx2onnx.pipeline(OUT)`` and
``transformers.pipeline(task, model=FOLDER)`` run on the same inputs: scores within 1e-4, labels and texts equal,
boxes within a pixel, masks equal on 99 % of the pixels, depth maps within 1e-4 of their range. A speech
encoder-decoder of the tasks page (Whisper, Moonshine, Speech2Text...: its ``speech-seq2seq`` rows) is an
automatic-speech-recognition row:
its folder's generation loop transcribes each sound greedily (:data:`NEW_TOKENS` tokens) against the pipeline's
greedy ``generate``, texts equal. The tasks of inputs, options or outputs of their own (zero-shot object detection,
mask generation, keypoint matching, zero-shot text and audio classification, text to audio, document and table question
answering) take their folders and calls from ``bench/folder_pipeline_tasks.py``. A row says the step
reached (``folder``, ``export``, ``run``, ``compare``) and the one-line reason of a failure.

The rows run with :func:`fx2onnx.runner.run_tasks` (one worker, one process per row, a timeout per row), the tasks
interleaved so that a sweep cut short covers each task::

    nice -n 10 python bench/sweep_folder_tasks.py --json _doc/bench/folder_tasks.json --resume

The JSON keeps the date, the machine, the versions and the command beside the rows; the tasks page renders it
(never computed while the site builds).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import itertools
import json
import math
import os
import shutil
import sys
import tempfile
import time

import folder_pipeline_tasks as extra

#: the task of the tasks page -> the pipeline task of its folder
FOLDER_TASKS = {"image-classification": "image-classification", "object-detection": "object-detection",
                "audio-classification": "audio-classification", "ctc": "automatic-speech-recognition",
                "zero-shot-image-classification": "zero-shot-image-classification",
                "semantic-segmentation": "image-segmentation", "depth-estimation": "depth-estimation",
                "universal-segmentation": "image-segmentation", "instance-segmentation": "image-segmentation",
                "video-classification": "video-classification"}
#: the text tasks, swept over every model type of transformers' auto mapping of each (no tasks page row)
TEXT_MAPPINGS = {"fill-mask": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
                 "text-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
                 "token-classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
                 "feature-extraction": "MODEL_MAPPING_NAMES",
                 # the sequence classifiers with an NLI label configuration (contradiction, neutral, entailment)
                 "zero-shot-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"}
#: the text encoders of transformers' feature-extraction (T5's encoder), preferred to the base model of a model type
TEXT_ENCODING_MAPPING = "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES"
#: the image embedders, swept over every model type of transformers' image base models (AutoModel of an image)
IMAGE_MAPPINGS = {"image-feature-extraction": "MODEL_FOR_IMAGE_MAPPING_NAMES"}
#: the tasks swept over an auto mapping rather than the tasks page's rows
MAPPED_TASKS = {**TEXT_MAPPINGS, **IMAGE_MAPPINGS, **extra.MAPPINGS, **dict.fromkeys(extra.FIXED_PAIRS, "")}
FOLDER_TASKS.update({task: task for task in (*MAPPED_TASKS, *extra.PAGE_TASKS)})
#: a speech encoder-decoder (Whisper, Moonshine, Speech2Text...) transcribes through its generation loop: transformers'
#: automatic-speech-recognition pipeline runs it as it runs a CTC model
FOLDER_TASKS["speech-seq2seq"] = "automatic-speech-recognition"
#: the tokens a speech encoder-decoder generates for each sound (the folder's loop and the pipeline's generate)
NEW_TOKENS = 8
#: optimum's tasks counted for each pipeline task (its semantic segmentation is transformers' image-segmentation)
OPTIMUM_TASKS = {"image-segmentation": ("image-segmentation", "semantic-segmentation")}
LABELS = ["cat", "dog", "the sea"]
#: the model type whose processor class a model type without one in transformers' auto mappings uses (the class its
#: published checkpoints name: D-FINE and RT-DETRv2 RT-DETR's, DAB-DETR Conditional DETR's...)
PROCESSOR_OF = {"dinov2_with_registers": "dinov2", "rt_detr_v2": "rt_detr", "d_fine": "rt_detr", "deimv2": "rt_detr",
                "dab-detr": "conditional_detr", "hgnet_v2": "resnet", "videomt": "eomt", "videoprism": "siglip",
                "videoprism_vision_model": "vivit", "dinov3_convnext": "dinov3_vit"}


def _imagegpt_processor(config) -> dict:
    """ImageGPT's color clusters (one per token but its start of sequence, in [-1, 1] as its checkpoints' own) and
    images of a token per pixel within its positions."""
    import numpy as np

    side = math.isqrt(config.n_positions - 1)
    clusters = np.random.default_rng(0).uniform(-1.0, 1.0, (config.vocab_size - 1, 3)).round(4)
    return {"clusters": clusters.tolist(), "size": {"height": side, "width": side}}


def _swin_segmenter_processor(config) -> dict:
    """Images whose last Swin stage (1/32 of the image) is larger than its window, as a checkpoint's (384 pixels and
    more, windows of 7 or 12): a stage no larger takes no shifted windows, a branch frozen at export."""
    window = config.backbone_config.window_size
    return {"size": {"shortest_edge": 32 * (window + 1), "longest_edge": 64 * (window + 1)}}


def _square_processor(config) -> dict:
    """Square images of the tiny size, as the checkpoints of a windowed ViT detector resize them (RF-DETR, LW-DETR:
    their default processor keeps the aspect ratio, and the windows do not split the sizes it gives: eager fails)."""
    side = _image_size(config)
    return {"size": {"height": side, "width": side}}


def _timm_processor(config) -> dict:
    """timm's data configuration (``pretrained_cfg``, which ``config.json`` of a timm checkpoint holds, see
    :func:`checkpoint_fields`): the processor's only argument."""
    return {"pretrained_cfg": config.pretrained_cfg}


#: the arguments a model type's processor made in code takes from the tiny configuration
PROCESSOR_ARGUMENTS = {"imagegpt": _imagegpt_processor, "maskformer": _swin_segmenter_processor,
                       "mask2former": _swin_segmenter_processor, "rf_detr": _square_processor,
                       "lw_detr": _square_processor, "timm_wrapper": _timm_processor}
#: the sizes a model type's tiny configuration needs beside the tasks page's (LiLT's layout embeddings split its width
#: shrunk by 4 in six: a width of 64 fails in eager)
SIZES = {"lilt": {"hidden_size": 96, "intermediate_size": 96},
         # Whisper's feature extractor pads every sound to 3000 frames: its encoder's 1500 positions
         "whisper": {"max_source_positions": 1500}}
#: the feature extractor of a model type whose checkpoints name another than transformers' auto mapping
#: (Wav2Vec2-BERT's read SeamlessM4T's log-mel features, the mapping names Wav2Vec2's raw samples)
#: (Moonshine Streaming's forward reads raw samples, input_values, as Moonshine's, whose mapping names Wav2Vec2's)
FEATURE_EXTRACTOR_OF = {"wav2vec2-bert": "SeamlessM4TFeatureExtractor",
                        "moonshine_streaming": "Wav2Vec2FeatureExtractor"}
#: the feature extractor's arguments of a model type beside its sizes (Moonshine Streaming's encoder applies its sliding
#: windows only with a mask, which transformers' pipeline always asks for: the folder's extractor gives one too)
EXTRACTOR_ARGUMENTS = {"moonshine_streaming": {"return_attention_mask": True}}
#: the sentences of the text tasks (fill-mask: one mask each)
SENTENCES = ["the cat sat on the mat", "paris is the capital of france, a city by the sea"]
MASKED = ["the cat sat on the [MASK] .", "paris is the [MASK] of france"]


def _error(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:240]


def _one_line(text: str, limit: int = 240) -> str:
    """The ``error:`` line of what export printed, else a line saying what failed, else the last one."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    failed = [x for x in lines if "FAIL" in x or "max abs diff" in x and "OK" not in x]
    return next((x for x in lines if x.startswith("error:")), failed[0] if failed else lines[-1] if lines else "")[
        :limit]


def _image_size(config) -> int:
    for c in (config, getattr(config, "vision_config", None), getattr(config, "backbone_config", None)):
        size = getattr(c, "image_size", None) if c is not None else None
        if size:
            return int(size[0] if isinstance(size, (list, tuple)) else size)
    return 32


def _as_dict(size) -> dict:
    """A processor's size (a dict, transformers' SizeDict, an int) as a dict of its edges."""
    if isinstance(size, dict):
        return size
    return {k: getattr(size, k, None) for k in ("height", "width", "shortest_edge", "longest_edge")} if size else {}


def _sized(cls, side: int, **arguments):
    """The processor ``cls`` with its sizes set to ``side`` pixels, the kind of its sizes kept (and ``arguments``)."""
    default, sizes = cls(**arguments), {}
    size = _as_dict(getattr(default, "size", None))
    if size:
        if size.get("height") or size.get("width"):
            sizes["size"] = {"height": side, "width": side}
        elif size.get("shortest_edge"):
            sizes["size"] = {"shortest_edge": side, **({"longest_edge": 2 * side} if size.get("longest_edge") else {})}
        elif size.get("longest_edge"):
            sizes["size"] = {"longest_edge": side}
    if _as_dict(getattr(default, "crop_size", None)).get("height"):
        sizes["crop_size"] = {"height": side, "width": side}
    return cls(**{**sizes, **arguments})


def checkpoint_fields(config, task: str) -> None:
    """Sets on the tiny ``config`` what ``config.json`` of a published checkpoint of its model type holds and a
    default configuration leaves out: a text encoder-decoder's decoder start token (T5's classifier shifts the ids
    right from it; its checkpoints start from the pad token), timm's data configuration (``pretrained_cfg``: the
    image size of the tiny model, ImageNet's mean and deviation, the folder's image processor reads it)."""
    if task in TEXT_MAPPINGS and getattr(config, "is_encoder_decoder", False) and \
            getattr(config, "decoder_start_token_id", None) is None:
        config.decoder_start_token_id = config.pad_token_id
    if config.model_type == "timm_wrapper" and not getattr(config, "pretrained_cfg", None):
        side = _image_size(config)
        config.pretrained_cfg = {"input_size": [3, side, side], "interpolation": "bilinear", "crop_pct": 1.0,
                                 "crop_mode": "center", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def _auto_class(mapping: dict, model_type: str):
    import transformers

    # a tower of a two-tower model (siglip_vision_model) takes the processor of its model (siglip)
    names = mapping.get(model_type) or mapping.get(PROCESSOR_OF.get(model_type, "")) or mapping.get(
        model_type.removesuffix("_vision_model"))
    if isinstance(names, dict):
        names = [names.get("torchvision"), names.get("pil")]
    elif isinstance(names, str):
        names = [names]
    for name in names or []:
        if name and hasattr(transformers, name):
            return getattr(transformers, name)
    return None


def table_tokenizer(folder: str) -> None:
    """Saves in ``folder`` TAPAS' tokenizer over the vocabulary of the sweep's WordPiece tokenizer: a text alone is a
    question about an empty table, its token types the columns TAPAS reads (``(batch, sequence, 7)``)."""
    import transformers

    from fx2onnx.testing.encoder_folder import bert_tokenizer

    os.makedirs(folder, exist_ok=True)
    vocabulary = os.path.join(folder, "vocab.txt")
    with open(vocabulary, "w", encoding="utf-8") as f:
        f.writelines(f"{token}\n" for token, _ in sorted(bert_tokenizer().get_vocab().items(), key=lambda x: x[1]))
    transformers.TapasTokenizer(vocabulary).save_pretrained(folder)


def write_processor(config, task: str, folder: str, model=None, ctc: bool = True) -> None:
    """Saves in ``folder`` the processor a pipeline of ``task`` reads for ``config``'s model type (a text task: the
    WordPiece tokenizer giving the inputs ``model`` takes; ``ctc``: a speech recognizer's CTC tokenizer)."""
    import inspect

    from transformers.models.auto import feature_extraction_auto, image_processing_auto, video_processing_auto

    from fx2onnx.testing.encoder_folder import bert_tokenizer, ctc_processor

    model_type = config.model_type
    if task in TEXT_MAPPINGS and isinstance(getattr(config, "type_vocab_sizes", None), (list, tuple)):
        table_tokenizer(folder)  # TAPAS: token types of several columns (segment, column, row, ranks...)
        return
    if task in TEXT_MAPPINGS:
        accepted = inspect.signature(model.forward).parameters
        # a model of one token type (GTE, MRA, Jina v3) reads no type ids: its checkpoints' tokenizer gives none (the
        # pairs of zero-shot-classification would index a second type)
        if getattr(config, "type_vocab_size", 2) == 1:
            accepted = [n for n in accepted if n != "token_type_ids"]
        bert_tokenizer(tuple(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in accepted)
                       ).save_pretrained(folder)
        return
    if task in ("automatic-speech-recognition", "audio-classification"):
        cls = _auto_class({**feature_extraction_auto.FEATURE_EXTRACTOR_MAPPING_NAMES, **FEATURE_EXTRACTOR_OF},
                          model_type)
        if cls is None:
            raise ValueError(f"no feature extractor class for model type {model_type!r}")
        accepted = inspect.signature(cls.__init__).parameters  # the tiny model's sizes where both name them
        sizes = {}
        for c in [config] + [getattr(config, k) for k in getattr(type(config), "sub_configs", None) or {}
                             if getattr(config, k, None) is not None]:  # Parakeet's encoder_config...
            sizes.update({k: getattr(c, k) for k in ("num_mel_bins", "max_length", "feature_size")
                          if k not in sizes and isinstance(getattr(c, k, None), int)})
        if "num_mel_bins" not in accepted and "num_mel_bins" in sizes:  # the extractor's name of the mel bins
            sizes["feature_size"] = sizes.pop("num_mel_bins")
        cls(**{k: v for k, v in sizes.items() if k in accepted}, **EXTRACTOR_ARGUMENTS.get(model_type, {})
            ).save_pretrained(folder)
        if task == "automatic-speech-recognition" and ctc:
            ctc_processor(folder).tokenizer.save_pretrained(folder)
        return
    if task == "video-classification":
        cls = _auto_class(video_processing_auto.VIDEO_PROCESSOR_MAPPING_NAMES, model_type)
        if cls is None:
            raise ValueError(f"no video processor class for model type {model_type!r}")
    else:
        cls = _auto_class(image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES, model_type)
        if cls is None:
            raise ValueError(f"no image processor class for model type {model_type!r}")
    arguments = PROCESSOR_ARGUMENTS.get(model_type, lambda _: {})(config)
    _sized(cls, _image_size(config), **arguments).save_pretrained(folder)
    if task == "zero-shot-image-classification":
        text = getattr(config, "text_config", config)
        tokenizer = bert_tokenizer(("input_ids",) if "siglip" in model_type else ("input_ids", "attention_mask"))
        if getattr(text, "vocab_size", 0) < len(tokenizer):
            raise ValueError(f"the tiny text vocabulary ({text.vocab_size}) is smaller than the sweep's tokenizer "
                             f"({len(tokenizer)})")
        tokenizer.save_pretrained(folder)


def _image_scale(folder: str) -> int:
    """How many times the sweep's images are enlarged for the processor of ``folder``: a processor rounding sizes
    down to a multiple (GLPN's ``size_divisor``) gets images of at least two multiples on their shorter side."""
    path = os.path.join(folder, "preprocessor_config.json")
    if not os.path.exists(path):
        return 1
    with open(path, encoding="utf-8") as f:
        divisor = json.load(f).get("size_divisor") or 0
    return max(1, -(-2 * int(divisor) // 30))


def write_speech_seq2seq_folder(model, config, folder: str) -> None:
    """Saves a speech encoder-decoder's folder: Whisper's as :func:`fx2onnx.testing.speech_folder.write_whisper_folder`
    writes it (its tokenizer of special tokens, its generation config), another's weights with its feature extractor, a
    byte-level BPE tokenizer (:func:`fx2onnx.testing.tokenizer.tiny_tokenizer`) and a decoder start token where its
    configuration names none (as the generate column of the tasks page)."""
    from fx2onnx.deploy.speech_generic import start_token
    from fx2onnx.testing.speech_folder import write_whisper_folder
    from fx2onnx.testing.tokenizer import tiny_tokenizer
    from fx2onnx.zoo.task_generate import _zoo_start_token

    if config.model_type == "whisper":
        write_whisper_folder(config, folder, dtype="float32")
        return
    _zoo_start_token(model, config)
    model.save_pretrained(folder)
    encoder = getattr(config, "encoder", None)  # a SpeechEncoderDecoderModel: its encoder's feature extractor
    write_processor(encoder if hasattr(encoder, "model_type") else config, "automatic-speech-recognition", folder,
                    model, ctc=False)
    decoder = getattr(config, "decoder", None) or getattr(config, "text_config", None) or config
    tokenizer = tiny_tokenizer(max(128, min(int(getattr(decoder, "vocab_size", 384) or 384), 384)))
    start = start_token(model, config)
    if isinstance(start, int) and start < len(tokenizer) and start not in tokenizer.all_special_ids:
        # a checkpoint's decoder start token is a special token: the pipeline decodes it with the generated ones
        tokenizer.add_special_tokens({"additional_special_tokens": [tokenizer.convert_ids_to_tokens(start)]})
    tokenizer.save_pretrained(folder)


def transcribe(folder: str, sounds: list) -> list[dict]:
    """The texts of a speech encoder-decoder's exported folder (its generation loop, greedy, :data:`NEW_TOKENS`
    tokens), as transformers' automatic-speech-recognition pipeline returns them."""
    from fx2onnx.runtime.families import open_generator

    generator = open_generator(folder)
    if not hasattr(generator, "transcribe"):  # VibeVoice-ASR, Voxtral: audio placeholders in a chat prompt
        raise ValueError(f"{type(generator).__name__} generates from a prompt of audio placeholders (python -m fx2onnx "
                         "generate), it has no transcription of a sound alone as the pipeline's")
    return [{"text": generator.transcribe(sound, max_new_tokens=NEW_TOKENS).text} for sound in sounds]


def _inputs(task: str, scale: int = 1):
    import numpy as np

    if task in TEXT_MAPPINGS:
        return list(MASKED if task == "fill-mask" else SENTENCES)

    rng = np.random.default_rng(0)
    if task in ("automatic-speech-recognition", "audio-classification"):
        return [rng.standard_normal(n).astype(np.float32) for n in (8000, 11200)]
    if task == "video-classification":
        return [rng.integers(0, 256, (16, 40, 48, 3), dtype=np.uint8)]
    import PIL.Image

    return [PIL.Image.fromarray(rng.integers(0, 256, (h * scale, w * scale, 3), dtype=np.uint8))
            for h, w in ((30, 44), (40, 38))]


def difference(got, expected, task: str, path: str = "result") -> str | None:
    """None when ``got`` is what the pipeline returned (see the module), else where it differs."""
    import numpy as np

    if hasattr(expected, "size") and hasattr(expected, "mode"):  # a PIL image: a mask or a grey depth
        a, b = np.asarray(got, dtype=int), np.asarray(expected, dtype=int)
        if a.shape != b.shape:
            return f"{path}: shape {a.shape} instead of {b.shape}"
        share = (np.abs(a - b) <= (1 if task == "depth-estimation" else 0)).mean()
        return None if share >= 0.99 else f"{path}: {100 * (1 - share):.1f} % of the pixels differ"
    if hasattr(expected, "numpy") or isinstance(expected, np.ndarray):
        a, b = np.asarray(got), np.asarray(expected)
        if a.shape != b.shape:
            return f"{path}: shape {a.shape} instead of {b.shape}"
        scale = max(float(np.abs(b).max()), 1.0) if b.size else 1.0
        err = float(np.abs(a - b).max()) if b.size else 0.0
        return None if err <= 1e-4 * scale else f"{path}: max abs diff {err:.3g}"
    if isinstance(expected, dict):
        if set(got) != set(expected):
            return f"{path}: keys {sorted(got)} instead of {sorted(expected)}"
        for key in expected:
            found = difference(got[key], expected[key], task, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, (list, tuple)):
        if len(got) != len(expected):
            return f"{path}: {len(got)} items instead of {len(expected)}"
        if expected and all(isinstance(e, dict) and {"label", "score"} <= set(e) for e in list(got) + list(expected)):
            # labels of equal scores (within 1e-4) come in either order
            got, expected = (sorted(x, key=lambda e: (round(float(e["score"] or 0.0), 4), str(e["label"])))
                             for x in (got, expected))
        for i, (g, e) in enumerate(zip(got, expected)):
            found = difference(g, e, task, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(expected, (float, np.floating)):  # a tagger's scores are numpy's float32
        tolerance = 1.0 if path.split(".")[-1] in ("xmin", "ymin", "xmax", "ymax") else 1e-4
        return None if abs(float(got) - expected) <= tolerance else f"{path}: {got} instead of {expected}"
    if isinstance(expected, int) and path.split(".")[-1] in ("xmin", "ymin", "xmax", "ymax"):
        return None if abs(int(got) - expected) <= 1 else f"{path}: {got} instead of {expected}"
    return None if got == expected else f"{path}: {got!r:.60} instead of {expected!r:.60}"


def text_pairs(task: str) -> dict[str, str]:
    """model type -> class of the auto mapping of a task of :data:`MAPPED_TASKS`; feature-extraction: the base
    model of each model type a text task's mapping lists."""
    from transformers.models.auto import modeling_auto

    def classes(mapping: str) -> dict[str, str]:
        return {k: v if isinstance(v, str) else v[0] for k, v in getattr(modeling_auto, mapping).items()}

    if task in extra.MAPPINGS or task in extra.FIXED_PAIRS:
        return extra.mapped_pairs(task)
    if task != "feature-extraction":
        return classes(MAPPED_TASKS[task])
    texts = {k for t in TEXT_MAPPINGS if t != task for k in classes(TEXT_MAPPINGS[t])}
    # transformers' text encoder of a model type where its mapping names one (T5's encoder, not T5Model: the base
    # model of an encoder-decoder wants decoder inputs the pipeline does not give)
    encoders = classes(TEXT_ENCODING_MAPPING)
    return {k: encoders.get(k, v) for k, v in classes(TEXT_MAPPINGS[task]).items() if k in texts}


def architecture(zoo_task: str, name: str):
    """The architecture of a pair: a row of the tasks page, or a model type of a text task's auto mapping."""
    from fx2onnx.inputs.tasks import TaskArchitecture, _skip_reason, get_task_architecture

    if zoo_task not in MAPPED_TASKS:
        return get_task_architecture(zoo_task, name)
    class_name = text_pairs(zoo_task)[name]
    arch = TaskArchitecture(zoo_task, name, class_name, _skip_reason(name, class_name))
    if arch.skip:
        raise ValueError(arch.skip)
    return arch


def task_option(class_name: str, task: str) -> list[str]:
    """``--task TASK`` where the class serves another task first (XLM's masked LM is a causal LM too), as a user
    chooses among its tasks; else nothing."""
    from fx2onnx.deploy.tasks import tasks_of_class

    tasks = tasks_of_class(class_name)
    return ["--task", task] if tasks and tasks[0] != task else []


def run_one(key: str) -> dict:
    """The row of one pair: its tiny folder exported, run, compared with transformers' pipeline."""
    import torch
    import transformers

    import fx2onnx
    from fx2onnx.__main__ import main as cli
    from fx2onnx.inputs.tasks import tiny_task_model

    zoo_task, name = key.split("/", 1)
    task = FOLDER_TASKS[zoo_task]
    row: dict = {"architecture": key, "task": task, "step": "folder"}
    begin = time.perf_counter()
    work = tempfile.mkdtemp(prefix="fx2onnx-folder-tasks-")
    try:
        arch = architecture(zoo_task, name)
        row["model"] = arch.model_class_name
        # a text model pads with the tokenizer's [PAD] (id 0): a decoder's classifier finds its last token so; its
        # end of text is the tokenizer's [SEP] (id 3), once per text: BART's family classifies from that token
        checkpoint, out = os.path.join(work, "checkpoint"), os.path.join(work, "exported")
        transformers.utils.logging.disable_progress_bar()
        if task in extra.TASKS and task not in TEXT_MAPPINGS:
            extra.write_folder(task, arch, checkpoint, SIZES.get(name, {}))
            model = config = None
        else:
            labels = {"id2label": extra.NLI_LABELS, "label2id": {v: k for k, v in extra.NLI_LABELS.items()}} \
                if task == "zero-shot-classification" else {}
            model, config = tiny_task_model(arch, **({"pad_token_id": 0, "eos_token_id": 3} if task in TEXT_MAPPINGS
                                                     else {}), **labels, **SIZES.get(name, {}))
            config.architectures = [arch.model_class_name]
            checkpoint_fields(config, task)
            if getattr(config, "id2label", None) is None and getattr(config, "num_labels", None):  # as a checkpoint
                config.id2label = {i: f"LABEL_{i}" for i in range(config.num_labels)}  # has (PVT's leaves them None)
        if model is None:
            pass
        elif zoo_task == "speech-seq2seq":
            write_speech_seq2seq_folder(model, config, checkpoint)
        else:
            model.save_pretrained(checkpoint)
            write_processor(config, task, checkpoint, model)
        row["step"] = "export"
        stdout, stderr = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                chosen = zoo_task if zoo_task == "speech-seq2seq" else task  # the folder's task: the generator's
                code = cli(["export", checkpoint, "--out", out, *task_option(arch.model_class_name, chosen)])
            except SystemExit as e:
                code = e.code
        row["export_seconds"] = round(time.perf_counter() - t0, 1)
        if code != 0:
            row["error"] = _one_line(stdout.getvalue() + "\n" + stderr.getvalue())
            return row
        row["step"] = "run"
        inputs = _inputs(task, _image_scale(checkpoint))
        options = {"candidate_labels": LABELS} if task == "zero-shot-image-classification" else \
            {"threshold": 0.0} if task == "object-detection" else {}
        if zoo_task == "speech-seq2seq":  # the folder's loop is greedy: so is the pipeline's generate (its default is
            # a beam search of 5), as many new tokens
            options = {"generate_kwargs": {"max_new_tokens": NEW_TOKENS, "do_sample": False, "num_beams": 1}}
            got = transcribe(out, inputs)
        elif task in extra.TASKS:
            got = extra.call(task, fx2onnx.pipeline(out), reference=False)
        else:
            got = fx2onnx.pipeline(out)(inputs, **options)
        row["step"] = "compare"
        try:
            # feature-extraction: the folder's own class (AutoModel would load T5Model from T5's encoder)
            reference = transformers.pipeline(task, model=getattr(transformers, arch.model_class_name).from_pretrained(
                checkpoint, dtype=torch.float32), tokenizer=checkpoint) if task == "feature-extraction" else \
                transformers.pipeline(task, model=checkpoint, dtype=torch.float32,
                                      **extra.reference_options(checkpoint))  # a SpeechT5 folder's vocoder
            expected = extra.call(task, reference, reference=True) if task in extra.TASKS else \
                reference(inputs, **options)
            if zoo_task == "speech-seq2seq":  # the texts (Cohere ASR's pipeline gives each sound's chunk index too)
                expected = [{"text": e["text"]} for e in expected]
        except Exception as e:  # noqa: BLE001 - transformers' own pipeline fails: the reference is missing
            row["error"] = f"transformers' pipeline fails: {_error(e)}"
            return row
        found = difference(got, expected, task)
        row["equal"] = found is None
        if found:
            row["error"] = f"differs from transformers' pipeline at {found}"
    except Exception as e:  # noqa: BLE001 - a row per pair
        row["error"] = _error(e)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        row["seconds"] = round(time.perf_counter() - begin, 1)
    return row


def failed_row(key: str, step: str, error: str, elapsed: float) -> dict:
    """The row of a pair whose process timed out or crashed."""
    zoo_task = key.split("/", 1)[0]
    return {"architecture": key, "task": FOLDER_TASKS[zoo_task], "step": step, "error": f"{step}: {error}"[:240],
            "seconds": round(elapsed, 1)}


def summary(rows: list[dict]) -> dict:
    """Per pipeline task: pairs run, folders exported, folders equal to the pipeline."""
    table: dict = {}
    for r in rows:
        entry = table.setdefault(r["task"], {"run": 0, "exported": 0, "equal": 0})
        entry["run"] += 1
        entry["exported"] += r.get("step") in ("run", "compare")
        entry["equal"] += bool(r.get("equal"))
    return dict(sorted(table.items()))



def pairs(only: set[str] | None = None, first: dict[str, list[str]] | None = None) -> list[str]:
    """The pairs of the tasks page a folder exports and of the text tasks' auto mappings, the tasks interleaved
    (one of each in turn); ``first``: pipeline task -> model types run before the others (optimum's)."""
    from fx2onnx.inputs.tasks import discover_tasks

    by_task: dict[str, list[str]] = {}
    found = [(arch.task, arch.name) for arch in discover_tasks() if arch.task in FOLDER_TASKS and not arch.skip]
    found += [(task, name) for task in MAPPED_TASKS for name in text_pairs(task)]
    for task, name in found:
        key = f"{task}/{name}"
        if not only or key in only or name in only or task in only:
            by_task.setdefault(task, []).append(key)

    def order(key: str) -> tuple[bool, str]:
        task, name = key.split("/", 1)
        return name.replace("_", "-") not in set((first or {}).get(FOLDER_TASKS[task], ())), key

    columns = [sorted(keys, key=order) for _, keys in sorted(by_task.items())]
    return [k for group in itertools.zip_longest(*columns) for k in group if k]


def optimum_counts(stored: dict | None = None) -> dict:
    """What optimum's ONNX exporter registers (its TasksManager, in its own environment) per pipeline task of the
    sweep: ``{"version", "model_types": {task: [...]}, "counts": {task: n}}``; ``stored`` when its environment does
    not install here."""
    from fx2onnx.testing.optimum_env import OPTIMUM_PINS, optimum_registered

    try:
        registered = optimum_registered()
    except (RuntimeError, OSError, ValueError) as e:
        print(f"optimum's registry not read ({e}): the stored counts kept", file=sys.stderr)
        return stored or {}
    types = {task: sorted({t.replace("_", "-") for o in OPTIMUM_TASKS.get(task, (task,))
                           for t in registered.get(o, [])}) for task in sorted(set(FOLDER_TASKS.values()))}
    # a task optimum names by a wider synonym (mask-generation: feature-extraction): the types of the task's mapping
    types.update({task: found for task in types if (found := extra.optimum_types(task, registered)) is not None})
    return {"version": OPTIMUM_PINS[0], "model_types": types, "counts": {k: len(v) for k, v in types.items()}}


def main(argv=None) -> list[dict]:
    from fx2onnx.runner import run_tasks, sweep_context

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout", type=int, default=180, help="seconds per pair")
    parser.add_argument("--only", default=None, help="comma-separated model types or task/model_type keys")
    parser.add_argument("--limit", type=int, default=None, help="run that many pairs at most (the first ones)")
    parser.add_argument("--json", default=None, help="the rows and their context written there")
    parser.add_argument("--resume", action="store_true", help="keep the rows of an existing --json, run the others")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--redo", default=None, help="with --resume: run again the kept rows of these comma-separated "
                        "task/ prefixes or keys")
    parser.add_argument("--redo-failed", action="store_true", help="with --resume: run again the kept rows not equal")
    args = parser.parse_args(argv)
    previous: list[dict] = []
    stored: dict = {}
    if args.json and os.path.exists(args.json):
        with open(args.json, encoding="utf-8") as f:
            stored = json.load(f)
        previous = stored["rows"] if args.resume else []
    optimum = optimum_counts(stored.get("optimum"))
    every = pairs(None, optimum.get("model_types"))  # the document counts every pair, --only runs some
    keys = pairs(set(args.only.split(",")) if args.only else None, optimum.get("model_types"))
    redo = tuple(args.redo.split(",")) if args.redo else ()
    kept = {r["architecture"]: r for r in previous if not any(  # a key, or a task's rows ("fill-mask/")
        r["architecture"] == k or k.endswith("/") and r["architecture"].startswith(k) for k in redo)
            and not (args.redo_failed and not r.get("equal"))}
    keys = [k for k in keys if k not in kept][: args.limit]

    def save(rows: list[dict]) -> None:
        if not args.json:
            return
        merged = dict(kept)
        merged.update({r["architecture"]: r for r in rows})
        ordered = sorted(merged.values(), key=lambda r: (r["task"], r["architecture"]))
        document = {
            **sweep_context("nice -n 10 python bench/sweep_folder_tasks.py " + " ".join(
                argv if argv is not None else sys.argv[1:])),
            "pairs": dict(sorted(collections.Counter(FOLDER_TASKS[k.split("/", 1)[0]] for k in every).items())),
            "not_run": sorted(k for k in every if k not in merged),
            "summary": summary(ordered), "optimum": optimum, "tasks_of": FOLDER_TASKS, "rows": ordered,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=1)
            f.write("\n")

    done: list[dict] = []

    def on_row(row: dict) -> None:
        done.append(row)
        print(json.dumps(row), flush=True)
        save(done)

    rows = run_tasks(keys, run_one, failed_row, workers=args.workers, timeout=args.timeout, on_row=on_row,
                     description="folder tasks", memory_gb=6)
    save(rows)
    print(json.dumps(summary(rows)))
    return rows


if __name__ == "__main__":
    main()
