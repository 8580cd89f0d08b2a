"""Multi-token prediction (fx2onnx.deploy.mtp, fx2onnx.runtime.mtp): a tiny GLM-4-MoE checkpoint holding its
MTP layer exports it beside the decoder, and our loop with it gives plain greedy's tokens and transformers'
generate(use_mtp=True)'s."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from fx2onnx.__main__ import main  # noqa: E402
from fx2onnx.deploy import export_folder  # noqa: E402
from fx2onnx.deploy.mtp import mtp_layers, mtp_module  # noqa: E402
from fx2onnx.inputs.discover import discover_architectures, tiny_config  # noqa: E402
from fx2onnx.runtime.folder import FolderGenerator  # noqa: E402
from fx2onnx.runtime.mtp import MultiTokenPrediction  # noqa: E402

PROMPT = [5, 6, 7, 8, 9, 10, 5, 6, 7, 11, 12]
NEW = 24


def write_mtp_checkpoint(folder: str) -> None:
    """A 2-layer GLM-4-MoE checkpoint whose weights hold an MTP layer, ``model.layers.2.*``, as released
    checkpoints hold theirs after the last layer: a 3-layer model's third layer, and the head's norms and
    projection."""
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    arch = next(a for a in discover_architectures() if a.name == "glm4_moe")
    config = tiny_config(arch, num_hidden_layers=3)
    transformers.Glm4MoeForCausalLM(config).eval().save_pretrained(folder)
    path = os.path.join(folder, "model.safetensors")
    weights = load_file(path)
    h = config.hidden_size
    g = torch.Generator().manual_seed(1)
    for name in ("enorm", "hnorm", "shared_head.norm"):
        weights[f"model.layers.2.{name}.weight"] = 1 + 0.1 * torch.randn(h, generator=g)
    weights["model.layers.2.eh_proj.weight"] = 0.05 * torch.randn(h, 2 * h, generator=g)
    save_file(weights, path, metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        stored = json.load(f)
    stored["num_hidden_layers"] = 2
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(stored, f, indent=1)


@pytest.fixture(scope="module")
def mtp_folders(tmp_path_factory):
    """(checkpoint, exported folder); the class's pattern of the MTP layers to skip names layer 2 (GLM-4.5's
    names layers 46 and 92, after its 46 or 92)."""
    root = tmp_path_factory.mktemp("mtp")
    checkpoint, out = str(root / "ckpt"), str(root / "onnx")
    saved = transformers.Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected
    transformers.Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected = [r"model\.layers\.2\..*"]
    try:
        write_mtp_checkpoint(checkpoint)
        export_folder(checkpoint, out, validate=False)
        yield checkpoint, out
    finally:
        transformers.Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected = saved


@pytest.mark.slow
def test_mtp_greedy_tokens(mtp_folders):
    checkpoint, out = mtp_folders
    with open(os.path.join(out, "fx2onnx.json"), encoding="utf-8") as f:
        assert json.load(f)["mtp"]["file"] == "onnx/mtp.onnx"
    main = transformers.Glm4MoeForCausalLM.from_pretrained(checkpoint).eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        expected = main.generate(ids, max_new_tokens=NEW, do_sample=False, use_mtp=True)
        plain_eager = main.generate(ids, max_new_tokens=NEW, do_sample=False)
    gen = FolderGenerator(out)
    plain = gen.generator.generate(np.array([PROMPT]), NEW)
    mtp = MultiTokenPrediction(out)
    got = gen.generator.generate(np.array([PROMPT]), NEW, speculation=mtp)
    assert got.tolist() == plain.tolist() == expected.tolist() == plain_eager.tolist()
    times = gen.generator.last_times
    assert times.verifying_runs > 0 and times.proposed == times.verifying_runs  # one candidate a run
    assert times.target_runs + times.accepted == NEW - 1


@pytest.mark.slow
def test_mtp_head_matches_eager(mtp_folders):
    """The exported head's logits are transformers' MtpModel's over a prompt and a next run."""
    checkpoint, out = mtp_folders
    import onnxruntime
    from transformers import DynamicCache

    step, main = mtp_module(checkpoint)
    session = onnxruntime.InferenceSession(os.path.join(out, "onnx", "mtp.onnx"), providers=["CPUExecutionProvider"])
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        hidden = main.model(ids).last_hidden_state
    n = len(PROMPT) - 1
    cache = DynamicCache(config=step.mtp.config)
    position = torch.arange(1, n + 1)[None]
    with torch.no_grad():
        eager = step(ids[:, 1:], hidden[:, :n], torch.ones(1, n, dtype=torch.int64), position, cache)["logits"]
    names = [i.name for i in session.get_inputs()]
    feeds = {"input_ids": ids[:, 1:].numpy(), "last_hidden_states": hidden[:, :n].numpy(),
             "attention_mask": np.ones((1, n), dtype=np.int64), "position_ids": position.numpy()}
    for name, i in zip(names, session.get_inputs()):
        if name not in feeds:
            feeds[name] = np.zeros((1, i.shape[1], 0, i.shape[3]), dtype=np.float32)
    got = session.run(None, feeds)[0]
    np.testing.assert_allclose(got, eager.numpy(), atol=1e-4, rtol=1e-4)
    assert mtp_layers(checkpoint, main.config) == 1


@pytest.mark.slow
def test_mtp_command_line(mtp_folders, capsys):
    _, out = mtp_folders
    ids = ",".join(map(str, PROMPT))
    capsys.readouterr()
    assert main(["generate", out, "--ids", ids, "--max-new-tokens", "12"]) == 0
    plain = capsys.readouterr().out
    assert main(["generate", out, "--ids", ids, "--max-new-tokens", "12", "--mtp"]) == 0
    captured = capsys.readouterr()
    assert captured.out == plain and "mean acceptance length" in captured.err
