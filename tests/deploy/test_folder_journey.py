"""The journey of a user: a bf16 checkpoint folder -> ``export`` (no flag) -> ``generate "text"``,
checked against transformers' generate, and the same folder run by onnxruntime-genai."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnx
import pytest
import torch
import transformers

from fx2onnx.__main__ import main
from fx2onnx.testing.tokenizer import tiny_qwen3_config, write_checkpoint_folder

PROMPT = "hello world, the exporter"


def _eager(checkpoint):
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    return model, transformers.AutoTokenizer.from_pretrained(checkpoint)


def _genai_greedy(og, genai_model, prompt: list[int], new: int) -> list[int]:
    """The greedy tokens onnxruntime-genai's Generator gives after ``prompt`` on a folder's model."""
    params = og.GeneratorParams(genai_model)
    params.set_search_options(max_length=len(prompt) + new, do_sample=False)
    generator = og.Generator(genai_model, params)
    generator.append_tokens(np.array([prompt], dtype=np.int32))
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens


def test_export_writes_a_folder_that_generates(qwen3_export):
    checkpoint, out = qwen3_export
    files = set(os.listdir(out))
    # the layout transformers.js and optimum read: the decoder and its weights under onnx/, the rest at the root
    assert {"tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json", "genai_config.json",
            "fx2onnx.json"} <= files and sorted(os.listdir(os.path.join(out, "onnx"))) == ["model.onnx",
                                                                                          "model.onnx_data"]
    assert not any(f.endswith(".safetensors") for f in files)
    proto = onnx.load(os.path.join(out, "onnx", "model.onnx"), load_external_data=False)
    inputs = [i.name for i in proto.graph.input]
    outputs = [o.name for o in proto.graph.output]
    assert "past_key_values.0.key" in inputs and "present.1.value" in outputs  # the model takes its cache
    # float32 by default (onnxruntime's CPU kernels), from a bf16 checkpoint
    assert proto.graph.input[inputs.index("past_key_values.0.key")].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert json.load(open(os.path.join(out, "fx2onnx.json")))["task"] == "text-generation"
    # the logits of the last position only: the head runs once per prompt (generation reads nothing else)
    logits = proto.graph.output[outputs.index("logits")].type.tensor_type.shape.dim
    assert logits[1].dim_value == 1 and logits[2].dim_value == 384
    assert json.load(open(os.path.join(out, "fx2onnx.json")))["logits"] == "last"
    # the cache updated in place: GroupQueryAttention, one buffer for each past and present
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("GroupQueryAttention") == 2 and "Attention" not in ops
    assert json.load(open(os.path.join(out, "fx2onnx.json")))["cache"] == "in_place"
    assert json.load(open(os.path.join(out, "genai_config.json")))["search"]["past_present_share_buffer"] is True


def test_left_padded_batch_with_the_cache_in_place(qwen3_export):
    """Two prompts of different lengths (left padded) in one call: the tokens of transformers'
    generate on the same batch, the cache bound in place (positions and pads from the mask)."""
    from fx2onnx.runtime.folder import FolderGenerator

    checkpoint, out = qwen3_export
    gen = FolderGenerator(out)
    assert gen.generator.in_place
    ids = torch.tensor([[0, 0, 0, 5, 60, 7], [9, 12, 200, 31, 8, 77]])
    mask = (torch.arange(6)[None] >= torch.tensor([[3], [0]])).long()
    model, _ = _eager(checkpoint)
    expected = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10, do_sample=False,
                              pad_token_id=0)
    got = gen.generator.generate(ids, 10, attention_mask=mask)
    assert got.tolist() == expected.tolist()


@pytest.mark.slow  # make test exports the default (last position) folder; this one in make test-all
def test_all_logits_keeps_every_position(qwen3_export, tmp_path):
    """``--all-logits``: the logits of every prompt position, equal to eager's (to score a text);
    with ``--concatenated-cache``, the standard Attention concatenating the past."""
    from fx2onnx.validation import run_onnx

    checkpoint, _ = qwen3_export
    out = str(tmp_path / "all")
    assert main(["export", checkpoint, "--out", out, "--quiet", "--all-logits", "--no-validate",
                 "--concatenated-cache"]) == 0
    metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
    assert metadata["logits"] == "all" and metadata["cache"] == "concatenated"
    assert json.load(open(os.path.join(out, "genai_config.json")))["search"]["past_present_share_buffer"] is False
    decoder = os.path.join(out, "onnx", "model.onnx")
    ops = [n.op_type for n in onnx.load(decoder, load_external_data=False).graph.node]
    assert ops.count("Attention") == 2 and "GroupQueryAttention" not in ops
    model, _ = _eager(checkpoint)
    ids = torch.tensor([[5, 60, 7, 200, 31, 8]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    session_inputs = {i.name for i in onnx.load(decoder, load_external_data=False).graph.input}
    feeds = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "position_ids": torch.arange(ids.shape[1])[None]}
    feeds.update({name: torch.zeros((1, 2, 0, 16)) for name in session_inputs if name.startswith("past_key_values")})
    got = run_onnx(decoder, (), feeds)[0]
    assert got.shape == (1, 6, 384)
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-4, rtol=1e-3)


def test_generate_text_equals_transformers_greedy(qwen3_export, capsys):
    checkpoint, out = qwen3_export
    capsys.readouterr()
    assert main(["generate", out, PROMPT, "--max-new-tokens", "16"]) == 0
    captured = capsys.readouterr()
    model, tok = _eager(checkpoint)
    ids = tok(PROMPT, return_tensors="pt")
    expected = model.generate(**ids, max_new_tokens=16, do_sample=False)
    text = tok.decode(expected[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert len(set(expected[0, ids["input_ids"].shape[1]:].tolist())) > 3  # the tokens vary: a real check
    assert captured.out == text + "\n"
    assert "prefill:" in captured.err and "tokens/s" in captured.err


def test_generate_ids_and_onnxruntime_genai_agree(qwen3_export, capsys):
    og = pytest.importorskip("onnxruntime_genai")
    checkpoint, out = qwen3_export
    prompt = [5, 60, 7, 200, 31]
    capsys.readouterr()
    assert main(["generate", out, "--ids", ",".join(map(str, prompt)), "--max-new-tokens", "12"]) == 0
    ours = [int(t) for t in capsys.readouterr().out.strip().split(",")]
    model, _ = _eager(checkpoint)
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt):].tolist()
    assert ours == expected
    genai_model = og.Model(out)
    theirs = _genai_greedy(og, genai_model, prompt, 12)
    assert theirs[: len(ours)] == ours
    # its tokenizer reads the copied tokenizer.json as transformers does
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint)
    assert og.Tokenizer(genai_model).encode(PROMPT).tolist() == tok(PROMPT)["input_ids"]


@pytest.mark.parametrize("options", [
    dict(temperature=0.8, top_k=20, top_p=0.9),
    dict(temperature=1.3, top_k=0, repetition_penalty=1.2),
])
def test_sampling_with_a_seed_reproduces_transformers(qwen3_export, options):
    from fx2onnx.runtime.folder import FolderGenerator
    from fx2onnx.runtime.sampling import Sampling

    checkpoint, out = qwen3_export
    model, tok = _eager(checkpoint)
    ids = tok(PROMPT, return_tensors="pt")
    torch.manual_seed(7)
    expected = model.generate(**ids, max_new_tokens=20, do_sample=True, **options)[0, ids["input_ids"].shape[1]:]
    sampling = Sampling(do_sample=True, seed=7, **options)
    result = FolderGenerator(out).generate_text(PROMPT, 20, sampling)
    assert result.new_ids == expected.tolist()
    # another seed draws other tokens
    assert FolderGenerator(out).generate_text(PROMPT, 20, Sampling(do_sample=True, seed=8, **options)).new_ids != \
        result.new_ids


def test_chat_template_is_applied(qwen3_export, capsys):
    from fx2onnx.runtime.folder import FolderGenerator

    _, out = qwen3_export
    gen = FolderGenerator(out)
    ids = gen.encode("hi", chat=True)
    assert gen.tokenizer.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert main(["generate", out, "hi", "--chat", "--max-new-tokens", "4"]) == 0


def test_a_batch_of_prompts_equals_transformers_greedy(qwen3_export, capsys):
    """Two prompts of different lengths, padded on the left: every result is transformers' greedy
    ``generate`` on the same batch; the command line prints one numbered block per prompt."""
    from fx2onnx.runtime.folder import FolderGenerator

    checkpoint, out = qwen3_export
    model, tok = _eager(checkpoint)
    prompts = [PROMPT, "the quick brown fox jumps over the lazy dog, again and again"]
    tok.padding_side = "left"
    batch = tok(prompts, return_tensors="pt", padding=True)
    assert (batch["attention_mask"] == 0).any()
    expected = model.generate(**batch, max_new_tokens=10, do_sample=False)[:, batch["input_ids"].shape[1]:]
    results = FolderGenerator(out).generate_texts(prompts, 10)
    assert [r.new_ids for r in results] == expected.tolist()
    assert len(set(expected[1].tolist())) > 3
    capsys.readouterr()
    assert main(["generate", out, *prompts, "--max-new-tokens", "10"]) == 0
    texts = [tok.decode(row, skip_special_tokens=True) for row in expected.tolist()]
    assert capsys.readouterr().out == "".join(f"[{i}] {t}\n" for i, t in enumerate(texts, 1))


def test_bad_inputs_end_in_one_line(qwen3_export, tmp_path, capsys):
    checkpoint, out = qwen3_export
    # a folder of a model type the command refuses (keypoint matching: SuperPoint's keypoints, a run-time count)
    config = transformers.SuperGlueConfig(
        hidden_size=16, keypoint_encoder_sizes=[8], gnn_layers_types=["self"], num_attention_heads=2,
        keypoint_detector_config=dict(model_type="superpoint", encoder_hidden_sizes=[4, 4, 8, 8],
                                      decoder_hidden_size=16, descriptor_decoder_dim=16),
        architectures=["SuperGlueForKeypointMatching"])
    other = tmp_path / "superglue"
    transformers.SuperGlueForKeypointMatching(config).save_pretrained(other)
    capsys.readouterr()
    assert main(["export", str(other), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "keypoint-matching" in err and "SuperGlueForKeypointMatching" in err, err
    assert "SuperPoint" in err and not os.path.exists(tmp_path / "o"), err
    # a folder without a tokenizer: a prompt is refused with the fix, token ids work
    bare = tmp_path / "bare"
    shutil.copytree(out, bare)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        os.remove(bare / name)
    assert main(["generate", str(bare), "some text"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--ids" in err
    assert main(["generate", str(bare), "--ids", "1,2,3", "--max-new-tokens", "2"]) == 0
    # not an exported folder
    assert main(["generate", str(tmp_path), "--ids", "1"]) == 2
    assert "export" in capsys.readouterr().err
    # a folder that does not exist, one that holds no config.json: named, not a model-name lookup
    assert main(["export", str(tmp_path / "missing"), "--out", str(tmp_path / "o2")]) == 2
    assert capsys.readouterr().err.strip().endswith("missing: no such folder")
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "o2")]) == 2
    assert "has no config.json" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o2")


@pytest.mark.slow
def test_bfloat16_export_is_held_to_eager_bfloat16(qwen3_export, tmp_path):
    """A bf16 export is compared with eager float32 and accepted when as close as eager bf16 is;
    a wrong model is still refused."""
    from fx2onnx.deploy import export_folder
    from fx2onnx.deploy.check import check_against_eager

    checkpoint, _ = qwen3_export
    result = export_folder(checkpoint, tmp_path / "bf16", dtype="bfloat16")
    assert result.ok, [str(c) for c in result.checks]
    first = result.checks[0]
    assert max(first.onnx_diff) > 1e-3  # far from float32 at its tolerance: the old check said MISMATCH
    assert "eager bfloat16 is" in str(first)
    # the same check refuses a model that computes something else
    model, _ = _eager(checkpoint)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(1.5)
    from fx2onnx.inputs.folder_inputs import task_inputs

    config = transformers.AutoConfig.from_pretrained(checkpoint)
    inputs, _, _ = task_inputs(config, "text-generation", with_cache=True, dtype=torch.bfloat16)
    # the decoder as plain generation reads it: the logits of the last position and the cache (verify_logits, the
    # last positions' logits a speculative loop verifies, dropped; the weights' file is shared)
    proto = onnx.load(str(tmp_path / "bf16" / "onnx" / "model.onnx"), load_external_data=False)
    assert proto.graph.output[-1].name == "verify_logits"
    proto.graph.output.pop()
    onnx.save(proto, str(tmp_path / "bf16" / "onnx" / "model_plain.onnx"))
    [wrong] = check_against_eager(str(tmp_path / "bf16" / "onnx" / "model_plain.onnx"), model, [inputs], torch.bfloat16)
    assert not wrong.ok and "MISMATCH" in str(wrong)


@pytest.mark.parametrize("asymmetric", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_quantized_folder_generates_as_onnxruntime_genai(qwen3_export, tmp_path, capsys, asymmetric):
    """``--quantize int4``: symmetric blocks by default (no zero point, as onnxruntime-genai's builder
    writes them), ``--asymmetric`` stores zero points; the tied embedding shares the head's blocks;
    our loop and onnxruntime-genai's give the same tokens on the same quantized model."""
    og = pytest.importorskip("onnxruntime_genai")
    checkpoint, _ = qwen3_export
    out = str(tmp_path / "int4")
    argv = ["export", checkpoint, "--out", out, "--quiet", "--quantize", "int4"] + (["--asymmetric"] if asymmetric else [])
    assert main(argv) == 0
    proto = onnx.load(os.path.join(out, "onnx", "model_q4.onnx"), load_external_data=False)  # transformers.js' q4
    matmuls = [n for n in proto.graph.node if n.op_type == "MatMulNBits"]
    assert len(matmuls) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, the head
    assert {len(n.input) for n in matmuls} == ({4} if asymmetric else {3})  # zero points or none
    gather = next(n for n in proto.graph.node if n.op_type == "GatherBlockQuantized")
    head = next(n for n in matmuls if n.input[2] == gather.input[2])  # the head's scales, shared
    assert head.input[1] in {i for n in proto.graph.node if n.op_type == "Reshape" for i in n.input}
    assert json.load(open(os.path.join(out, "fx2onnx.json")))["symmetric"] is (not asymmetric)
    prompt = [5, 60, 7, 200, 31]
    capsys.readouterr()
    assert main(["generate", out, "--ids", ",".join(map(str, prompt)), "--max-new-tokens", "12"]) == 0
    ours = [int(t) for t in capsys.readouterr().out.strip().split(",")]
    theirs = _genai_greedy(og, og.Model(out), prompt, 12)
    assert len(ours) == 12 and theirs[: len(ours)] == ours


@pytest.mark.slow  # the fast tier tests the packing rule alone (tests/optimize/test_rules.py)
def test_real_width_projections_are_packed(tmp_path, capsys):
    """At a width of 1024, q, k and v run as one MatMul (one MatMulNBits in int4) and a Split; the
    float32 folder still generates transformers' greedy tokens, the int4 one onnxruntime-genai's."""
    og = pytest.importorskip("onnxruntime_genai")
    checkpoint = str(tmp_path / "wide")
    write_checkpoint_folder(tiny_qwen3_config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=1,
                                    num_attention_heads=8, num_key_value_heads=4, head_dim=128),
                            checkpoint, dtype="bfloat16", std=0.05)
    prompt = [5, 60, 7, 200, 31]
    model, _ = _eager(checkpoint)
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)[0, len(prompt):].tolist()
    for quant in ([], ["--quantize", "int4"]):
        out = str(tmp_path / ("int4" if quant else "float32"))
        assert main(["export", checkpoint, "--out", out, "--quiet", *quant]) == 0
        decoder = json.load(open(os.path.join(out, "fx2onnx.json")))["decoder"]  # onnx/model_q4.onnx in int4
        assert decoder == ("onnx/model_q4.onnx" if quant else "onnx/model.onnx")
        proto = onnx.load(os.path.join(out, decoder), load_external_data=False)
        ops = [n.op_type for n in proto.graph.node]
        assert ops.count("Split") == 1 and ops.count("MatMulNBits" if quant else "MatMul") == 6  # qkv, o, gate, up, down, head
        capsys.readouterr()
        assert main(["generate", out, "--ids", ",".join(map(str, prompt)), "--max-new-tokens", "8"]) == 0
        ours = [int(t) for t in capsys.readouterr().out.strip().split(",")]
        assert ours == (_genai_greedy(og, og.Model(out), prompt, 8) if quant else expected)


def test_a_folder_of_the_previous_layout_still_generates(qwen3_export, tmp_path):
    """A folder written before the layout of transformers.js and optimum (``model.onnx`` at the root, the cache named
    ``past_key_values_key_<i>`` / ``present_key_<i>``) opens with a one-line warning and gives the same tokens."""
    from fx2onnx.deploy.saved_model import rename_values
    from fx2onnx.runtime.folder import FolderGenerator, OldLayoutWarning

    _, out = qwen3_export
    old = tmp_path / "old"
    shutil.copytree(out, old)
    os.replace(old / "onnx" / "model.onnx_data", old / "model.onnx.data")
    proto = onnx.load(str(old / "onnx" / "model.onnx"), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "model.onnx.data"
    onnx.save(proto, str(old / "model.onnx"))
    shutil.rmtree(old / "onnx")

    inputs = [i.name for i in proto.graph.input]
    outputs = [o.name for o in proto.graph.output]
    # past_key_values.0.key -> past_key_values_key_0, present.0.key -> present_key_0
    renamed = {n: (f"{n.split('.')[0]}_{n.split('.')[2]}_{n.split('.')[1]}" if n.count(".") == 2 else n)
               for n in inputs + outputs}
    pairs = {renamed[f"past_key_values.{i}.{kv}"]: renamed[f"present.{i}.{kv}"]
             for i in range(2) for kv in ("key", "value")}
    rename_values(str(old / "model.onnx"), [renamed[n] for n in inputs], [renamed[n] for n in outputs], pairs)
    metadata = json.load(open(old / "fx2onnx.json"))
    metadata["decoder"] = "model.onnx"
    del metadata["files"]
    json.dump(metadata, open(old / "fx2onnx.json", "w"))
    with pytest.warns(OldLayoutWarning, match="older fx2onnx"):
        gen = FolderGenerator(old)
    assert "past_key_values_key_0" in {name for name, *_ in gen.generator.signature.cache}
    prompt = [5, 60, 7, 200, 31]
    assert gen.generate_text(prompt, 10).new_ids == FolderGenerator(out).generate_text(prompt, 10).new_ids
