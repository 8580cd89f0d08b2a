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


def float16_logits_copy(folder: str, out: str) -> str:
    """A copy of ``folder`` whose decoder casts its logits to float16 (the weights hard-linked): what
    onnxruntime-genai 0.18's MtpGenerator runs on CPU (it stops on float32 logits, see write_genai_mtp)."""
    import shutil

    import onnx

    shutil.copytree(folder, out, copy_function=lambda src, dst: (os.link if src.endswith("data") else
                                                                 shutil.copyfile)(src, dst))
    path = os.path.join(out, "onnx", "model.onnx")
    model = onnx.load(path, load_external_data=False)
    for node in model.graph.node:
        node.output[:] = ["logits_float32" if o == "logits" else o for o in node.output]
    model.graph.node.append(onnx.helper.make_node("Cast", ["logits_float32"], ["logits"], to=onnx.TensorProto.FLOAT16))
    next(o for o in model.graph.output if o.name == "logits").type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    onnx.save(model, path)
    return out


@pytest.fixture(scope="module")
def genai_mtp_folder(mtp_folders, tmp_path_factory):
    """The checkpoint with an end of sequence (genai needs one), exported as genai's MtpGenerator needs it:
    every position's logits, the cache concatenated."""
    import shutil

    checkpoint, _ = mtp_folders
    root = tmp_path_factory.mktemp("mtp_genai")
    copy, out = str(root / "ckpt"), str(root / "onnx")
    shutil.copytree(checkpoint, copy)
    transformers.GenerationConfig(eos_token_id=2, pad_token_id=2).save_pretrained(copy)
    saved = transformers.Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected
    transformers.Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected = [r"model\.layers\.2\..*"]
    try:
        export_folder(copy, out, validate=False, all_logits=True, cache_in_place=False)
    finally:
        transformers.Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected = saved
    return out


def genai_tokens(folder: str, head_overlay: str | None = None) -> list[int]:
    """onnxruntime-genai's greedy tokens on PROMPT: plain, or with the folder's MTP head (og.MtpGenerator)."""
    import onnxruntime_genai as og

    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(PROMPT) + NEW, do_sample=False)
    if head_overlay is None:
        gen = og.Generator(model, params)
        gen.append_tokens(np.array([PROMPT], dtype=np.int32))
        while not gen.is_done():
            gen.generate_next_token()
        return gen.get_sequence(0).tolist()
    config = og.Config(folder)
    config.overlay(head_overlay)
    params.set_speculative_options(max_draft_tokens=1)
    gen = og.MtpGenerator(model, og.Model(config), params)
    gen.append_tokens(np.array(PROMPT, dtype=np.int32))
    while not gen.is_done():
        gen.generate_next_token()
    assert gen.get_stats()["draft_tokens_proposed"] > 0  # the head ran
    return gen.get_sequence().tolist()


@pytest.mark.slow
def test_mtp_in_genai(genai_mtp_folder, tmp_path):
    """genai_config.json's model.mtp section runs the folder's head in onnxruntime-genai's MtpGenerator: plain
    greedy's tokens, ours with --mtp; on float32 logits genai 0.18 stops on CPU (the folder records why)."""
    pytest.importorskip("onnxruntime_genai")
    from fx2onnx.deploy.mtp import genai_head_overlay

    out = genai_mtp_folder
    with open(os.path.join(out, "genai_config.json"), encoding="utf-8") as f:
        genai = json.load(f)["model"]
    assert genai["mtp"]["filename"] == "onnx/mtp.onnx" and genai["decoder"]["outputs"]["hidden_states"]
    with open(os.path.join(out, "fx2onnx.json"), encoding="utf-8") as f:
        assert "float32" in json.load(f)["mtp"]["genai"]
    gen = FolderGenerator(out)
    ours = gen.generator.generate(np.array([PROMPT]), NEW).tolist()[0]
    ours_mtp = gen.generator.generate(np.array([PROMPT]), NEW, speculation=MultiTokenPrediction(out)).tolist()[0]
    assert ours_mtp == ours
    n = len(ours)
    assert genai_tokens(out)[:n] == ours  # the folder with the section: genai's plain generator
    overlay = genai_head_overlay(out)
    with pytest.raises(RuntimeError, match="Cast"):
        genai_tokens(out, overlay)
    half = float16_logits_copy(out, str(tmp_path / "half"))
    plain_half = genai_tokens(half)
    assert genai_tokens(half, overlay) == plain_half
    assert plain_half[:n] == ours


@pytest.mark.slow
def test_mtp_int4(mtp_folders, tmp_path):
    """An int4 folder quantizes the head as its decoder (the head's vocabulary projection would otherwise read
    more bytes than the whole decoder); --mtp keeps plain greedy's tokens."""
    import onnx

    checkpoint, _ = mtp_folders
    out = str(tmp_path / "int4")
    saved = transformers.Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected
    transformers.Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected = [r"model\.layers\.2\..*"]
    try:
        export_folder(checkpoint, out, validate=False, quantize="int4")
    finally:
        transformers.Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected = saved
    head = onnx.load(os.path.join(out, "onnx", "mtp.onnx"), load_external_data=False)
    assert any(n.op_type == "MatMulNBits" for n in head.graph.node)
    gen = FolderGenerator(out)
    plain = gen.generator.generate(np.array([PROMPT]), NEW)
    got = gen.generator.generate(np.array([PROMPT]), NEW, speculation=MultiTokenPrediction(out))
    assert got.tolist() == plain.tolist()
    assert gen.generator.last_times.verifying_runs > 0
