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
import resource
import time
from typing import Any

import torch

from ..inputs.folder_inputs import task_inputs
from ..runtime.folder import DECODER_FILE, FOLDER_METADATA
from ..runtime.integrity import folder_manifest
from ..runtime.speculative import VERIFY_TOKENS
from ..weights import checkpoint_weights, to_onnx_from_checkpoint
from ..weights.checkpoint import CheckpointFileError
from ..weights.export import _torch_dtype, model_from_checkpoint_config, model_from_config
from ..weights.repeat_layers import LayersNotRepeatable, layer_stack, short_config, stamp_layers
from .cache_names import is_mamba_config
from .check import FolderCheck, check_against_eager, in_place_input_sets
from .disk import NotEnoughSpaceError, check_free_space
from .families import FAMILIES, FolderFacts, choose_family
from .files import copy_folder_files
from .genai_config import present_name, write_genai_config  # noqa: F401
from .inputs_check import check_checkpoint_folder, check_weights
from .memory import check_memory
from .output_folder import OutputFolder, OutputFolderError, refuse_overlap, replaceable
from .saved_model import _rename_outputs, name_presents, update_cache_in_place  # noqa: F401 (importable from here)
from .saved_model import rename_external_data
from .speech import check_speech_pieces
from .tasks import folder_task
from .transformersjs import data_file_name, write_transformersjs_config
from .verify_logits import split_verify_logits

#: the optimization levels of the command line, ``none`` for no optimization
OPTIMIZE_CHOICES = ("default", "onnxruntime", "opset23", "none")


@dataclasses.dataclass
class FolderExport:
    """What :func:`export_folder` wrote and measured."""

    out: str
    task: str
    dtype: torch.dtype
    files: list[str]
    nbytes: int
    seconds: float
    peak_rss: int
    checks: list[FolderCheck]
    #: why onnxruntime-genai cannot run the folder (None: genai_config.json written)
    genai: str | None
    #: what each check ran on (default: the first and second input sets of the model)
    check_names: list[str] | None = None
    #: False: the check failed, nothing was written at ``out`` (a previous folder there is kept)
    written: bool = True
    #: the family of pieces (:data:`fx2onnx.deploy.families.FAMILIES`; None: one model)
    family: str | None = None
    #: the weight-only quantization of the matrices (``int4``, ``int8``; None: ``dtype`` everywhere)
    quantize: str | None = None

    def kind(self) -> str:
        """The task, the family of pieces and the weights' types, as the summary says them."""
        dtype = str(self.dtype).replace("torch.", "")
        weights = f"{self.quantize} matrices, {dtype} elsewhere" if self.quantize else dtype
        return f"{self.task}{': ' + self.family if self.family else ''}, {weights}"

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def check_lines(self) -> list[str]:
        """One line per check: what it ran on, and its outcome."""
        names = self.check_names or ["first input set", "second input set"]
        return [f"{name}: {check}" for name, check in zip(names, self.checks)]

    def __str__(self) -> str:
        if not self.written:
            return (f"nothing written at {self.out}: the check against eager failed ({self.kind()}, "
                    f"{self.seconds:.1f} s); a previous folder there is kept")
        return (f"wrote {self.out}: {len(self.files)} files, {self.nbytes / 2**20:.1f} MiB ({self.kind()}) "
                f"in {self.seconds:.1f} s, peak memory {self.peak_rss / 2**30:.2f} GiB")


def peak_rss() -> int:
    """The peak resident memory of this process, bytes: ``VmHWM`` where Linux gives it (its
    ``ru_maxrss`` keeps the peak of the process before ``exec``, the parent's size for a command
    started from a large Python process), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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
    return dataclasses.replace(result, out=out_dir, files=files, written=staging.committed)


#: the errors of a write on a full disk, over a quota or past the file size limit
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _load_config(folder: str) -> Any:
    """The folder's configuration (transformers' ``AutoConfig``), refused in one line when transformers cannot
    read it (config.json passed :func:`fx2onnx.deploy.inputs_check.check_config`: a value of the wrong type)."""
    import transformers

    try:
        return transformers.AutoConfig.from_pretrained(folder)
    except Exception as e:  # noqa: BLE001 - transformers validates the values with many error types
        raise _config_error(folder, "cannot be read by transformers", e) from None


def _config_error(folder: str, what: str, error: BaseException) -> CheckpointFileError:
    """One line naming config.json, what failed and the error's first line."""
    reason = str(error).splitlines()[0] if str(error) else ""
    return CheckpointFileError(f"{os.path.join(folder, 'config.json')!r} {what} ({type(error).__name__}: "
                               f"{reason[:200]}): restore it from the model's repository.")


def folder_files(out_dir: str) -> list[str]:
    """The files of ``out_dir``, its sub-folders' included (``onnx/model.onnx``), relative paths, sorted."""
    return sorted(os.path.relpath(os.path.join(root, name), out_dir).replace(os.sep, "/")
                  for root, _, names in os.walk(out_dir) for name in names)


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
                  say: Any, *, with_cache: bool, optimize: str, quantize: str | None, block_size: int, symmetric: bool,
                  opset: int | None, all_logits: bool, cache_in_place: bool, capture_all_layers: bool, validate: bool,
                  atol: float, rtol: float, progress: bool) -> FolderExport:
    """Writes the export of ``folder`` into the folder ``out_dir`` (the temporary folder of :func:`export_folder`)
    and checks it when ``validate``."""
    import transformers

    model_path = os.path.join(out_dir, filename)
    if any(f.task == task for f in FAMILIES):  # exported by a family of pieces (an encoder: one piece)
        return _export_pieces_folder(task, folder, out_dir, config, dtype, begin, optimize=optimize, quantize=quantize,
                                     block_size=block_size, symmetric=symmetric, opset=opset, validate=validate,
                                     cache_in_place=cache_in_place, atol=atol, rtol=rtol,
                                     progress=progress, say=say)

    config.use_cache = with_cache
    os.makedirs(os.path.dirname(model_path), exist_ok=True)
    try:  # a value of config.json (a size of 0, a negative count) may not build a model
        inputs, inputs2, dynamic_shapes = task_inputs(config, task, with_cache=with_cache, dtype=dtype)
        model = model_from_checkpoint_config(folder, dtype)
    except (ValueError, FileNotFoundError):
        raise
    except Exception as e:  # noqa: BLE001 - the model's constructor raises what its code raises
        raise _config_error(folder, "does not build its model", e) from None
    model.config.use_cache = with_cache
    logits = "all"
    if with_cache and not all_logits and last_logits_only(model, [inputs, inputs2], dynamic_shapes, VERIFY_TOKENS):
        logits = "last"
    say(f"exporting {config.architectures[0]} ({task}{', with its cache' if with_cache else ''}, "
        f"{str(dtype).replace('torch.', '')}, optimize={optimize}{', ' + quantize if quantize else ''})")
    options = dict(filename=model_path, dtype=dtype, progress=progress, target_opset=opset,
                   optimize=False if optimize == "none" else optimize, quantize=quantize,
                   quantize_block_size=block_size, quantize_symmetric=symmetric)
    if capture_all_layers or not _export_two_layers(folder, model, config, task, with_cache, logits, options, say):
        to_onnx_from_checkpoint(folder, (), inputs, model=model, dynamic_shapes=dynamic_shapes, **options)
    del model
    cache = "in_place" if with_cache and cache_in_place and optimize == "onnxruntime" and \
        update_cache_in_place(model_path) else "concatenated"
    input_names, pairs = name_presents(model_path, optimum_names=True, mamba=is_mamba_config(config))
    copy_folder_files(folder, out_dir)
    generation = _generation_config(folder)
    genai = write_genai_config(out_dir, filename, config, generation, input_names, pairs,
                               share_buffer=cache == "in_place") if pairs else "the model has no cache"
    with open(os.path.join(out_dir, FOLDER_METADATA), "w", encoding="utf-8") as f:
        json.dump({"task": task, "decoder": filename, "dtype": str(dtype).replace("torch.", ""),
                   "optimize": optimize, "quantize": quantize, "block_size": block_size if quantize else None,
                   "symmetric": symmetric if quantize else None, "logits": logits,
                   "cache": cache if pairs else None, "source": os.path.basename(os.path.abspath(folder)),
                   # every state of the cache, input -> output (keys, values, convolution and recurrent states)
                   "cache_pairs": pairs,
                   # why onnxruntime-genai cannot run the folder (no genai_config.json), None when it can
                   "genai": genai}, f, indent=2)

    checks: list[FolderCheck] = []
    if validate:
        say("checking against eager float32" + (" (quantized: the differences are reported, not held to a "
                                                "tolerance)" if quantize else ""))
        if not progress:
            transformers.utils.logging.disable_progress_bar()
        try:
            eager = getattr(transformers, config.architectures[0]).from_pretrained(folder, dtype=torch.float32)
        finally:
            transformers.utils.logging.enable_progress_bar()
        eager.eval()
        eager.config.use_cache = with_cache
        input_sets, check_names = [inputs, inputs2], ["first input set", "second input set"]
        if cache == "in_place":
            input_sets, check_names = in_place_input_sets(input_sets, check_names)
        checks = check_against_eager(model_path, eager, input_sets, dtype, atol=atol, rtol=rtol)
        del eager
        if quantize:
            checks = [dataclasses.replace(c, ok=True, held=False) for c in checks]
    if logits == "last":  # checked with the logits of the last positions, then their last one apart
        split_verify_logits(model_path, VERIFY_TOKENS)
    if filename == DECODER_FILE:  # the weights' file as transformers.js names it (model.onnx_data), said in config.json
        write_transformersjs_config(out_dir, filename, rename_external_data(model_path, data_file_name(filename)))
    files = folder_files(out_dir)
    nbytes = sum(os.path.getsize(os.path.join(out_dir, f)) for f in files)
    return FolderExport(out_dir, task, dtype, files, nbytes, time.perf_counter() - begin, peak_rss(), checks, genai,
                        check_names if validate else None, quantize=quantize)


def _export_two_layers(folder: str, model: torch.nn.Module, config: Any, task: str, with_cache: bool, logits: str,
                       options: dict[str, Any], say: Any) -> bool:
    """Exports ``model`` captured with two decoder layers, the others stamped in ONNX
    (:mod:`fx2onnx.weights.repeat_layers`); False when its layers differ or their graphs do."""

    stack = layer_stack(model, config)
    if stack is None:
        return False
    short = short_config(config, stack.captured)
    short.use_cache = with_cache
    inputs, _, dynamic_shapes = task_inputs(short, task, with_cache=with_cache, dtype=options["dtype"])
    if logits == "last":
        last_logits_only(model, [inputs], dynamic_shapes, VERIFY_TOKENS)
    names = [n for n, _ in model.named_parameters(remove_duplicate=False) if n.startswith(stack.path + ".")]

    def weight(name: str) -> Any:
        if name not in weights:
            raise LayersNotRepeatable(f"{name} is not a parameter of the model read from the checkpoint")
        return weights[name]

    try:
        try:
            weights = checkpoint_weights(folder, model, options["dtype"], names=names)
        except KeyError as e:  # a parameter the checkpoint does not hold: the full capture says what to do
            raise LayersNotRepeatable(str(e)) from e
        to_onnx_from_checkpoint(folder, (), inputs, model=model_from_config(short, options["dtype"], folder),
                                dynamic_shapes=dynamic_shapes,
                                after_conversion=lambda onnx_model: stamp_layers(onnx_model, stack, weight),
                                **options)
    except LayersNotRepeatable as e:
        say(f"the layers were not copied from two captured ones ({e}): capturing all {stack.count}")
        return False
    say(f"captured {stack.captured} of the {stack.count} layers of {stack.path}, the others copied in ONNX")
    return True


def last_logits_only(model: torch.nn.Module, input_sets: list[dict[str, Any]], dynamic_shapes: dict[str, Any],
                     keep: int = 1) -> bool:
    """Makes the export of a causal LM compute the logits of the last ``keep`` positions only (all of
    a shorter input), when its ``forward`` takes transformers' ``logits_to_keep``: ``logits_to_keep=keep``
    is added to every input set (the export and the check against eager) and recorded as a constant in
    ``dynamic_shapes``. Generation reads nothing else; the head (a ``vocabulary x hidden`` product, a
    fifth of a Llama-3.2-1B's weights) then runs on ``keep`` positions of a prompt instead of every one,
    and on one of a decoding step. A folder keeps :data:`~fx2onnx.runtime.speculative.VERIFY_TOKENS`
    (16), then gives their last one apart as ``logits`` (:func:`fx2onnx.deploy.verify_logits.split_verify_logits`):
    onnxruntime-genai reads a ``logits`` output of static length 1 as last-token logits, a speculative
    loop verifies up to 15 candidates with the 16.
    Returns whether it applies (False: the model has no such argument, every position is kept)."""
    import inspect

    if "logits_to_keep" not in inspect.signature(model.forward).parameters:
        return False
    for inputs in input_sets:
        inputs["logits_to_keep"] = keep
    dynamic_shapes["logits_to_keep"] = torch.export.Dim.STATIC
    return True


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


def _export_pieces_folder(task: str, folder: str, out_dir: str, config: Any, dtype: torch.dtype, begin: float, *,
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
    facts = FolderFacts.of(task, config, dtype)
    family = choose_family(facts)
    pieces, make_pieces = family.export(folder, out_dir, config, dtype, options)
    split, extra, prefix = family.split, facts.generation, family.split == "prefix"
    copy_folder_files(folder, out_dir)
    if family.name == "encoder":  # one model under onnx/: transformers.js reads the weights' file config.json names
        write_transformersjs_config(out_dir, pieces[0].filename,
                                    os.path.isfile(os.path.join(out_dir, pieces[0].filename + "_data")))
    with open(os.path.join(out_dir, FOLDER_METADATA), "w", encoding="utf-8") as f:
        json.dump({"task": task, **({"split": split} if split else {}), **extra,
                   "pieces": {p.name: {"file": p.filename, "inputs": p.input_names, "outputs": p.output_names,
                                       "cache": p.cache,
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


def _generation_config(folder: str) -> Any:
    """The folder's generation config, or one made from its config."""
    import transformers

    if os.path.isfile(os.path.join(folder, "generation_config.json")):
        return transformers.GenerationConfig.from_pretrained(folder)
    return transformers.GenerationConfig.from_model_config(transformers.AutoConfig.from_pretrained(folder))
