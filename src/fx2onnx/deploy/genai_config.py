"""``genai_config.json``: the description onnxruntime-genai reads to run a decoder of a folder.

onnxruntime-genai (``onnxruntime_genai.Model(folder)``) feeds a decoder ``input_ids``,
``attention_mask`` (``(batch, past + new)``), ``position_ids`` and one key and one value per
layer, ``(batch, kv_heads, past, head_dim)``, found by name patterns with ``%d`` for the
layer; it reads ``logits`` and the present keys and values. The names of a model
:func:`fx2onnx.to_onnx` exported are written in those patterns; a cache it cannot describe
(a sliding window cut in the graph, the states of a recurrent layer) gives no config and the reason.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..formats import FOLDER_METADATA
from ..runtime.integrity import folder_manifest

#: the names of a DynamicCache's inputs as to_onnx names them (the folders of the previous layout kept them)
_PAST = re.compile(r"^past_key_values_(key|value)_(\d+)$")
#: the names of the folders' cache inputs, as optimum and transformers.js name them
_OPTIMUM_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
PRESENT_PREFIX = "present"


def optimum_name(past: str) -> str:
    """The name optimum and transformers.js give a cache input: ``past_key_values_key_3`` ->
    ``past_key_values.3.key``; another name is returned as it is."""
    match = _PAST.match(past)
    return f"past_key_values.{match.group(2)}.{match.group(1)}" if match else past


def present_name(past: str) -> str:
    """The name of the output paired with the cache input ``past``: ``past_key_values.3.key``
    -> ``present.3.key`` (optimum's names), ``past_key_values_key_3`` -> ``present_key_3``."""
    return PRESENT_PREFIX + past[len("past_key_values"):] if past.startswith("past_key_values") else "present_" + past


def genai_decoder_names(inputs: list[str], pairs: dict[str, str], num_layers: int) -> tuple[dict, dict] | str:
    """The ``inputs`` and ``outputs`` sections of the decoder, or why onnxruntime-genai cannot
    run it (a string). The cache is named as optimum names it (``past_key_values.%d.key``) or as
    :func:`fx2onnx.to_onnx` does (``past_key_values_key_%d``)."""
    layers: dict[str, set[int]] = {"key": set(), "value": set()}
    optimum = all(_OPTIMUM_PAST.match(name) for name in pairs)
    for name in pairs:
        match = _OPTIMUM_PAST.match(name) if optimum else _PAST.match(name)
        if match is None:
            return (f"the cache input {name!r} is neither a key nor a value of a layer (onnxruntime-genai reads "
                    "one key and one value per layer)")
        layer, kind = (match.group(1), match.group(2)) if optimum else (match.group(2), match.group(1))
        layers[kind].add(int(layer))
    expected = set(range(num_layers))
    if layers["key"] != expected or layers["value"] != expected:
        return f"the cache has keys of layers {sorted(layers['key'])}, onnxruntime-genai expects 0 to {num_layers - 1}"
    for name, output in pairs.items():
        if output != present_name(name):
            return f"the output paired with {name!r} is {output!r}, not {present_name(name)!r}"
    section_in = {"input_ids": "input_ids"}
    for name in ("attention_mask", "position_ids"):
        if name in inputs:
            section_in[name] = name
    key, value = ("past_key_values.%d.key", "past_key_values.%d.value") if optimum else \
        ("past_key_values_key_%d", "past_key_values_value_%d")
    section_in.update(past_key_names=key, past_value_names=value)
    section_out = {"logits": "logits", "present_key_names": present_name(key),
                   "present_value_names": present_name(value)}
    return section_in, section_out


def sliding_window(text: Any) -> int | None:
    """The window of the sliding-window layers of a decoder's config (Gemma 2 and 3's ``layer_types``, Mistral's
    ``sliding_window``, Qwen's when ``use_sliding_window``), None when every layer sees the whole context."""
    window = getattr(text, "sliding_window", None)
    if not window:
        return None
    types = getattr(text, "layer_types", None)
    if types:
        return int(window) if any("sliding" in str(t) for t in types) else None
    return int(window) if getattr(text, "use_sliding_window", True) else None


def _token(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return list(value) if len(value) > 1 else (value[0] if value else None)
    return value


def write_genai_config(
    out: str | os.PathLike, filename: str, config: Any, generation: Any, inputs: list[str], pairs: dict[str, str],
    share_buffer: bool = False, cache_cut_to_window: bool = False,
) -> str | None:
    """Writes ``genai_config.json`` in ``out`` for the decoder ``filename``; returns None, or
    the reason no config was written.

    :param config: the transformers config of the model (its text config for a multimodal one)
    :param generation: its :class:`transformers.GenerationConfig` (end of sequence, sampling)
    :param inputs: the input names of the ONNX model
    :param pairs: cache input name -> output name (the model's ``fx2onnx.cache`` metadata)
    :param share_buffer: the model updates its cache in place (``GroupQueryAttention``, see
        :mod:`fx2onnx.optimizer.rules.cache_in_place`): onnxruntime-genai binds each past and
        present to one buffer
    :param cache_cut_to_window: the sliding-window layers keep only their window in the graph (their present is
        shorter than genai's buffer: no config); a folder's decoder holds the whole past in every layer, the
        window applied by the mask (:mod:`fx2onnx.inputs.full_cache`), which genai runs
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    window = sliding_window(text)
    if window is not None and cache_cut_to_window:
        # the graph keeps the last tokens of the window in the cache: its present is shorter than genai's buffer
        return (f"the decoder has sliding-window layers (a window of {window} tokens, the cache cut to it in the "
                "graph): onnxruntime-genai fails once the text is longer")
    layers = int(text.num_hidden_layers)
    names = genai_decoder_names(inputs, pairs, layers)
    if isinstance(names, str):
        return names
    eos = getattr(generation, "eos_token_id", None)
    eos = _token(eos if eos is not None else getattr(text, "eos_token_id", None))  # 0 is a token
    pad = getattr(generation, "pad_token_id", None)
    if eos is None:  # onnxruntime-genai refuses a null or a token outside the vocabulary
        return ("the model has no end-of-sequence token (onnxruntime-genai needs one of its vocabulary): set "
                "eos_token_id in generation_config.json")
    heads = int(text.num_attention_heads)
    context = int(getattr(text, "max_position_embeddings", 0) or 4096)
    sample = bool(getattr(generation, "do_sample", False))
    pad = _token(pad if pad is not None else getattr(text, "pad_token_id", None))
    try:
        head_size = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
        kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    except Exception as e:  # noqa: BLE001 - a per-layer attribute raises its own error (Gemma 4's head sizes)
        return (f"the decoder's layers differ in their attention sizes ({type(e).__name__}): onnxruntime-genai "
                "describes one head size and one count of key/value heads for every layer")
    genai = {
        "model": {
            "bos_token_id": _token(getattr(generation, "bos_token_id", None)),
            "context_length": context,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": filename,
                "head_size": head_size,
                "hidden_size": int(text.hidden_size),
                "inputs": names[0],
                "outputs": names[1],
                "num_attention_heads": heads,
                "num_hidden_layers": layers,
                "num_key_value_heads": kv_heads,
            },
            "eos_token_id": eos,
            "pad_token_id": pad if pad is not None else (eos[0] if isinstance(eos, list) else eos),
            # the graph holds everything the architecture does: onnxruntime-genai's generic decoder runs it
            "type": "decoder",
            "vocab_size": int(text.vocab_size),
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": sample,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": context,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            # True: GroupQueryAttention writes the new keys into the past's buffer; False: the model
            # concatenates the past and the new keys, no buffer shared between them
            "past_present_share_buffer": bool(share_buffer),
            "repetition_penalty": float(getattr(generation, "repetition_penalty", None) or 1.0),
            "temperature": float(getattr(generation, "temperature", None) or 1.0),
            "top_k": int(getattr(generation, "top_k", None) or 50) if sample else 1,
            "top_p": float(getattr(generation, "top_p", None) or 1.0),
        },
    }
    if genai["model"]["bos_token_id"] is None:  # onnxruntime-genai reads a number or nothing
        del genai["model"]["bos_token_id"]
    with open(os.path.join(out, "genai_config.json"), "w", encoding="utf-8") as f:
        json.dump(genai, f, indent=2)
    return None



#: the name of a draft model's decoder copied into a folder (:func:`write_genai_speculative`)
DRAFT_FILENAME = "draft.onnx"


def write_genai_speculative(
    out: str | os.PathLike, max_draft_tokens: int, ngram_size: int | None = None,
    draft_folder: str | os.PathLike | None = None,
) -> str | None:
    """Enables onnxruntime-genai's own speculative decoding in the ``genai_config.json`` of the folder
    ``out``: n-gram decoding (``ngram_size`` tokens matched, genai's counterpart of prompt lookup) or a
    draft model (``draft_folder``: another exported folder, its decoder copied into ``out`` as
    :data:`DRAFT_FILENAME` and its section of ``genai_config.json`` as ``model.draft``),
    ``max_draft_tokens`` candidates a run. Returns None, or why it was not written: genai verifies
    candidates with the ``logits`` output, which must hold every position (a folder exported with
    ``all_logits=True``; the default folder returns the last one and gives the others apart,
    :mod:`fx2onnx.deploy.verify_logits`, which genai does not read).
    """
    import shutil

    import onnx

    out = os.fspath(out)
    path = os.path.join(out, "genai_config.json")
    if (ngram_size is None) == (draft_folder is None):
        raise ValueError("Give ngram_size or draft_folder (onnxruntime-genai does not combine them).")
    if ngram_size is not None and ngram_size < 2:
        raise ValueError(f"ngram_size must be >= 2 (onnxruntime-genai's n-gram decoding), not {ngram_size}.")
    if not os.path.isfile(path):
        return f"{out!r} has no genai_config.json"
    with open(os.path.join(out, FOLDER_METADATA), encoding="utf-8") as f:
        metadata = json.load(f)
    if metadata.get("logits") != "all":
        return ("onnxruntime-genai verifies candidates with the logits of every position: export the folder "
                "with --all-logits")
    with open(path, encoding="utf-8") as f:
        genai = json.load(f)
    genai["speculative"] = {"max_draft_tokens": int(max_draft_tokens)}
    if ngram_size is not None:
        genai["speculative"]["ngram_size"] = int(ngram_size)
    else:
        draft_folder = os.fspath(draft_folder)
        with open(os.path.join(draft_folder, "genai_config.json"), encoding="utf-8") as f:
            section = json.load(f)["model"]["decoder"]
        draft_path = os.path.join(draft_folder, section["filename"])  # onnx/model.onnx: its data beside it
        model = onnx.load(draft_path, load_external_data=False)
        data = set()
        for tensor in model.graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location":
                    data.add(entry.value)
                    entry.value = DRAFT_FILENAME + ".data"
        if len(data) > 1:
            return f"the draft's weights are in {len(data)} files, not one"
        for name in data:
            data = os.path.join(os.path.dirname(draft_path), name)
            shutil.copyfile(data, os.path.join(out, DRAFT_FILENAME + ".data"))
        onnx.save(model, os.path.join(out, DRAFT_FILENAME))
        genai["model"]["draft"] = dict(section, filename=DRAFT_FILENAME)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(genai, f, indent=2)
    if "files" in metadata:  # the folder's manifest (fx2onnx.runtime.integrity) follows the change
        metadata["files"] = folder_manifest(out)
        with open(os.path.join(out, FOLDER_METADATA), "w", encoding="utf-8") as f:
            json.dump(metadata, f, indent=2)
    return None
