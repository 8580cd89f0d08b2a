"""The text-generation family: a causal LM of a checkpoint folder exported as one decoder with its cache.

The decoder is captured with two of its layers and the others copied in ONNX when its layers are all the same module
(:mod:`fx2onnx.weights.repeat_layers`), computes the logits of the last positions only (:func:`last_logits_only`),
names its states as optimum and transformers.js name them and, at ``optimize="onnxruntime"``, updates its cache in
place. The folder export (:mod:`fx2onnx.deploy.export`) calls :func:`write_text_generation_folder` through the
family's entry in :data:`fx2onnx.deploy.families.FAMILIES`.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import shutil
import time
from typing import Any

import torch

from ..convert.errors import ConversionError, ExportError
from ..inputs.folder_inputs import NoCacheDecoding, task_inputs
from ..inputs.full_cache import whole_past
from ..inputs.model_cache import WHOLE_SEQUENCE, decode_step_refusal
from ..runtime.folder import DECODER_FILE, FOLDER_METADATA
from ..runtime.speculative import VERIFY_TOKENS
from ..weights import checkpoint_weights, to_onnx_from_checkpoint
from ..weights.export import model_from_checkpoint_config, model_from_config
from ..weights.repeat_layers import (
    LayersNotRepeatable,
    adopt_layer_attributes,
    layer_stack,
    short_config,
    stamp_layers,
)
from .cache_names import is_mamba_config
from .check import FolderCheck, check_against_eager, in_place_input_sets
from .files import copy_folder_files
from .genai_config import write_genai_config
from .mtp import export_mtp, mtp_layers
from .result import FolderExport, config_error, folder_files, peak_rss
from .saved_model import name_presents, rename_external_data, update_cache_in_place
from .transformersjs import data_file_name, transformersjs_dtype, variant_file, write_transformersjs_config
from .verify_logits import split_verify_logits


def write_text_generation_folder(folder: str, out_dir: str, filename: str, config: Any, task: str, dtype: torch.dtype,
                                 begin: float, say: Any, *, with_cache: bool, **options: Any) -> FolderExport:
    """Writes the export of the causal LM of ``folder`` into the folder ``out_dir`` (the temporary folder of
    :func:`fx2onnx.deploy.export.export_folder`): one decoder with its cache at ``filename``, its states named as
    optimum names them, the folder's files copied, ``genai_config.json`` where onnxruntime-genai runs it and
    ``fx2onnx.json``; checked against eager float32 when ``validate``. A model which cannot decode new tokens after
    a cache (:class:`fx2onnx.inputs.folder_inputs.NoCacheDecoding`: OpenAI GPT, XLNet, RWKV...) is exported without
    one, said in a line: its folder's loop runs the whole sequence at every step."""
    try:
        return _write_decoder_folder(folder, out_dir, filename, config, task, dtype, begin, say,
                                     with_cache=with_cache, **options)
    except NoCacheDecoding as e:
        if not with_cache:
            raise
        other = _generation_inputs_beyond_the_sequence(config)
        if other:  # the loop without a cache would not give transformers' tokens
            raise ValueError(f"{e}, and {other}: a folder without one would not give its tokens") from None
        say(f"{e}: exported without a cache, its loop runs the whole sequence at every step")
    for name in os.listdir(out_dir):  # what the attempt with a cache wrote (out_dir is the export's own staging)
        path = os.path.join(out_dir, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    config.use_cache = False
    return _write_decoder_folder(folder, out_dir, filename, config, task, dtype, begin, say, with_cache=False,
                                 **options)


def _generation_inputs_beyond_the_sequence(config: Any) -> str | None:
    """What transformers' ``generate`` feeds the model of ``config`` beyond the tokens so far (XLM appends a mask
    token, XLNet a permutation mask and a target mapping), read from its ``prepare_inputs_for_generation`` on the
    meta device; None when it feeds the sequence, its mask and positions only."""
    import transformers  # deferred: heavy

    cls = getattr(transformers, (getattr(config, "architectures", None) or [""])[0], None)
    if cls is None:
        return None
    with torch.device("meta"):
        model = cls(config)
    ids = torch.ones((1, 4), dtype=torch.int64)
    try:
        fed = model.prepare_inputs_for_generation(ids, attention_mask=torch.ones_like(ids), use_cache=False)
    except Exception as e:  # noqa: BLE001 - the model's code raises what it raises
        return f"its generate's inputs could not be read ({type(e).__name__})"
    if not isinstance(fed.get("input_ids"), torch.Tensor) or not torch.equal(fed["input_ids"].cpu(), ids):
        return "its generate changes the tokens it feeds the model"
    extra = sorted(k for k, v in fed.items() if isinstance(v, torch.Tensor)
                   and k not in ("input_ids", "attention_mask", "position_ids", "token_type_ids", "cache_position"))
    return f"its generate feeds it {', '.join(extra)} too" if extra else None


def _write_decoder_folder(folder: str, out_dir: str, filename: str, config: Any, task: str, dtype: torch.dtype,
                          begin: float, say: Any, *, with_cache: bool, optimize: str, quantize: str | None,
                          block_size: int, symmetric: bool, opset: int | None, all_logits: bool, cache_in_place: bool,
                          capture_all_layers: bool, validate: bool, atol: float, rtol: float,
                          progress: bool) -> FolderExport:
    """:func:`write_text_generation_folder` with or without the cache, as ``with_cache`` says."""
    import transformers

    model_path = os.path.join(out_dir, filename)
    config.use_cache = with_cache
    os.makedirs(os.path.dirname(model_path), exist_ok=True)
    try:  # a value of config.json (a size of 0, a negative count) may not build a model
        inputs, inputs2, dynamic_shapes = task_inputs(config, task, with_cache=with_cache, dtype=dtype)
        # sliding-window layers over the whole past, the window applied by the mask (False: no sliding layer, or
        # states other than keys and values, kept as the model's cache has them)
        whole = with_cache and whole_past([inputs, inputs2], dynamic_shapes, config)
        model = model_from_checkpoint_config(folder, dtype)
    except (ValueError, FileNotFoundError):
        raise
    except Exception as e:  # noqa: BLE001 - the model's constructor raises what its code raises
        raise config_error(folder, "does not build its model", e) from None
    model.config.use_cache = with_cache
    logits = "all"
    if with_cache and not all_logits and last_logits_only(model, [inputs, inputs2], dynamic_shapes, VERIFY_TOKENS):
        logits = "last"
    say(f"exporting {config.architectures[0]} ({task}{', with its cache' if with_cache else ''}, "
        f"{str(dtype).replace('torch.', '')}, optimize={optimize}{', ' + quantize if quantize else ''})")
    options = dict(filename=model_path, dtype=dtype, progress=progress, target_opset=opset,
                   optimize=False if optimize == "none" else optimize, quantize=quantize,
                   quantize_block_size=block_size, quantize_symmetric=symmetric)
    try:
        # without gradients, as a user runs it: a region toggling them (Llama 4's complex rotary embedding under
        # no_grad) is then no higher-order operator holding complex values
        with torch.no_grad():
            if capture_all_layers or not _export_two_layers(folder, model, config, task, with_cache, logits,
                                                            options, say):
                to_onnx_from_checkpoint(folder, (), inputs, model=model, dynamic_shapes=dynamic_shapes, **options)
    except ExportError:
        # a model whose forward does not decode new tokens from its cache (CPM-Ant, ProphetNet): that line
        refusal = decode_step_refusal(config) if with_cache else None
        if refusal and WHOLE_SEQUENCE in refusal:  # transformers' generate feeds it so: no folder reproduces it
            raise ValueError(refusal) from None
        if refusal:
            raise NoCacheDecoding(refusal) from None
        raise
    except (ValueError, OSError, ConversionError, KeyboardInterrupt, MemoryError):
        raise  # OSError: a full disk or a file size limit is said by the folder's writer, not a bug
    except Exception as e:  # noqa: BLE001 - the model's or a library's code raises what it raises: one line
        raise unexpected_error(config.architectures[0], e) from e
    del model
    cache = "in_place" if with_cache and cache_in_place and optimize == "onnxruntime" and \
        update_cache_in_place(model_path) else "concatenated"
    input_names, pairs = name_presents(model_path, optimum_names=True, mamba=is_mamba_config(config))
    copy_folder_files(folder, out_dir)
    generation = generation_config(folder)
    genai = write_genai_config(out_dir, filename, config, generation, input_names, pairs,
                               share_buffer=cache == "in_place", cache_cut_to_window=not whole) \
        if pairs else "the model has no cache"
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
    if with_cache and mtp_layers(folder, config):  # the checkpoint's multi-token-prediction head
        say("exporting its multi-token-prediction head (onnx/mtp.onnx)")
        export_mtp(folder, out_dir, model_path)
    if filename == variant_file(DECODER_FILE, quantize, str(dtype)):  # onnx/model.onnx, model_q4.onnx...: the weights'
        # file as transformers.js names it (model.onnx_data), said in config.json with the dtype selecting the file
        write_transformersjs_config(out_dir, filename, rename_external_data(model_path, data_file_name(filename)),
                                    transformersjs_dtype(quantize, str(dtype)))
    files = folder_files(out_dir)
    nbytes = sum(os.path.getsize(os.path.join(out_dir, f)) for f in files)
    return FolderExport(out_dir, task, dtype, files, nbytes, time.perf_counter() - begin, peak_rss(), checks, genai,
                        check_names if validate else None, quantize=quantize)


def unexpected_error(name: str, error: BaseException) -> ValueError:
    """The one line saying that the export of the model ``name`` stopped on an error nothing expected (a bug of the
    model's code or of fx2onnx): its type and first line (``FX2ONNX_TRACEBACK=1`` shows where)."""
    reason = str(error).splitlines()[0][:200] if str(error) else ""
    return ValueError(f"the export of {name} stopped on {type(error).__name__}: {reason} (a bug: "
                      "FX2ONNX_TRACEBACK=1 shows where)")


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
    if with_cache:
        whole_past([inputs], dynamic_shapes, short)
    if logits == "last":
        last_logits_only(model, [inputs], dynamic_shapes, VERIFY_TOKENS)
    state = model.state_dict()  # parameters and persistent buffers (DeepSeek's e_score_correction_bias)
    names = [n for n in state if n.startswith(stack.path + ".")]

    def weight(name: str) -> Any:
        return weights[name]  # KeyError: a buffer the constructor computes (stamp_layers shares it if it can)

    try:
        try:
            weights = checkpoint_weights(folder, model, options["dtype"], names=names)
        except KeyError as e:  # a parameter the checkpoint does not hold: the full capture says what to do
            raise LayersNotRepeatable(str(e)) from e
        short_model = model_from_config(short, options["dtype"], folder)
        _same_weights_outside(short_model, model, stack.path)
        adopt_layer_attributes(short_model, model, stack)  # a constant derived from the number of layers
        to_onnx_from_checkpoint(folder, (), inputs, model=short_model,
                                dynamic_shapes=dynamic_shapes,
                                after_conversion=lambda onnx_model: stamp_layers(onnx_model, stack, weight),
                                **options)
    except LayersNotRepeatable as e:
        say(f"the layers were not copied from two captured ones ({e}): capturing all {stack.count}")
        return False
    say(f"captured {stack.captured} of the {stack.count} layers of {stack.path}, the others copied in ONNX")
    return True


def _same_weights_outside(short_model: torch.nn.Module, model: torch.nn.Module, path: str) -> None:
    """Raises :class:`LayersNotRepeatable` when a weight outside the layers of ``path`` has another shape in the short
    model than in the full one: it depends on the number of layers (Gemma 3n's per-layer embeddings, one slice per
    layer), the short model cannot read the checkpoint's."""
    full = {name: tuple(t.shape) for name, t in model.state_dict().items() if not name.startswith(path + ".")}
    for name, tensor in short_model.state_dict().items():
        if name in full and tuple(tensor.shape) != full[name]:
            raise LayersNotRepeatable(f"{name} has the shape {list(tensor.shape)} with fewer layers, "
                                      f"{list(full[name])} with all: it depends on their number")


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
    if "logits_to_keep" not in inspect.signature(model.forward).parameters:
        return False
    for inputs in input_sets:
        inputs["logits_to_keep"] = keep
    dynamic_shapes["logits_to_keep"] = torch.export.Dim.STATIC
    return True


def generation_config(folder: str) -> Any:
    """The folder's generation config, or one made from its config."""
    import transformers

    if os.path.isfile(os.path.join(folder, "generation_config.json")):
        return transformers.GenerationConfig.from_pretrained(folder)
    return transformers.GenerationConfig.from_model_config(transformers.AutoConfig.from_pretrained(folder))
