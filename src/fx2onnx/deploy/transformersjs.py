"""The ``transformers.js_config`` block of a folder's ``config.json``: what transformers.js needs beyond the config.

transformers.js (``@huggingface/transformers``) loads ``onnx/model.onnx`` and, only when the config says so, its
weights' file ``onnx/model.onnx_data`` (``use_external_data_format``: in the browser, onnxruntime-web is given the
bytes of each file it names; in Node, onnxruntime-node reads the file the graph names). It reads the types and
shapes of the cache from the session, so nothing else is needed for a decoder run on the CPU. Its tokenizer reads
``clean_up_tokenization_spaces`` as true when ``tokenizer_config.json`` does not say it, transformers 5 as false
(``" ,"`` decoded ``","``): :func:`write_transformersjs_config` writes transformers' value.

.. code-block:: python

    from fx2onnx.deploy.transformersjs import write_transformersjs_config

    write_transformersjs_config("qwen3_onnx", "onnx/model.onnx", external_data=True)
"""

from __future__ import annotations

import json
import os

#: the key transformers.js reads in config.json
BLOCK = "transformers.js_config"


#: the suffix of the file name transformers.js loads for each of its ``dtype`` values (``model_q4.onnx``), and the dtype
#: of a folder: (the weights' quantization, their type) -> its ``dtype``
DTYPE_SUFFIXES = {"fp32": "", "fp16": "_fp16", "q8": "_quantized", "q4": "_q4", "q4f16": "_q4f16"}
_DTYPES = {(None, "float32"): "fp32", (None, "float16"): "fp16", ("int8", "float32"): "q8", ("int4", "float32"): "q4",
           ("int4", "float16"): "q4f16"}


#: the model types whose text sizes transformers.js reads at the top of config.json (transformers 4's Qwen2-VL
#: configuration), where transformers 5 writes them in ``text_config`` only: the cache it creates has their sizes
FLAT_TEXT_MODEL_TYPES = ("qwen2_vl",)
FLAT_TEXT_KEYS = ("num_hidden_layers", "num_key_value_heads", "num_attention_heads", "hidden_size", "head_dim")


def transformersjs_dtype(quantize: str | None, dtype: str) -> str | None:
    """The ``dtype`` transformers.js loads a folder of these weights with (``q4`` for int4 matrices and float32
    elsewhere), None where it has none: bfloat16 (onnxruntime-node and onnxruntime-web run no bfloat16 model),
    int8 matrices in float16."""
    return _DTYPES.get((quantize, dtype.replace("torch.", "")))


def transformersjs_refusal(quantize: str | None, dtype: str) -> str | None:
    """Why transformers.js cannot run a folder of these weights, in one line (None: it runs it). Measured with
    transformers.js 4.3.2: onnxruntime-node 1.30 refuses a bfloat16 model when it opens it (``Unsupported data type:
    16``, the type of its inputs and outputs), and onnxruntime-web has no bfloat16 kernels."""
    if transformersjs_dtype(quantize, dtype) is not None:
        return None
    if "bfloat16" in dtype:
        return ("it cannot run bfloat16 weights (onnxruntime-node and onnxruntime-web have no bfloat16 tensors); "
                "export with --dtype float32 (or float16) for it")
    return f"it selects no file for {quantize} matrices in {dtype.replace('torch.', '')}; export float32 or int4 for it"


def variant_file(model_file: str, quantize: str | None, dtype: str) -> str:
    """The name transformers.js selects for these weights: ``onnx/model.onnx`` -> ``onnx/model_q4.onnx`` for int4
    matrices, ``model_quantized.onnx`` for int8, ``model_fp16.onnx`` in float16; unchanged for float32 and for the
    weights transformers.js cannot run (bfloat16)."""
    found = transformersjs_dtype(quantize, dtype)
    if not found or not DTYPE_SUFFIXES[found]:
        return model_file
    root, ext = os.path.splitext(model_file)
    return root + DTYPE_SUFFIXES[found] + ext


def data_file_name(model_file: str) -> str:
    """The name transformers.js gives the weights' file of ``model_file``: ``model.onnx`` -> ``model.onnx_data``."""
    return os.path.basename(model_file) + "_data"


def write_transformersjs_config(out_dir: str | os.PathLike, model_file: str, external_data: bool,
                                dtype: str | None = "fp32") -> None:
    """Adds the ``transformers.js_config`` block to ``config.json`` in ``out_dir`` (nothing when it has none) for the
    decoder ``model_file`` (relative to ``out_dir``); a block already there keeps its other keys. ``dtype`` (of
    :func:`transformersjs_dtype`) is the one transformers.js loads by default (its own default is ``q8`` in the
    browser, a file we do not write for float32); None leaves it out. A ``tokenizer_config.json`` without
    ``clean_up_tokenization_spaces`` gets transformers' default (false)."""
    _tokenizer_defaults(os.path.join(os.fspath(out_dir), "tokenizer_config.json"))
    path = os.path.join(os.fspath(out_dir), "config.json")
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    block = dict(config.get(BLOCK) or {})
    files = dict(block.get("use_external_data_format") or {}) if isinstance(block.get("use_external_data_format"),
                                                                            dict) else {}
    name = os.path.basename(model_file)
    if external_data:
        files[name] = 1  # one data file: model.onnx_data
    else:
        files.pop(name, None)
    block["use_external_data_format"] = files
    if dtype:
        block["dtype"] = dtype
    config[BLOCK] = block
    if config.get("model_type") in FLAT_TEXT_MODEL_TYPES:  # the text sizes where transformers.js reads them
        config.update({k: config["text_config"][k] for k in FLAT_TEXT_KEYS if k in config.get("text_config", {})})
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def _tokenizer_defaults(path: str) -> None:
    """Writes in the tokenizer's config the values transformers takes by default and transformers.js does not."""
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    if "clean_up_tokenization_spaces" in config:
        return
    config["clean_up_tokenization_spaces"] = False
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
