"""The rows of the ``tasks`` library of the zoo: a tiny model per task and architecture and its two input
sets (:mod:`fx2onnx.inputs.task_inputs`), what :mod:`fx2onnx.zoo.library_zoo` exports and compares.

.. code-block:: python

    from fx2onnx.zoo.task_cases import build_task_case

    case = build_task_case("image-classification/vit")
    print(type(case.model).__name__, sorted(case.inputs))
"""


from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch

from ..inputs.task_inputs import build_task_inputs
from ..inputs.tasks import discover_tasks, get_task_architecture, tiny_task_config, tiny_task_model
from ..validation import compare_outputs, flatten_outputs

#: the name of the transformers tasks in :mod:`fx2onnx.zoo.library_zoo`
TASKS_LIBRARY = "tasks"


def task_key(task: str, name: str) -> str:
    """The architecture key of a row: ``task/model_type``."""
    return f"{task}/{name}"


def task_entries() -> dict[str, str]:
    """``{"task/model_type": model class}`` of every (task, architecture) pair discovered."""
    return {task_key(a.task, a.name): a.model_class_name for a in discover_tasks()}


@dataclass
class TaskCase:
    """A tiny transformers model of one task with the inputs of a zoo row (keyword inputs only)."""

    #: the task
    family: str
    #: the model type
    name: str
    #: the tiny model, in eval mode
    model: torch.nn.Module
    #: the keyword inputs of the export
    export_kwargs: dict
    #: keyword inputs of other shapes, to check the dynamic model
    check_kwargs: dict
    #: the dynamic shapes of the inputs, by input name
    dynamic_shapes: dict
    #: the number of parameters of the model
    parameters: int = 0
    #: a positional input of the export (None for keyword inputs only)
    export_input: Any = None
    #: the positional input of the check (None for keyword inputs only)
    check_input: Any = None
    #: what the row should say about the model's inputs or configuration
    notes: list = field(default_factory=list)
    #: exported under ``torch_export_patches(patch_transformers=True)`` by both exporters
    patch_transformers: bool = True


def _at_step(e: Exception, step: str) -> Exception:
    with contextlib.suppress(AttributeError):
        e.step = step
    return e


class RandomEagerError(ValueError):
    """The eager model gives two results on the same inputs (dropout or noise in eval mode):
    no export can be compared with it."""


def _check_deterministic(model: torch.nn.Module, inputs: dict[str, Any]) -> None:
    first = flatten_outputs(model(**inputs))
    report = compare_outputs(first, flatten_outputs(model(**inputs)), atol=0.0, rtol=0.0)
    if not report.ok:
        raise RandomEagerError(
            f"eager gives another result on the same inputs (max abs diff {report.max_abs:.3g}): the model "
            "samples noise or applies dropout in eval mode, no export can be compared with it")


def build_task_case(key: str, shapes: str = "batch", seed: int = 0) -> TaskCase:
    """The tiny model of ``key`` (``task/model_type``) and its inputs: exported with a batch of 2
    (dynamic), checked on a batch of 3. An exception raised after the configuration was built
    carries ``step="model"`` (the model, its inputs or its eager forward failed)."""
    if shapes != "batch":
        raise ValueError(f"the tasks rows only make the batch dynamic, got shapes={shapes!r}.")
    task, name = key.split("/", 1)
    arch = get_task_architecture(task, name)
    if arch.skip:
        raise ValueError(f"skipped: {arch.skip}")
    tiny_task_config(arch)
    try:
        model, config = tiny_task_model(arch, seed=seed)
        inputs, dynamic = build_task_inputs(task, model, config, 2, seed=seed)
        check, _ = build_task_inputs(task, model, config, 3, seed=seed + 1)
        with torch.no_grad():
            model(**inputs)
            _check_deterministic(model, check)
    except Exception as e:
        raise _at_step(e, "model") from None
    return TaskCase(family=task, name=name, model=model, export_kwargs=inputs, check_kwargs=check,
                    dynamic_shapes=dynamic, parameters=sum(p.numel() for p in model.parameters()))
