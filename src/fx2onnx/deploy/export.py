"""A checkpoint folder in, a folder out that generates: what ``python -m fx2onnx export FOLDER`` calls.

:func:`export_folder` reads the task of the folder (:mod:`fx2onnx.deploy.tasks`), builds the
model on the meta device, exports it with :func:`fx2onnx.weights.to_onnx_from_checkpoint`
(the weights streamed from the safetensors files, one tensor at a time), for a causal LM
with its cache, names the present keys and values as onnxruntime-genai expects
(:mod:`fx2onnx.deploy.genai_config`), copies the tokenizer, config and generation config
files, writes ``genai_config.json`` and ``fx2onnx.json`` (the pieces of the folder), and
checks the model against eager float32 (:mod:`fx2onnx.deploy.check`).

.. code-block:: python

    from fx2onnx.deploy import export_folder
    result = export_folder("qwen3_folder", "qwen3_onnx")
    print(result)
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import time
from typing import Any

import torch

from ..runtime.folder import DECODER_FILE, FOLDER_METADATA
from ..runtime.integrity import folder_manifest
from ..weights.export import _torch_dtype
from ..weights.loading_changes import weights_changed_on_loading
from .check import FolderCheck, eager_float32
from .disk import NotEnoughSpaceError, check_free_space
from .families import Family, FolderFacts, choose_family
from .files import copy_folder_files
from .genai_config import present_name, write_genai_config  # noqa: F401
from .inputs_check import check_checkpoint_folder, check_weights
from .memory import check_memory
from .output_folder import OutputFolder, OutputFolderError, refuse_overlap, replaceable
from .result import FolderExport, config_error, folder_files, peak_rss  # noqa: F401 (importable from here)
from .saved_model import (  # noqa: F401 (importable from here)
    _rename_outputs,
    name_presents,
    rename_external_data,
    update_cache_in_place,
)
from .speech import check_speech_pieces
from .tasks import folder_task
from .text_generation import last_logits_only  # noqa: F401 (importable from here)
from .transformersjs import pieces_refusal, variant_file, write_transformersjs_config

#: the optimization levels of the command line, ``none`` for no optimization
OPTIMIZE_CHOICES = ("default", "onnxruntime", "opset23", "none")


def _output_path(out: str) -> tuple[str, str]:
    """(folder, model file name): ``out`` is a folder, or the path of the ``.onnx`` file."""
    if out.endswith(".onnx"):
        folder = os.path.dirname(os.path.abspath(out))
        return folder, os.path.basename(out)
    return out, DECODER_FILE


def export_folder(
    folder: str | os.PathLike,
    out: str | os.PathLike,
    *,
    task: str | None = None,
    dtype: str | torch.dtype | None = None,
    with_cache: bool = True,
    optimize: str = "onnxruntime",
    quantize: str | None = None,
    block_size: int = 32,
    symmetric: bool = True,
    opset: int | None = None,
    all_logits: bool = False,
    cache_in_place: bool = True,
    capture_all_layers: bool = False,
    validate: bool = True,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    progress: bool = False,
    log: Any = None,
    max_memory: int | str | None = None,
) -> FolderExport:
    """Exports the model of a ``save_pretrained`` folder into the folder ``out``.

    :param folder: ``config.json``, the safetensors files, a tokenizer, a generation config
    :param out: the output folder (created), or the path of the ``.onnx`` file to write
        (the other files go beside it)
    :param task: the task (default: the one of the folder's class, ``text-generation``)
    :param dtype: the type of the exported weights (default: float32, the type of
        onnxruntime's CPU kernels; ``bfloat16`` / ``float16`` keep the checkpoint's size)
    :param with_cache: a causal LM takes and returns its cache (it can generate)
    :param optimize: ``onnxruntime`` (fused operators), ``default``, ``opset23`` or ``none``
    :param quantize: ``int4`` or ``int8``: weights as onnxruntime's ``MatMulNBits``
        (level ``onnxruntime`` only), ``block_size`` values sharing one scale; ``symmetric``
        blocks by default (no zero point: onnxruntime's int4 kernels are 17-28 % faster on one
        token, as onnxruntime-genai's builder quantizes), ``symmetric=False`` for asymmetric ones
        (a little more accurate: ``bench/bench_quantize.py``)
    :param opset: the ONNX opset (default: 23 for the fused levels, 20 otherwise)
    :param all_logits: a causal LM with its cache returns the logits of every position; by default
        it returns those of the last one (``logits`` is ``(batch, 1, vocabulary)``, what generation
        reads: the head is not computed for the other positions of a prompt, see
        :func:`last_logits_only`)
    :param cache_in_place: at ``optimize="onnxruntime"``, a causal LM with its cache updates it in
        place (:mod:`fx2onnx.optimizer.rules.cache_in_place`: onnxruntime's ``GroupQueryAttention``
        writes the new keys into a buffer the loop allocates once; the standard ``Attention`` copies
        the whole cache at each step); ``fx2onnx.json`` records ``"cache": "in_place"``
    :param capture_all_layers: trace every decoder layer with ``torch.export``; by default a model
        whose layers are all the same module is captured with two and the others are copied in
        ONNX (:mod:`fx2onnx.weights.repeat_layers`: the same graph, the capture 14 times shorter
        for 28 layers), all of them captured when the two layers' graphs differ
    :param validate: run the model on two input sets and compare with eager float32
        (the model is then loaded once in float32: skip it for a model that does not fit)
    :param progress: progress bars on stderr
    :param log: a function receiving progress lines (default: none)
    :param max_memory: refuse, before loading anything, an export estimated to need more memory (bytes, or
        ``"16GB"``; :mod:`fx2onnx.deploy.memory`)

    Nothing under ``folder`` is written (an ``out`` inside it, holding it or equal to it is refused); its files
    are checked first (:mod:`fx2onnx.deploy.inputs_check`), then the free space (:mod:`fx2onnx.deploy.disk`).
    The folder is written beside ``out`` and renamed into place once checked (:mod:`fx2onnx.deploy.output_folder`):
    a failed check leaves ``out`` as it was (``written`` is False), so does an error or an interruption. See
    the design page on folder safety.
    """

    begin = time.perf_counter()
    say = log or (lambda _line: None)
    folder, out = os.fspath(folder), os.fspath(out)
    if optimize not in OPTIMIZE_CHOICES:
        raise ValueError(f"optimize={optimize!r}: use one of {list(OPTIMIZE_CHOICES)}.")
    if quantize is not None and optimize != "onnxruntime":
        raise ValueError(f"quantize={quantize!r} writes onnxruntime's MatMulNBits: use optimize='onnxruntime'.")
    out_dir, filename = _output_path(out)
    refuse_overlap(folder, out_dir)  # before anything is read or written
    check_checkpoint_folder(folder, weights=False)
    config = _load_config(folder)
    task = folder_task(config, task)
    check_weights(folder)
    dtype = _torch_dtype(dtype or torch.float32)
    if filename == DECODER_FILE:  # the name transformers.js selects for these weights (onnx/model_q4.onnx for int4)
        filename = variant_file(filename, quantize, str(dtype))
    why = replaceable(out_dir)
    if why:
        raise OutputFolderError(why)
    check_free_space(folder, out_dir, dtype, quantize, block_size)
    if max_memory is not None:
        check_memory(folder, max_memory, dtype, validate)
    options = dict(with_cache=with_cache, optimize=optimize, quantize=quantize, block_size=block_size,
                   symmetric=symmetric, opset=opset, all_logits=all_logits, cache_in_place=cache_in_place,
                   capture_all_layers=capture_all_layers, validate=validate, atol=atol, rtol=rtol, progress=progress)
    with OutputFolder(out_dir) as staging:
        try:
            result = _write_folder(folder, staging.path, filename, config, task, dtype, begin, say, **options)
            if not validate or result.ok:
                record_files(staging.path)
                staging.commit()
        except OSError as e:
            if e.errno not in _DISK_FULL:
                raise
            raise NotEnoughSpaceError(f"writing the export beside {out_dir!r} failed ({os.strerror(e.errno)}): free "
                                      "some space or give an --out on another disk; nothing was written.") from None
    files = folder_files(out_dir) if staging.committed else result.files
    changes = weights_changed_on_loading(folder, eager_float32(folder)) if validate and not result.ok else []
    return dataclasses.replace(result, out=out_dir, files=files, written=staging.committed, loading_changes=changes)


#: the errors of a write on a full disk, over a quota or past the file size limit
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _load_config(folder: str) -> Any:
    """The folder's configuration (transformers' ``AutoConfig``), refused in one line when transformers cannot
    read it (config.json passed :func:`fx2onnx.deploy.inputs_check.check_config`: a value of the wrong type)."""
    import transformers

    try:
        return transformers.AutoConfig.from_pretrained(folder)
    except Exception as e:  # noqa: BLE001 - transformers validates the values with many error types
        raise config_error(folder, "cannot be read by transformers", e) from None


def record_files(out_dir: str) -> None:
    """Adds the size and checksum of every file of ``out_dir`` to its ``fx2onnx.json``
    (:mod:`fx2onnx.runtime.integrity`: ``generate`` refuses a folder changed since)."""
    path = os.path.join(out_dir, FOLDER_METADATA)
    with open(path, encoding="utf-8") as f:
        metadata = json.load(f)
    metadata["files"] = folder_manifest(out_dir)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(metadata, f, indent=2)


def _write_folder(folder: str, out_dir: str, filename: str, config: Any, task: str, dtype: torch.dtype, begin: float,
                  say: Any, **options: Any) -> FolderExport:
    """Writes the export of ``folder`` into the folder ``out_dir`` (the temporary folder of :func:`export_folder`)
    by the first family of its task that applies, and checks it when ``options["validate"]``."""
    facts = FolderFacts.of(task, config, dtype)
    family = choose_family(facts)
    if family.write_folder is not None:  # the family writes its whole folder (text generation: one decoder)
        return family.write_folder(folder, out_dir, filename, config, task, dtype, begin, say, **options)
    pieces_options = {k: options[k] for k in ("optimize", "quantize", "block_size", "symmetric", "opset", "validate",
                                              "cache_in_place", "atol", "rtol", "progress")}
    return _export_pieces_folder(task, folder, out_dir, config, dtype, begin, family, facts, say=say, **pieces_options)


#: the folders exported as several pieces: task -> (model type, what the pieces are)
PIECES_MODEL_TYPES = {
    # any model type: Whisper with its own pieces, the other encoder-decoders through the generic split, which
    # names what it cannot split (fx2onnx.deploy.speech_generic)
    "speech-seq2seq": (None, "any encoder-decoder speech model"),
    # any model type: the families of fx2onnx.deploy.image_text.has_own_pieces with theirs, the others through the
    # generic split, which names what it cannot split (fx2onnx.deploy.image_text_generic); an encoder-decoder
    # reading pixels (TrOCR, Donut) through the generic encoder-decoder split (fx2onnx.deploy.speech_generic)
    "image-text-to-text": (None, "any image-text model"),
}


def _export_pieces_folder(task: str, folder: str, out_dir: str, config: Any, dtype: torch.dtype, begin: float,
                          family: Family, facts: FolderFacts, *,
                          optimize: str, quantize: str | None, block_size: int, symmetric: bool,
                          opset: int | None, validate: bool, cache_in_place: bool,
                          atol: float, rtol: float, progress: bool, say: Any) -> FolderExport:
    """A folder exported as several pieces by the first family of its task that applies
    (:data:`fx2onnx.deploy.families.FAMILIES`: Whisper, the other speech encoder-decoders, the speech language
    models, the image-text models...), their signatures in ``fx2onnx.json``, the processor and tokenizer files
    copied."""

    model_types, supported = PIECES_MODEL_TYPES.get(task, (None, None))
    model_type = getattr(config, "model_type", None)
    if model_types is not None and model_type not in model_types:
        raise ValueError(f"{config.architectures[0]} is a model of task {task!r}: exporting such a folder supports "
                         f"{supported}.")
    options = dict(optimize=optimize, quantize=quantize, block_size=block_size, symmetric=symmetric, opset=opset,
                   progress=progress, say=say, cache_in_place=cache_in_place)
    pieces, make_pieces = family.export(folder, out_dir, config, dtype, options)
    split, extra, prefix = family.split, facts.generation, family.split == "prefix"
    copy_folder_files(folder, out_dir)
    # transformers.js reads the weights' files config.json names (SAM's two pieces, one model for the others, the
    # image-text split of fx2onnx.deploy.transformersjs_split beside our decoder)
    for piece in pieces:
        if piece.filename.startswith("onnx/"):
            write_transformersjs_config(out_dir, piece.filename,
                                        os.path.isfile(os.path.join(out_dir, piece.filename + "_data")))
    with open(os.path.join(out_dir, FOLDER_METADATA), "w", encoding="utf-8") as f:
        # a folder without the files transformers.js loads says so (fx2onnx.deploy.transformersjs.folder_refusal)
        refusal = pieces_refusal(model_type, [p.filename for p in pieces])
        json.dump({"task": task, **({"split": split} if split else {}), **extra,
                   **({"transformersjs": refusal} if refusal else {}),
                   "pieces": {p.name: {"file": p.filename, "inputs": p.input_names, "outputs": p.output_names,
                                       "cache": p.cache,
                                       # a text encoder whose outputs change with padding (ConvBERT): one text a run
                                       **({"padding": p.module.padding} if getattr(p.module, "padding", None) else {}),
                                       # the decoder writes video features too (Qwen-VL)
                                       **({"video_token_id": p.module.video_token_id}
                                          if getattr(p.module, "video_token_id", None) is not None else {}),
                                       # a speech language model's audio placeholder (audio_text_generic)
                                       **({"audio_token_id": p.module.audio_token_id}
                                          if getattr(p.module, "audio_token_id", None) is not None else {}),
                                       # the placeholder of an image row in front of the prompt (image_prefix)
                                       **({"prefix_token_id": p.module.image_token_id} if prefix and p.cache else {}),
                                       **({"cache_update": "in_place" if p.in_place else "concatenated"}
                                          if p.cache else {})} for p in pieces},
                   "dtype": str(dtype).replace("torch.", ""), "optimize": optimize, "quantize": quantize,
                   "block_size": block_size if quantize else None,
                   "symmetric": symmetric if quantize else None,
                   "source": os.path.basename(os.path.abspath(folder))}, f, indent=2)
    checks: list[FolderCheck] = []
    check_names: list[str] | None = None
    if validate:
        say(f"checking the {' and the '.join(p.name for p in pieces)} against eager float32")
        checks, check_names = check_speech_pieces(folder, out_dir, pieces, dtype, atol, rtol, make_pieces)
        if quantize:
            checks = [dataclasses.replace(c, ok=True, held=False) for c in checks]
    files = sorted(os.listdir(out_dir))
    nbytes = sum(os.path.getsize(os.path.join(root, f)) for root, _, names in os.walk(out_dir) for f in names)
    genai = "onnxruntime-genai runs generation models" if family.name == "encoder" else \
        f"onnxruntime-genai's configuration of a {model_type} folder is not written yet"
    return FolderExport(out_dir, task, dtype, files, nbytes, time.perf_counter() - begin, peak_rss(),
                        checks, genai, check_names, family=family.name, quantize=quantize)
