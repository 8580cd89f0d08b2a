"""The ``generate`` column of the tasks page: an image-text-to-text or speech-seq2seq model of the
task zoo taken from its folder to generated tokens, as a user deploys it, against transformers' ``generate``.

A speech-seq2seq model, or an encoder-decoder reading an image (TrOCR, Donut), is exported the same way
(:func:`compare_seq2seq_generation`: Whisper with its own pieces, the other encoder-decoders through
:mod:`fx2onnx.deploy.speech_generic`, what cannot be split refused before anything runs) and generates
from the task zoo's audio features or pixels of one input (:mod:`fx2onnx.zoo.task_inputs`), the tokens
compared with ``model.generate(**features, do_sample=False)``.

:func:`compare_folder_generation` writes the tiny model as a ``save_pretrained`` folder, exports
it with :func:`fx2onnx.deploy.export_folder` (the vision piece and the decoder with its cache,
each checked against eager), runs the loop :func:`fx2onnx.runtime.families.open_generator` opens greedily on the
task zoo's inputs of one prompt (:func:`fx2onnx.inputs.vlm_inputs.image_text_inputs`) and compares
its tokens with ``model.generate(..., do_sample=False)`` on the same inputs.

.. code-block:: python

    from fx2onnx.zoo.task_generate import compare_folder_generation
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "llava"))
    print(compare_folder_generation(model, config))  # {'equal': True, 'new_tokens': 8, ...}
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Callable

import numpy as np
import torch

from ..deploy import export_folder
from ..deploy.audio_text_generic import UnsplittableAudioModel
from ..deploy.captioner import as_encoder_decoder
from ..deploy.families import FolderFacts, choose_family
from ..deploy.image_text import has_own_pieces
from ..deploy.image_text_generic import UnsplittableModel, split_reason
from ..deploy.speech_generic import (
    FEATURE_INPUTS,
    UnsplittableEncoderDecoder,
    generic_split_reason,
    reads_pixels,
    start_token,
)
from ..inputs.image_inputs import _image_inputs
from ..inputs.task_inputs import build_task_inputs
from ..inputs.vlm_inputs import image_text_inputs
from ..runtime.families import open_generator

#: the tokens generated after the prompt
NEW_TOKENS = 8
#: the tasks whose rows get a ``generate`` entry
GENERATE_TASKS = ("image-text-to-text", "speech-seq2seq")


def is_speech_seq2seq(model: Any) -> bool:
    """Whether ``model``'s class is one of transformers' speech-seq2seq mapping."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
    )

    names = {c for v in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES.values() for c in ((v,) if isinstance(v, str) else v)}
    return type(model).__name__ in names


def _first_difference(got: np.ndarray, expected: np.ndarray, prompt: int) -> str:
    first = next((i for i in range(min(got.shape[1], expected.shape[1])) if got[0, i] != expected[0, i]), None)
    return (f"tokens differ from transformers' at new token {first - prompt}" if first is not None
            else f"{got.shape[1] - prompt} tokens instead of {expected.shape[1] - prompt}")


def _export_and_generate(model: Any, generate: Callable[[str], Any], unsplittable: type[Exception],
                         result: dict[str, Any], begin: float) -> Any:
    """Writes ``model`` as a ``save_pretrained`` folder in a temporary folder, exports it with
    :func:`fx2onnx.deploy.export_folder` (level ``onnxruntime``; a failed check is an error) and
    returns ``generate(onnx_folder)``. On an error, returns None and ``result`` says the step
    (``split`` for an ``unsplittable`` exception, ``export``, ``generate``), the error's first line
    and the ``time`` since ``begin``."""

    with tempfile.TemporaryDirectory(prefix="fx2onnx-generate-") as tmp:
        folder, out = os.path.join(tmp, "checkpoint"), os.path.join(tmp, "onnx")
        model.save_pretrained(folder)
        step = "export"
        try:
            exported = export_folder(folder, out, optimize="onnxruntime")
            if not exported.ok:
                raise ValueError("; ".join(exported.check_lines()))
            step = "generate"
            return generate(out)
        except Exception as e:  # noqa: BLE001 - the row says why
            step = "split" if isinstance(e, unsplittable) else step
            result.update(equal=False, error=f"{step}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            result["time"] = time.perf_counter() - begin
            return None


def _zoo_start_token(model: Any, config: Any) -> int | None:
    """A tiny encoder-decoder of the zoo whose configuration names no decoder start token (its published
    checkpoints do: TrOCR's 2) gets its decoder's ``bos_token_id``, else its pad token, else 0, in its
    configuration and generation config, as a checkpoint would: the value set, None when it had one."""

    if start_token(model, config) is not None:
        return None
    decoder = getattr(config, "decoder", None)
    value = next((v for v in (getattr(decoder, "bos_token_id", None), getattr(decoder, "pad_token_id", None),
                              getattr(config, "pad_token_id", None)) if isinstance(v, int)), 0)
    model.generation_config.decoder_start_token_id = config.decoder_start_token_id = value
    return value


def compare_seq2seq_generation(model: Any, config: Any, max_new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """:func:`compare_folder_generation` for an encoder-decoder reading audio features (speech-seq2seq) or
    pixels (an image encoder-decoder: TrOCR, Donut): the task zoo's features of one input, the folder
    exported then generating greedily, against transformers' greedy ``generate``. A model whose
    configuration names no decoder start token gets one (:func:`_zoo_start_token`, said in ``start_token``)."""

    begin = time.perf_counter()
    seq2seq = as_encoder_decoder(model)  # a captioner (BLIP, Florence-2) seen as an encoder-decoder
    whisper = getattr(config, "model_type", None) == "whisper"
    result: dict[str, Any] = {}
    if not whisper and getattr(config, "is_encoder_decoder", False):
        value = _zoo_start_token(model, config)
        if value is not None:
            result["start_token"] = value
    reason = None if whisper else generic_split_reason(seq2seq, getattr(seq2seq, "config", config))
    if reason:
        return {**result, "equal": False, "error": f"split: {config.model_type}: {reason}",
                "time": time.perf_counter() - begin}
    pixels = reads_pixels(seq2seq)
    inputs, _ = build_task_inputs("image-text-to-text" if pixels else "speech-seq2seq", model, config, batch=1)
    # Florence-2: the prompt the encoder merges the image into
    prompt = ("input_ids",) if getattr(seq2seq, "merges_prompt", False) else ()
    features = {k: v for k, v in inputs.items() if k in (*FEATURE_INPUTS, "attention_mask", *prompt)}
    try:
        with torch.no_grad():
            expected = model.generate(**features, max_new_tokens=max_new_tokens, do_sample=False).numpy()
    except Exception as e:  # noqa: BLE001 - the row says why
        return {**result, "equal": False, "error": f"reference: transformers' generate fails: {type(e).__name__}: "
                f"{str(e).splitlines()[0][:300]}", "time": time.perf_counter() - begin}
    # Whisper's generate returns the generated tokens only (its decoder prompt removed), the others
    # the decoder's start token, then the generated tokens
    result["new_tokens"] = int(expected.shape[1] - (0 if whisper else 1))

    def generate(out: str) -> Any:
        arrays = {k: v.numpy() for k, v in features.items()}
        return open_generator(out).generate_ids(arrays if not whisper else arrays["input_features"], max_new_tokens)

    got_result = _export_and_generate(model, generate, UnsplittableEncoderDecoder, result, begin)
    if got_result is None:
        return result
    prompt = 0 if whisper else len(got_result.prompt_ids[0])
    got = np.array([got_result.prompt_ids[0][:prompt] + got_result.new_ids[0]], dtype=np.int64)
    result["equal"] = bool(got.shape == expected.shape and (got == expected).all())
    if not result["equal"]:
        result["error"] = _first_difference(got, expected, prompt)
    result["time"] = time.perf_counter() - begin
    return result


def _compare_tokens(got: Any, expected: np.ndarray, prompt: int, result: dict[str, Any], begin: float) -> dict[str, Any]:
    """``result`` with ``equal`` (and the first difference), ``time``: the tokens ``got`` (prompt then new)
    against transformers' ``expected``."""
    got = np.asarray(got)
    result["equal"] = bool(got.shape == expected.shape and (got == expected).all())
    if not result["equal"]:
        result["error"] = _first_difference(got, expected, prompt)
    result["time"] = time.perf_counter() - begin
    return result


def compare_audio_text_generation(model: Any, config: Any, max_new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """:func:`compare_folder_generation` for a speech language model (its audio features written over
    placeholders of a prompt, :mod:`fx2onnx.deploy.audio_text_generic`): the task zoo's prompt and audio
    of one input, the folder exported then generating greedily with
    :class:`fx2onnx.runtime.audio_text.AudioTextGenerator`, against transformers' greedy ``generate``."""

    begin = time.perf_counter()
    inputs, _ = build_task_inputs("speech-seq2seq", model, config, batch=1)
    model.generation_config.pad_token_id = model.generation_config.pad_token_id or 0
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False).numpy()
    prompt = inputs["input_ids"].shape[1]
    result: dict[str, Any] = {"new_tokens": int(expected.shape[1] - prompt)}
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    got = _export_and_generate(model, lambda out: open_generator(out).generate_ids(tensors, max_new_tokens),
                               UnsplittableAudioModel, result, begin)
    return result if got is None else _compare_tokens(got, expected, prompt, result, begin)


def compare_prefix_generation(model: Any, config: Any, max_new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """:func:`compare_folder_generation` for a model whose image features precede the prompt (GIT,
    :mod:`fx2onnx.deploy.image_prefix`): the task zoo's image of one input and the start token, the folder
    exported then generating greedily with :class:`fx2onnx.runtime.image_prefix.ImagePrefixGenerator`, against
    transformers' greedy ``generate(pixel_values=..., input_ids=...)``."""

    begin = time.perf_counter()
    pixels = _image_inputs(model, config, 1, 0)[0]["pixel_values"]
    start = config.bos_token_id if config.bos_token_id is not None else 0
    inputs = {"pixel_values": pixels, "input_ids": torch.tensor([[start]])}
    model.generation_config.pad_token_id = model.generation_config.pad_token_id or 0
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False).numpy()
    result: dict[str, Any] = {"new_tokens": int(expected.shape[1] - 1)}
    got = _export_and_generate(model, lambda out: open_generator(out).generate_ids(inputs, max_new_tokens),
                               UnsplittableModel, result, begin)
    return result if got is None else _compare_tokens(got, expected, 1, result, begin)


def compare_folder_generation(model: Any, config: Any, max_new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """``{"equal", "new_tokens", "time"}`` (and ``"error"`` with the step where it failed: ``split``,
    ``export``, ``generate``) of the folder of ``model`` exported then generating, against
    transformers' greedy ``generate`` on one input. The comparison is the one of the family the folder
    export chooses (:func:`fx2onnx.deploy.families.choose_family`) and the folder is run by the loop the
    runtime's registry opens for it (:func:`fx2onnx.runtime.families.open_generator`), as ``generate`` does."""
    task = "speech-seq2seq" if is_speech_seq2seq(model) else "image-text-to-text"
    if not getattr(config, "architectures", None):  # what save_pretrained writes in the folder's config.json
        config.architectures = [type(model).__name__]
    family = choose_family(FolderFacts.of(task, config, torch.float32))
    compare = _FAMILY_COMPARISONS.get((task, family.split))
    if compare is not None:
        return compare(model, config, max_new_tokens)
    return compare_image_text_generation(model, config, max_new_tokens)


def compare_image_text_generation(model: Any, config: Any, max_new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """:func:`compare_folder_generation` for a decoder writing image features over its placeholders (the
    family ``image-text``): the task zoo's prompt with one image, the folder exported then generating greedily,
    against transformers' greedy ``generate``."""
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
    got = _export_and_generate(model, lambda out: open_generator(out).generate_ids(inputs, max_new_tokens),
                               UnsplittableModel, result, begin)
    if got is None:
        return result
    got = np.asarray(got)
    result["equal"] = bool(got.shape == expected.shape and (got == expected).all())
    if not result["equal"]:
        result["error"] = _first_difference(got, expected, inputs["input_ids"].shape[1])
    result["time"] = time.perf_counter() - begin
    return result


#: (task, split of the family the export chooses) -> the comparison of its folders (the others: image-text)
_FAMILY_COMPARISONS: dict[tuple[str, str | None], Callable[..., dict[str, Any]]] = {
    ("speech-seq2seq", "placeholders"): compare_audio_text_generation,
    ("speech-seq2seq", None): compare_seq2seq_generation,
    ("speech-seq2seq", "generic"): compare_seq2seq_generation,
    ("image-text-to-text", "prefix"): compare_prefix_generation,
    ("image-text-to-text", "generic"): compare_seq2seq_generation,
}
