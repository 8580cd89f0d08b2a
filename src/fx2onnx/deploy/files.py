"""The files of a checkpoint folder copied beside the exported model: config, generation
config, tokenizer and processor files; the weights are not copied (they are in the ONNX data)."""

from __future__ import annotations

import os
import shutil

#: file endings of weights and their indices, never copied
WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".bin", ".bin.index.json", ".pt", ".pth",
                   ".ckpt", ".h5", ".msgpack", ".onnx", ".onnx.data", ".gguf")


def copy_folder_files(folder: str | os.PathLike, out: str | os.PathLike) -> list[str]:
    """Copies the files of ``folder`` (not its sub-folders) which are not weights into ``out``.

    :return: the names copied, sorted
    """
    copied = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not os.path.isfile(path) or name.endswith(WEIGHT_SUFFIXES) or name.startswith("."):
            continue
        shutil.copyfile(path, os.path.join(out, name))
        copied.append(name)
    return copied
