"""The ``transformers.js_config`` block of a folder's ``config.json``: what transformers.js needs beyond the config.

transformers.js (``@huggingface/transformers``) loads ``onnx/model.onnx`` and, only when the config says so, its
weights' file ``onnx/model.onnx_data`` (``use_external_data_format``: in the browser, onnxruntime-web is given the
bytes of each file it names; in Node, onnxruntime-node reads the file the graph names). It reads the types and
shapes of the cache from the session, so nothing else is needed for a decoder run on the CPU. Its tokenizer reads
``clean_up_tokenization_spaces`` as true when ``tokenizer_config.json`` does not say it, transformers 5 as false
(``" ,"`` decoded ``","``): :func:`write_transformersjs_config` writes transformers' value. It reads a processor from
``preprocessor_config.json`` and a tokenizer from ``tokenizer.json`` only: :func:`write_preprocessor_config` and
:func:`write_ctc_tokenizer_json` write them where transformers 5 saved them otherwise.

transformers.js names a decoder's cache inputs from ``config.json`` (``getCacheNames`` of its ``configs.js``), not
from the session, so the config is written as it reads it where transformers reads the same configuration from it
(:func:`transformersjs_config_json`): the Mamba layers of Granite 4 hybrids and Nemotron-H under their transformers 4
names (``mamba``, ``attention``), and no ``multi_query`` where it is the default of the configuration class (GPTBigCode,
Falcon: transformers.js would feed the fused ``key_value`` cache of optimum's exports for transformers < 4.54, ours
and optimum's since keep keys and values apart). A cache it feeds under no name the folder has is refused
(:func:`transformersjs_cache_refusal`): the reason is written in ``fx2onnx.json`` (``transformersjs``) and no
``transformers.js_config`` block promises the folder to it.

.. code-block:: python

    from fx2onnx.deploy.transformersjs import write_transformersjs_config

    write_transformersjs_config("qwen3_onnx", "onnx/model.onnx", external_data=True)
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Iterable

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

#: the model types whose layer kinds transformers.js reads under transformers 4's names (``mamba``, ``attention``),
#: which transformers 5 reads back as its own (``linear_attention``, ``full_attention``: its
#: ``remap_legacy_layer_types``)
LEGACY_LAYER_TYPE_MODELS = ("granitemoehybrid", "falcon_h1", "nemotron_h")
_LEGACY_LAYER_TYPES = {"linear_attention": "mamba", "full_attention": "attention"}
#: the decoder-only model types transformers.js counts the layers of only as encoder-decoders (its normalized config
#: has ``num_decoder_layers`` and no ``num_layers``): it feeds their cache nothing
DECODER_LAYERS_ONLY_MODELS = ("mbart", "trocr")
#: the names of the cache inputs transformers.js feeds (``getCacheNames``; keys and values, the states of hybrids)
_FED_NAME = re.compile(r"^(past_key_values\.\d+\.(key|value)|past_(conv|ssm|recurrent|compressor|indexer)\.\d+.*)$")


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


def _class_default(model_type: str | None, key: str) -> Any:
    """The value transformers' configuration class of ``model_type`` takes when ``key`` is missing (None: unknown)."""
    try:
        import transformers

        return getattr(transformers.CONFIG_MAPPING[model_type](), key, None)
    except Exception:  # noqa: BLE001 - a type transformers does not list, a class that needs arguments
        return None


def transformersjs_config_json(config: dict[str, Any]) -> dict[str, Any]:
    """``config.json`` as transformers.js reads it, the same configuration for transformers: the text sizes of
    :data:`FLAT_TEXT_MODEL_TYPES` at the top, the layer kinds of :data:`LEGACY_LAYER_TYPE_MODELS` under transformers
    4's names, and ``multi_query`` left out where it is the default of its configuration class (transformers.js
    reads it as the fused ``key_value`` cache, which our folders do not have)."""
    config = dict(config)
    model_type = config.get("model_type")
    if model_type in FLAT_TEXT_MODEL_TYPES:  # the text sizes where transformers.js reads them
        config.update({k: config["text_config"][k] for k in FLAT_TEXT_KEYS if k in config.get("text_config", {})})
    if model_type in LEGACY_LAYER_TYPE_MODELS:
        for key in ("layer_types", "layers_block_type"):
            if isinstance(config.get(key), list):
                config[key] = [_LEGACY_LAYER_TYPES.get(t, t) for t in config[key]]
    if config.get("multi_query") and _class_default(model_type, "multi_query") is True:
        del config["multi_query"]
    return config


def transformersjs_cache_refusal(config: dict[str, Any], cache_inputs: Iterable[str]) -> str | None:
    """Why transformers.js (4.3) cannot feed the cache inputs ``cache_inputs`` of a decoder of ``config`` (the
    ``config.json`` it reads, :func:`transformersjs_config_json`), in one line; None where it feeds them."""
    names = list(cache_inputs)
    model_type = config.get("model_type")
    if not names:
        return None
    if model_type in DECODER_LAYERS_ONLY_MODELS and not config.get("is_encoder_decoder"):
        return (f"transformers.js feeds a decoder-only {model_type} no cache (it counts this type's layers for an "
                "encoder-decoder only)")
    if config.get("multi_query"):
        return ("transformers.js reads multi_query as one fused key_value cache input per layer; this folder keeps "
                "keys and values apart")
    if model_type == "zaya":  # its getCacheNames: layers 0, cca_time1, 2 * cca_time1... with two states each
        stride = config.get("cca_time1") or 1
        states = next((n for n in names if not n.endswith((".key", ".value"))), names[0])
        return ("transformers.js feeds zaya's cache as past_key_values.N.key/value/conv_state/shift_state of "
                f"layers 0, {stride}, {2 * stride}... (cca_time1 = {stride} apart); this folder caches every layer, "
                f"its states named as {states}")
    unfed = [n for n in names if not _FED_NAME.match(n)]
    if unfed:
        return (f"transformers.js feeds no cache input named {unfed[0]} ({len(unfed)} of {len(names)} inputs of "
                f"{model_type}'s cache: it feeds keys and values, convolution and recurrent states)")
    return None


def write_transformersjs_config(out_dir: str | os.PathLike, model_file: str, external_data: bool,
                                dtype: str | None = "fp32") -> str | None:
    """Adds the ``transformers.js_config`` block to ``config.json`` in ``out_dir`` (nothing when it has none) for the
    decoder ``model_file`` (relative to ``out_dir``); a block already there keeps its other keys. ``dtype`` (of
    :func:`transformersjs_dtype`) is the one transformers.js loads by default (its own default is ``q8`` in the
    browser, a file we do not write for float32); None leaves it out. A ``tokenizer_config.json`` without
    ``clean_up_tokenization_spaces`` gets transformers' default (false). ``config.json`` is written as
    transformers.js reads it (:func:`transformersjs_config_json`); a decoder whose cache transformers.js cannot feed
    (the ``cache_pairs`` of ``fx2onnx.json``, :func:`transformersjs_cache_refusal`) gets no block and the reason in
    ``fx2onnx.json`` (``transformersjs``), which this returns (None: the block is written)."""
    _tokenizer_defaults(os.path.join(os.fspath(out_dir), "tokenizer_config.json"))
    write_preprocessor_config(out_dir)
    write_ctc_tokenizer_json(out_dir)
    path = os.path.join(os.fspath(out_dir), "config.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        config = transformersjs_config_json(json.load(f))
    refusal = _record_refusal(out_dir, config)
    if refusal:
        config.pop(BLOCK, None)
        _write_json(path, config)
        return refusal
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
    _write_json(path, config)
    return None


def pieces_refusal(model_type: str | None, files: list[str]) -> str | None:
    """Why transformers.js cannot run a folder of pieces whose weights' ``files`` (relative to the folder) hold none
    under ``onnx/``, the only files it loads (an image-text family without its split,
    :mod:`fx2onnx.deploy.transformersjs_split`), in one line; None where one is there."""
    if any(f.startswith("onnx/") for f in files):
        return None
    return (f"this {model_type} folder holds none of the files transformers.js loads (onnx/...): the split it "
            f"reads for this family is not written")


def folder_refusal(folder: str | os.PathLike) -> str | None:
    """Why an exported folder says transformers.js cannot run it (``transformersjs`` in its ``fx2onnx.json``, written
    by :func:`write_transformersjs_config`), None where it does not say so."""
    path = os.path.join(os.fspath(folder), "fx2onnx.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("transformersjs")


def _record_refusal(out_dir: str | os.PathLike, config: dict[str, Any]) -> str | None:
    """Why transformers.js cannot feed the cache of the decoder described by the folder's ``fx2onnx.json``,
    written there as ``transformersjs`` (None: it can, or the folder has no such decoder)."""
    path = os.path.join(os.fspath(out_dir), "fx2onnx.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        metadata = json.load(f)
    if metadata.get("task") != "text-generation" or not metadata.get("cache_pairs"):
        return None
    refusal = transformersjs_cache_refusal(config, metadata["cache_pairs"])
    if refusal:
        metadata["transformersjs"] = refusal
        _write_json(path, metadata)
    return refusal


def _write_json(path: str, content: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(content, f, indent=2)
        f.write("\n")


#: the blocks of ``processor_config.json`` holding what ``preprocessor_config.json`` holds on its own
_PREPROCESSOR_BLOCKS = ("feature_extractor", "image_processor")


def write_preprocessor_config(out_dir: str | os.PathLike) -> str | None:
    """Writes ``preprocessor_config.json`` in ``out_dir`` from the feature extractor or image processor that
    transformers 5 saves inside ``processor_config.json`` (a wav2vec2's processor: its ``feature_extractor`` block),
    where the folder has no ``preprocessor_config.json``: transformers.js reads that file only (its audio pipelines
    find no feature extractor otherwise); transformers reads both, the same values. Returns the file written (None:
    nothing to write)."""
    target = os.path.join(os.fspath(out_dir), "preprocessor_config.json")
    source = os.path.join(os.fspath(out_dir), "processor_config.json")
    if os.path.isfile(target) or not os.path.isfile(source):
        return None
    with open(source, encoding="utf-8") as f:
        processor = json.load(f)
    blocks = [processor[k] for k in _PREPROCESSOR_BLOCKS if isinstance(processor.get(k), dict)]
    if len(blocks) != 1:  # none, or two (an image processor and a feature extractor): no single file holds them
        return None
    _write_json(target, blocks[0])  # no processor_class: transformers.js would then look for the tokenizer too
    return target


#: the tokenizer classes of CTC speech recognizers, saved as ``vocab.json`` only (no fast tokenizer)
CTC_TOKENIZERS = ("Wav2Vec2CTCTokenizer",)


def write_ctc_tokenizer_json(out_dir: str | os.PathLike) -> str | None:
    """Writes ``tokenizer.json`` in ``out_dir`` for a CTC tokenizer saved as ``vocab.json`` (a wav2vec2's, class in
    :data:`CTC_TOKENIZERS`), where the folder has none: transformers.js reads that file only. Its vocabulary and the
    CTC decoder (repeats merged, pads dropped, the delimiter read as a space); no token special: transformers'
    speech recognition pipeline decodes CTC ids keeping ``<s>``, ``</s>`` and ``<unk>``, and transformers.js drops
    the special tokens it is told of. transformers keeps reading ``vocab.json`` (its class has no fast tokenizer).
    Returns the file written (None: nothing to write)."""
    folder = os.fspath(out_dir)
    target, vocab_path = os.path.join(folder, "tokenizer.json"), os.path.join(folder, "vocab.json")
    config_path = os.path.join(folder, "tokenizer_config.json")
    if os.path.isfile(target) or not os.path.isfile(vocab_path) or not os.path.isfile(config_path):
        return None
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    if config.get("tokenizer_class") not in CTC_TOKENIZERS:
        return None
    with open(vocab_path, encoding="utf-8") as f:
        vocab = json.load(f)
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        return None  # a vocabulary per language (target_lang): no single one to write
    import tokenizers

    unk, pad = config.get("unk_token", "<unk>"), config.get("pad_token", "<pad>")
    delimiter = config.get("word_delimiter_token", "|")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token=unk))
    tokenizer.decoder = tokenizers.decoders.CTC(pad_token=pad, word_delimiter_token=delimiter, cleanup=True)
    tokenizer.save(target)
    return target


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
