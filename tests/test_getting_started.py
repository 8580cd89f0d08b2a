"""The getting-started page shows what its gallery page runs: the same folder, the same commands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "getting_started.rst"
GALLERY = ROOT / "_doc" / "examples" / "04_onnx_onnxruntime" / "plot_export_folder_generate_102.py"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_folder_snippet_is_the_gallery_folder():
    page = PAGE.read_text(encoding="utf-8")
    assert "REPOSITORY_URL" not in page and "l-plot-export-folder-generate-102" in page
    snippet = page.split("# make_folder.py", 1)[1]
    config = re.search(r"config = transformers\.Qwen3Config\((.*?)\)\n", snippet, re.S).group(1)
    gallery = GALLERY.read_text(encoding="utf-8")
    assert _flat(config) in _flat(gallery), "the page's configuration is not the gallery's"
    helper = re.search(r"from (fx2onnx\.[\w.]+) import write_checkpoint_folder", page).group(1)
    assert f"from {helper} import write_checkpoint_folder" in gallery
    assert 'write_checkpoint_folder(config, "qwen3", dtype="bfloat16", std=0.1)' in page
    assert 'dtype="bfloat16", std=0.1)' in gallery


def test_commands_are_the_gallery_commands():
    page = PAGE.read_text(encoding="utf-8")
    gallery = GALLERY.read_text(encoding="utf-8")
    prompt = re.search(r'prompt = "([^"]+)"', gallery).group(1)
    assert f'generate qwen3_onnx "{prompt}" --max-new-tokens 24' in page
    assert 'run("generate", out, prompt, "--max-new-tokens", "24")' in gallery
    assert "export qwen3 --out qwen3_onnx" in page and 'run("export", checkpoint, "--out", out' in gallery
    assert "--quantize int4" in page and '"--quantize", "int4"' in gallery
