"""Fixtures shared by the folder tests."""

from __future__ import annotations

import pytest

from fx2onnx.__main__ import main
from fx2onnx.testing.tokenizer import tiny_qwen3_config, write_checkpoint_folder


@pytest.fixture(scope="session")
def qwen3_export(tmp_path_factory) -> tuple[str, str]:
    """A bf16 Qwen3 checkpoint with a tokenizer, and the folder ``export`` (no flag) wrote from it, exported once per
    test process; the tests read both, and copy them before changing anything."""
    root = tmp_path_factory.mktemp("qwen3_export")
    checkpoint, out = str(root / "qwen3"), str(root / "qwen3_onnx")
    write_checkpoint_folder(tiny_qwen3_config(), checkpoint, dtype="bfloat16", std=0.3)
    assert main(["export", checkpoint, "--out", out, "--quiet"]) == 0
    return checkpoint, out
