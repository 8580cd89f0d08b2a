"""Build-time page generator: the patches of fx2onnx for the installed versions.

``conf.py`` calls :func:`generate` when the builder starts. It writes
``design/_generated/patches_table.inc`` (gitignored; not an ``.rst`` file, so
Sphinx does not look for it in a toctree), included by ``design/patches.rst``:
one row per patch, *applicable* or *skipped* with the reason, for the torch
and transformers installed.
"""

from __future__ import annotations

import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "design" / "_generated" / "patches_table.inc"


def _import_modeling_modules() -> None:
    """Imports the modeling modules of the tiny models: their rotary embeddings get patches."""
    import transformers

    from fx2onnx.zoo import _SPECS, list_tiny_models

    for name in list_tiny_models():
        cls = getattr(transformers, _SPECS[name].model_class)
        importlib.import_module(cls.__module__)


def _cell(text: str) -> str:
    text = str(text).replace("\n", " ").strip()
    return f"``{text}``" if text and " " not in text and "`" not in text else (text or "-")


def patches_table() -> str:
    """The rst list-table of every patch with its status."""
    import torch
    import transformers

    from fx2onnx.patches import list_patches

    _import_modeling_modules()
    rows = list_patches(patch_torch=True, patch_transformers=True, stop_if_static=1)
    lines = [
        f"Patches checked against torch {torch.__version__} and transformers "
        f"{transformers.__version__} (the rotary embeddings listed are those of the tiny "
        f"models' modeling modules).",
        "",
        ".. list-table::",
        "    :header-rows: 1",
        "    :widths: 10 30 10 50",
        "",
        "    * - kind",
        "      - patch",
        "      - status",
        "      - why (or why skipped)",
    ]
    for row in rows:
        why = row["reason"] or row["doc"]
        lines += [
            f"    * - {row['kind']}",
            f"      - {_cell(row['name'])}",
            f"      - {row['status']}",
            f"      - {why.replace(chr(10), ' ') or '-'}",
        ]
    return "\n".join(lines) + "\n"


def generate(app=None) -> Path:
    """Writes the table (only when its content changes)."""
    content = patches_table()
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != content:
        OUTPUT.write_text(content, encoding="utf-8")
    return OUTPUT


if __name__ == "__main__":
    print(generate().read_text(encoding="utf-8"))
