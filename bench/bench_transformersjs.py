"""The speed of an exported decoder folder where transformers.js runs it: fx2onnx's folder beside optimum's export of
the same checkpoint, both in transformers.js (Node, onnxruntime-node), float32 and int4 (``q4``), 1 and 2 threads.

* the checkpoint: a Qwen3 config (``--widths 0.6b``: Qwen3-0.6B's hidden 1024, 16 heads, 8 key-value heads, head
  dimension 128, MLP 3072; ``small``: hidden 256) with ``--layers`` layers and the vocabulary of a tokenizer made in
  code, random bfloat16 weights (:func:`fx2onnx.testing.tokenizer.write_checkpoint_folder`);
* fx2onnx: ``export_folder`` (float32: ``onnx/model.onnx``; ``quantize="int4"``: ``onnx/model_q4.onnx``);
* optimum: ``python -m optimum.exporters.onnx --task text-generation-with-past`` in optimum's environment (the one
  ``tests/deploy/test_optimum.py`` makes, given by ``--optimum-python``), its ``model.onnx`` moved under ``onnx/``;
  its q4 file made as transformers.js' conversion scripts make it: onnxruntime's ``MatMulNBitsQuantizer`` (int4,
  blocks of 32, symmetric) on the float32 model;
* each folder in ``bench/transformersjs_speed.mjs`` (one Node process per folder, the two exporters alternating which
  runs first): a warm-up, then rounds of one new token (first-token time) and of ``--new`` tokens; decode speed =
  (new - 1) / (total - first token), the medians; file sizes of ``onnx/``; the memory the process holds after the
  rounds;
* the same from the process' CPU time (``first_token_cpu_ms``, ``decode_tok_s_cpu``): at 1 thread it is the compute
  and hardly moves with the load of other jobs, where the wall-clock speed does (on the shared machine the two
  exporters' wall-clock rows swap places from one run to the next); at 2 threads it also counts the time
  onnxruntime's workers spin, the wall-clock rows are the ones to read there.

.. code-block:: bash

    python bench/bench_transformersjs.py --optimum-python /tmp/fx2onnx-optimum-.../bin/python \\
        --widths 0.6b --layers 4 --json _doc/bench/transformersjs.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

import torch
import transformers

from fx2onnx.deploy import export_folder
from fx2onnx.testing.tokenizer import tiny_tokenizer, write_checkpoint_folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEED = os.path.join(ROOT, "bench", "transformersjs_speed.mjs")
WIDTHS = {
    "0.6b": dict(hidden_size=1024, intermediate_size=3072, num_attention_heads=16, num_key_value_heads=8, head_dim=128),
    "small": dict(hidden_size=256, intermediate_size=768, num_attention_heads=4, num_key_value_heads=2, head_dim=64),
}


def _size_mb(folder: str) -> float:
    onnx_dir = os.path.join(folder, "onnx")
    return sum(os.path.getsize(os.path.join(onnx_dir, f)) for f in os.listdir(onnx_dir)) / 2**20


def optimum_folder(python: str, checkpoint: str, out: str, torch_link: str | None) -> None:
    """optimum's export of ``checkpoint`` in transformers.js' layout (``onnx/model.onnx``) and its q4 file."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    import onnx

    raw, source = out + "_raw", out + "_source"
    # optimum's transformers (4.57) reads rope_theta at the top of config.json, where transformers 5 writes
    # rope_parameters: the same checkpoint, its config with both
    os.makedirs(source)
    for name in os.listdir(checkpoint):
        if name != "config.json":
            os.symlink(os.path.join(checkpoint, name), os.path.join(source, name))
    with open(os.path.join(checkpoint, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config.update({k: v for k, v in (config.get("rope_parameters") or {}).items() if k == "rope_theta"})
    with open(os.path.join(source, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    env = dict(os.environ, PYTHONPATH=torch_link) if torch_link else None
    subprocess.run([python, "-m", "optimum.exporters.onnx", "--model", source, "--task",
                    "text-generation-with-past", raw], check=True, capture_output=True, env=env)
    os.makedirs(os.path.join(out, "onnx"))
    for name in os.listdir(raw):
        target = os.path.join(out, "onnx", name) if ".onnx" in name else os.path.join(out, name)
        shutil.move(os.path.join(raw, name), target)
    shutil.rmtree(raw)
    for name in os.listdir(checkpoint):  # the tokenizer files
        if name.startswith("tokenizer") and not os.path.exists(os.path.join(out, name)):
            shutil.copy(os.path.join(checkpoint, name), out)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    model = onnx.load(os.path.join(out, "onnx", "model.onnx"))
    quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True)
    quantizer.process()
    onnx.save_model(quantizer.model.model, os.path.join(out, "onnx", "model_q4.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model_q4.onnx_data")
    external = os.path.exists(os.path.join(out, "onnx", "model.onnx_data"))
    with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["transformers.js_config"] = {"use_external_data_format": {"model.onnx": int(external),
                                                                     "model_q4.onnx": 1}}
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def measure(folder: str, dtype: str, threads: int, prompt: list[int], new: int, rounds: int) -> dict:
    done = subprocess.run(["node", SPEED, folder, dtype, str(threads), json.dumps(prompt), str(new), str(rounds)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    found = json.loads(done.stdout.strip().splitlines()[-1])
    speeds = {}
    for suffix, key in (("", "_s"), ("_cpu", "_cpu_s")):
        first = statistics.median(found["first_token" + key])
        total = statistics.median(found["total" + key])
        speeds[f"first_token{suffix}_ms"] = round(1000 * first, 2)
        speeds[f"decode_tok_s{suffix}"] = round((new - 1) / max(total - first, 1e-9), 2)
    return {**speeds, "rss_mb": round(found["rss_mb"]), "new_ids": found["new_ids"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimum-python", required=True, help="the Python of optimum's environment")
    parser.add_argument("--torch-link", default=None, help="a folder linking this torch (PYTHONPATH for optimum)")
    parser.add_argument("--widths", default="0.6b", choices=sorted(WIDTHS))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--vocab", type=int, default=384,
                        help="the vocabulary (384: the tokenizer's; Qwen3-0.6B's is 151936, the tokenizer kept)")
    parser.add_argument("--std", type=float, default=0.1, help="the std of the random weights")
    parser.add_argument("--json", default=None)
    parser.add_argument("--machine", default="the project's shared 2-core machine, other jobs running (noisy)",
                        help="the machine, as the JSON describes it")
    args = parser.parse_args()
    config = transformers.Qwen3Config(num_hidden_layers=args.layers, vocab_size=args.vocab, tie_word_embeddings=True,
                                      rope_theta=1_000_000.0, max_position_embeddings=40960,
                                      architectures=["Qwen3ForCausalLM"], **WIDTHS[args.widths])
    prompt = [5, 60, 7, 200, 31, 17, 90, 11, 4, 150, 33, 8, 71, 2, 99, 45]
    rows = []
    reference: list[int] = []
    with tempfile.TemporaryDirectory() as work:
        checkpoint = os.path.join(work, "qwen3")
        if args.vocab <= 384:  # the vocabulary of the tokenizer made in code
            write_checkpoint_folder(config, checkpoint, dtype="bfloat16", std=args.std)
        else:  # the published vocabulary, the tokenizer made in code beside it (the speed reads token ids)
            tok = tiny_tokenizer(384)
            config.eos_token_id = config.pad_token_id = tok.eos_token_id
            write_checkpoint_folder(config, checkpoint, dtype="bfloat16", std=args.std, tokenizer=False)
            tok.save_pretrained(checkpoint)
        model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
        reference = model.generate(torch.tensor([prompt]), max_new_tokens=args.new, min_new_tokens=args.new,
                                   do_sample=False)[0, len(prompt):].tolist()
        del model
        folders = {("fx2onnx", "fp32"): os.path.join(work, "ours_fp32"), ("fx2onnx", "q4"): os.path.join(work, "ours_q4"),
                   ("optimum", "fp32"): os.path.join(work, "optimum"), ("optimum", "q4"): os.path.join(work, "optimum")}
        export_folder(checkpoint, folders["fx2onnx", "fp32"], validate=False)
        export_folder(checkpoint, folders["fx2onnx", "q4"], quantize="int4", validate=False)
        optimum_folder(args.optimum_python, checkpoint, folders["optimum", "fp32"], args.torch_link)
        sizes = {("fx2onnx", "fp32"): _size_mb(folders["fx2onnx", "fp32"]),
                 ("fx2onnx", "q4"): _size_mb(folders["fx2onnx", "q4"])}
        onnx_dir = os.path.join(folders["optimum", "fp32"], "onnx")
        sizes["optimum", "fp32"] = sum(os.path.getsize(os.path.join(onnx_dir, f)) for f in os.listdir(onnx_dir)
                                       if f.startswith("model.onnx")) / 2**20
        sizes["optimum", "q4"] = sum(os.path.getsize(os.path.join(onnx_dir, f)) for f in os.listdir(onnx_dir)
                                     if f.startswith("model_q4")) / 2**20
        pairs = [(threads, dtype) for threads in [int(t) for t in args.threads.split(",")] for dtype in ("fp32", "q4")]
        for index, (threads, dtype) in enumerate(pairs):
            # the exporters interleaved, each pair's first one alternating (a load that grows or falls during the run
            # does not always favour the same one)
            for exporter in ("fx2onnx", "optimum")[::1 if index % 2 == 0 else -1]:
                found = measure(folders[exporter, dtype], dtype, threads, prompt, args.new, args.rounds)
                rows.append({"exporter": exporter, "dtype": dtype, "threads": threads,
                             "size_mb": round(sizes[exporter, dtype], 2), **found})
                print({k: v for k, v in rows[-1].items() if k != "new_ids"}, flush=True)
    for row in rows:
        other = next(r for r in rows if r["dtype"] == row["dtype"] and r["threads"] == row["threads"]
                     and r["exporter"] != row["exporter"])
        row["same_tokens"] = row["new_ids"] == other["new_ids"]
        # float32: transformers' greedy tokens (int4: the weights are rounded, reported only)
        row["transformers_tokens"] = row["new_ids"] == reference
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"widths": args.widths, "layers": args.layers, "vocab": config.vocab_size, "new": args.new,
                       "std": args.std,
                       "prompt": len(prompt), "rounds": args.rounds,
                       "date": datetime.date.today().isoformat(),
                       "command": "python bench/bench_transformersjs.py " + " ".join(
                           shlex.quote("PATH" if a.startswith("/") else a) for a in sys.argv[1:]),
                       "machine": args.machine,
                       "rows": [{k: v for k, v in r.items() if k != "new_ids"} for r in rows]}, f, indent=2)


if __name__ == "__main__":
    main()
