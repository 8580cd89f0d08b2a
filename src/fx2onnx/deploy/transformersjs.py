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


def data_file_name(model_file: str) -> str:
    """The name transformers.js gives the weights' file of ``model_file``: ``model.onnx`` -> ``model.onnx_data``."""
    return os.path.basename(model_file) + "_data"


def write_transformersjs_config(out_dir: str | os.PathLike, model_file: str, external_data: bool) -> None:
    """Adds the ``transformers.js_config`` block to ``config.json`` in ``out_dir`` (nothing when it has none) for the
    decoder ``model_file`` (relative to ``out_dir``); a block already there keeps its other keys. A
    ``tokenizer_config.json`` without ``clean_up_tokenization_spaces`` gets transformers' default (false)."""
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
    config[BLOCK] = block
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
