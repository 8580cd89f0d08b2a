"""The task of a checkpoint folder, read from transformers' auto mappings.

A ``save_pretrained`` folder names its class in ``config.json`` (``architectures``).
The task is the auto mapping listing that class: ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``
gives ``text-generation``, the mappings of :data:`fx2onnx.inputs.tasks.TASKS` give theirs
(``image-text-to-text``, ``speech-seq2seq``...), any other ``MODEL_FOR_<X>_MAPPING_NAMES``
gives ``x`` in lower case with dashes. No list of architectures is kept here.

.. code-block:: python

    from fx2onnx.deploy.tasks import tasks_of_class
    print(tasks_of_class("Qwen3ForCausalLM"))  # ['text-generation']
"""

from __future__ import annotations

import functools
from typing import Any

from ..inputs.tasks import TASKS
from ..runtime.pipelines import OWN_PIPELINES, PIPELINE_TASKS
from ..runtime.seq2seq import TEXT2TEXT_TASKS

#: the tasks ``python -m fx2onnx export FOLDER`` exports today (the generation tasks, then the single-pass encoders
#: of :data:`fx2onnx.runtime.pipelines.PIPELINE_TASKS`)
EXPORTABLE_TASKS = ("text-generation", "speech-seq2seq", "image-text-to-text", *TEXT2TEXT_TASKS, *PIPELINE_TASKS,
                    *OWN_PIPELINES)
#: the auto mappings of the tasks named otherwise than their mapping: transformers' pipeline task names
_NAMED_MAPPINGS = {
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": "text-generation",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": "text2text-generation",
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": "text-classification",
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": "token-classification",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": "fill-mask",
    "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES": "feature-extraction",
    "MODEL_FOR_IMAGE_MAPPING_NAMES": "image-feature-extraction",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES": "image-classification",
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES": "audio-classification",
    "MODEL_FOR_CTC_MAPPING_NAMES": "automatic-speech-recognition",
    "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES": "image-segmentation",
    # MaskFormer's instance segmenter: class and mask logits per query, transformers' image-segmentation pipeline
    "MODEL_FOR_INSTANCE_SEGMENTATION_MAPPING_NAMES": "universal-segmentation",
}

#: the tasks a model of another task's mapping serves: a natural language inference classifier scores candidate labels
_SERVED_BY = {"zero-shot-classification": "text-classification"}
#: the base models (AutoModel), read after every other mapping: transformers' feature-extraction pipeline runs them
_BASE_MAPPING = "MODEL_MAPPING_NAMES"


@functools.cache
def _class_tasks() -> dict[str, tuple[str, ...]]:
    """class name -> the tasks whose auto mapping lists it (the first one is the preferred task)."""
    from transformers.models.auto import modeling_auto

    # the tasks of multimodal and media models first: a class listed as a causal LM too (Gemma 3's
    # conditional generation...) takes images or audio
    names = {m: task for task, mappings in TASKS.items() for m in mappings}
    names.update(_NAMED_MAPPINGS)
    result: dict[str, list[str]] = {}
    ordered = list(names) + sorted(a for a in dir(modeling_auto) if a.endswith("_MAPPING_NAMES") and a not in names)
    for attr in ordered:
        if not attr.startswith("MODEL_FOR_") and attr != _BASE_MAPPING:
            continue
        task = names.get(attr) or ("feature-extraction" if attr == _BASE_MAPPING else
                                   attr[len("MODEL_FOR_"): -len("_MAPPING_NAMES")].lower().replace("_", "-"))
        for classes in getattr(modeling_auto, attr, {}).values():
            for name in (classes,) if isinstance(classes, str) else classes:
                if task not in result.setdefault(name, []):
                    result[name].append(task)
    return {k: tuple(v) for k, v in result.items()}


def tasks_of_class(class_name: str) -> list[str]:
    """The tasks whose auto mapping lists ``class_name``, the preferred first (may be empty); a base model of a
    text and an audio tower (CLAP: no auto mapping names the task) serves zero-shot-audio-classification first."""
    tasks = list(_class_tasks().get(class_name, ()))
    if tasks == ["feature-extraction"]:
        import transformers  # deferred: heavy

        cls = getattr(transformers, class_name, None)
        if hasattr(cls, "get_audio_features") and hasattr(cls, "get_text_features"):
            tasks.insert(0, "zero-shot-audio-classification")
    return tasks


def folder_task(config: Any, task: str | None = None) -> str:
    """The task a folder is exported for: ``task`` when given, else the one of its class.

    :raises ValueError: one line naming the class, the task found and what to do, when the
        task is not one :data:`EXPORTABLE_TASKS` holds
    """
    architectures = list(getattr(config, "architectures", None) or [])
    if task is None:
        found = [t for a in architectures for t in tasks_of_class(a)]
        if found and found[0] in EXPORTABLE_TASKS:
            return found[0]
        if not architectures:
            raise ValueError(
                "config.json names no class (architectures is empty): give --task text-generation if the folder "
                "holds a decoder LLM."
            )
        what = f"task {found[0]!r}" if found else "a task none of transformers' auto mappings names"
        raise ValueError(
            f"{architectures[0]} is a model of {what}: exporting a folder supports {list(EXPORTABLE_TASKS)} today; "
            "export such a model from Python with fx2onnx.to_onnx (see the gallery's tasks page)."
        )
    if task not in EXPORTABLE_TASKS:
        raise ValueError(f"--task {task!r} is not supported from a folder: use one of {list(EXPORTABLE_TASKS)}.")
    found = [t for a in architectures for t in tasks_of_class(a)]
    if task == "image-segmentation" and "universal-segmentation" in found and (
            task not in found or found.index("universal-segmentation") < found.index(task)):
        # transformers' pipeline task of an instance or universal segmenter (DETR's panoptic segmenter is listed
        # under both: its universal head, the masks the pipeline post-processes)
        return "universal-segmentation"
    if task in PIPELINE_TASKS and task not in found and _SERVED_BY.get(task) not in found:  # the model's head is the task's: --task picks among its tasks
        raise ValueError(f"--task {task!r} is not supported from a folder of "
                         f"{architectures[0] if architectures else 'a model naming no class'}: its head is one of "
                         f"{found or 'no task of transformers auto mappings'}; give one of those.")
    return task
