"""The files of a checkpoint folder checked before an export reads them: one line for a bad one.

:func:`check_checkpoint_folder` reads what the export will need and nothing more, cheaply (the
safetensors headers, not the tensors): ``config.json`` is JSON and names a model type and a class;
the other JSON files the export copies parse; ``tokenizer.json`` loads in ``tokenizers``; every
safetensors file (the shards the index names) is whole (:func:`fx2onnx.weights.checkpoint.safetensors_header`).
A bad file raises :class:`fx2onnx.weights.checkpoint.CheckpointFileError` (a ValueError) naming it
and what to do: the command line prints it as one ``error:`` line (exit 2), before any file is written.
Fields config.json lacks are found when its model meets the weights (a shape the model needs that the
checkpoint does not have, :func:`fx2onnx.weights.checkpoint.checkpoint_weights`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..weights.checkpoint import CheckpointFileError, checkpoint_files

#: what to do with a hand-edited or cut configuration file
RESTORE = "restore it from the model's repository"
#: the JSON files the export reads or copies, checked when present
JSON_FILES = ("generation_config.json", "tokenizer_config.json", "special_tokens_map.json", "preprocessor_config.json",
              "processor_config.json", "feature_extractor_config.json", "added_tokens.json",
              "video_preprocessor_config.json")


def read_json_file(path: str) -> Any:
    """The content of the JSON file ``path``; :class:`CheckpointFileError` naming the line and column of the error."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except UnicodeDecodeError:
        raise CheckpointFileError(f"{path!r} is not UTF-8 text: {RESTORE}.") from None
    except json.JSONDecodeError as e:
        raise CheckpointFileError(f"{path!r} is not JSON (line {e.lineno}, column {e.colno}: {e.msg}): {RESTORE}.") \
            from None


def check_config(folder: str) -> dict[str, Any]:
    """The content of the folder's ``config.json``, refused in one line when it is not JSON or lacks
    ``model_type`` or ``architectures`` (the class the export builds)."""
    path = os.path.join(folder, "config.json")
    config = read_json_file(path)
    if not isinstance(config, dict):
        raise CheckpointFileError(f"{path!r} is not a JSON object: {RESTORE}.")
    if not isinstance(config.get("model_type"), str) or not config["model_type"]:
        raise CheckpointFileError(f"{path!r} has no model_type (llama, qwen3...): {RESTORE}.")
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures or not all(isinstance(a, str) for a in architectures):
        raise CheckpointFileError(f"{path!r} names no class in architectures (e.g. [\"Qwen3ForCausalLM\"]): {RESTORE} "
                                  "or add the class of the weights.")
    return config


def check_tokenizer(folder: str, config: dict[str, Any] | None = None) -> None:
    """``tokenizer.json``, when the folder has one, loads in ``tokenizers`` (what every runtime reads), and its
    vocabulary (without the added tokens) fits in the embedding ``config`` gives the model (``vocab_size``): a
    tokenizer of another checkpoint gives ids the model cannot embed."""
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        return
    import tokenizers

    try:
        tokenizer = tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # noqa: BLE001 - tokenizers raises its own Exception type for every parse error
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointFileError(f"{path!r} does not load as a tokenizer ({reason[:200]}): {RESTORE}.") from None
    rows = (config or {}).get("vocab_size")
    tokens = tokenizer.get_vocab_size(with_added_tokens=False)
    if isinstance(rows, int) and 0 < rows < tokens:
        raise CheckpointFileError(f"{path!r} has {tokens} tokens but config.json's vocab_size is {rows}: the model "
                                  "cannot embed the ids from its row count up; put the tokenizer of this checkpoint "
                                  "in the folder.")


def check_checkpoint_folder(folder: str | os.PathLike, weights: bool = True) -> dict[str, Any]:
    """Checks the files of ``folder`` an export reads (see the module); returns the content of ``config.json``.

    :param weights: check the safetensors files too (:func:`check_weights`)

    :raises FileNotFoundError: no config.json, no weights
    :raises CheckpointFileError: a file is not what it should be (one line naming it and what to do)
    """
    folder = os.fspath(folder)
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise FileNotFoundError(f"{folder!r} has no config.json: give a folder written by save_pretrained.")
    config = check_config(folder)
    for name in JSON_FILES:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            read_json_file(path)
    check_tokenizer(folder, config)
    if weights:
        check_weights(folder)
    return config


def check_weights(folder: str | os.PathLike) -> None:
    """The safetensors index of ``folder``, its shards, every safetensors header against its file's size."""
    checkpoint_files(folder)
