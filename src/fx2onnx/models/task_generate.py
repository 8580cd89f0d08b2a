"""The ``generate`` column of the tasks page: an image-text-to-text model of the task zoo taken
from its folder to generated tokens, as a user deploys it, against transformers' ``generate``.

:func:`compare_folder_generation` writes the tiny model as a ``save_pretrained`` folder, exports
it with :func:`fx2onnx.deploy.export_folder` (the vision piece and the decoder with its cache,
each checked against eager), runs :class:`fx2onnx.runtime.vision.VisionGenerator` greedily on the
task zoo's inputs of one prompt (:func:`fx2onnx.models.vlm_inputs.image_text_inputs`) and compares
its tokens with ``model.generate(..., do_sample=False)`` on the same inputs.

.. code-block:: python

    from fx2onnx.models.task_generate import compare_folder_generation
    from fx2onnx.models.tasks import get_task_architecture, tiny_task_model

    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "llava"))
    print(compare_folder_generation(model, config))  # {'equal': True, 'new_tokens': 8, ...}
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import numpy as np
import torch

#: the tokens generated after the prompt
NEW_TOKENS = 8
#: the tasks whose rows get a ``generate`` entry
GENERATE_TASKS = ("image-text-to-text",)


def compare_folder_generation(model: Any, config: Any, max_new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """``{"equal", "new_tokens", "time"}`` (and ``"error"`` with the step where it failed: ``split``,
    ``export``, ``generate``) of the folder of ``model`` exported then generating, against
    transformers' greedy ``generate`` on one prompt with one image."""
    from ..deploy import export_folder
    from ..deploy.image_text_generic import UnsplittableModel, split_reason
    from ..deploy.vision import has_own_pieces
    from ..runtime.vision import VisionGenerator
    from .vlm_inputs import image_text_inputs

    begin = time.perf_counter()
    # a model the split refuses: said before anything runs (the families with pieces of their own pass)
    reason = None if has_own_pieces(config.model_type) else split_reason(model, config)
    if reason:
        return {"equal": False, "error": f"split: {reason}", "time": time.perf_counter() - begin}
    inputs, _ = image_text_inputs(model, config, batch=1)
    # position_ids: generate computes them (Qwen-VL's from the grid), the loop too
    inputs = {k: v for k, v in inputs.items() if k != "position_ids"}
    model.generation_config.pad_token_id = model.generation_config.pad_token_id or 0
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False).numpy()
    result: dict[str, Any] = {"new_tokens": int(expected.shape[1] - inputs["input_ids"].shape[1])}
    with tempfile.TemporaryDirectory(prefix="fx2onnx-generate-") as tmp:
        folder, out = os.path.join(tmp, "checkpoint"), os.path.join(tmp, "onnx")
        model.save_pretrained(folder)
        step = "export"
        try:
            exported = export_folder(folder, out, optimize="onnxruntime")
            if not exported.ok:
                raise ValueError("; ".join(exported.check_lines()))
            step = "generate"
            got = VisionGenerator(out).generate_ids(inputs, max_new_tokens)
        except Exception as e:  # noqa: BLE001 - the row says why
            step = "split" if isinstance(e, UnsplittableModel) else step
            result.update(equal=False, error=f"{step}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            result["time"] = time.perf_counter() - begin
            return result
    got = np.asarray(got)
    result["equal"] = bool(got.shape == expected.shape and (got == expected).all())
    if not result["equal"]:
        prompt = inputs["input_ids"].shape[1]
        first = next((i for i in range(min(got.shape[1], expected.shape[1])) if got[0, i] != expected[0, i]), None)
        result["error"] = (f"tokens differ from transformers' at new token {first - prompt}" if first is not None
                           else f"{got.shape[1] - prompt} tokens instead of {expected.shape[1] - prompt}")
    result["time"] = time.perf_counter() - begin
    return result
