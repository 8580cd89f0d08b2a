"""A hybrid and a latent-attention model at their published widths, from a bf16 folder to greedy tokens.

Two families whose cache is not one key/value pair per layer, each at the widths of a published
checkpoint with few layers (the layer pattern kept):

* ``lfm2-1.2b``: LFM2-1.2B (short convolutions and attention; 4 of its 16 layers: conv, conv,
  attention, conv, as the published model starts);
* ``deepseek-v2-lite``: DeepSeek-V2-Lite (multi-head latent attention, 64 routed experts, a dense
  first layer; 2 of its 27 layers: the dense prefix and one mixture-of-experts layer: each further
  layer adds 0.6 billion parameters, 2.3 GB in float32 for transformers' reference and the float32
  folder's session, beyond the memory share of this benchmark).

For each, a bf16 ``save_pretrained`` folder with random weights (seeded, written tensor by tensor)
and a tokenizer made in code, then per precision (float32, int4):

* ``python -m fx2onnx export FOLDER --out OUT [--quantize int4]`` and onnxruntime-genai's
  ``python -m onnxruntime_genai.models.builder -i FOLDER -o OUT -p fp32|int4 -e cpu`` (where it
  takes the family; its one-line refusal is stored otherwise), each in a child process: wall
  time, peak RSS (the child's ``VmHWM``), folder size;
* both loops, greedy, one intra-op thread, in interleaved rounds (the best kept): the time to the
  first token (the prompt's prefill) and the decoding speed;
* the tokens against transformers' ``generate`` on the same folder loaded in float32 (a child
  process): float32 must be equal; int4 (blocks of weights rounded to 4 bits, on random weights
  whose logits are nearly uniform) states how many leading tokens agree.

Each row stores the machine's load average: the machine is shared and timings are noisy. The rows
merge into ``--json`` (``_doc/bench/real_size_families.json``), which also holds the table the
deployment design page renders (``_doc/gen_bench_tables.py``). Everything is written in a
temporary folder removed at the end.

    python bench/bench_real_size_families.py --model lfm2-1.2b --json _doc/bench/real_size_families.json
    python bench/bench_real_size_families.py --model deepseek-v2-lite --rounds 2 --json _doc/bench/real_size_families.json
    python bench/bench_real_size_families.py --model lfm2-1.2b --layers 2 --new 4 --rounds 1   # a quick run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_deploy import folder_size, measured, run_genai, run_ours, run_versions  # noqa: E402

#: LFM2-1.2B's layer pattern (its config.json): 10 short-convolution and 6 attention layers
LFM2_LAYERS = ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv",
               "full_attention", "conv", "full_attention", "conv", "full_attention", "conv", "full_attention", "conv"]
#: published configs (values of the models' config.json), the number of layers measured
CONFIGS = {
    "lfm2-1.2b": ("Lfm2Config", 4, dict(
        vocab_size=65536, hidden_size=2048, intermediate_size=12288, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=128000, norm_eps=1e-5, conv_bias=False, conv_L_cache=3,
        block_multiple_of=256, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True,
        rope_parameters=dict(rope_type="default", rope_theta=1_000_000.0), tie_word_embeddings=True,
        layer_types=LFM2_LAYERS, architectures=["Lfm2ForCausalLM"])),
    "deepseek-v2-lite": ("DeepseekV2Config", 2, dict(
        vocab_size=102400, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64,
        n_shared_experts=2, num_experts_per_tok=6, first_k_dense_replace=1, moe_layer_freq=1, n_group=1,
        topk_group=1, topk_method="greedy", norm_topk_prob=False, routed_scaling_factor=1.0, q_lora_rank=None,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, head_dim=64,
        max_position_embeddings=163840, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, beta_fast=32.0, beta_slow=1.0,
                             mscale=0.707, mscale_all_dim=0.707, original_max_position_embeddings=4096),
        architectures=["DeepseekV2ForCausalLM"])),
}
TITLES = {"lfm2-1.2b": "LFM2-1.2B", "deepseek-v2-lite": "DeepSeek-V2-Lite"}
_REFERENCE = """
import json, sys, torch, transformers
from fx2onnx.deploy.result import peak_rss
folder, prompt, new, out = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
with torch.no_grad():
    tokens = model.generate(torch.tensor([prompt]), max_new_tokens=new, min_new_tokens=new, do_sample=False)
json.dump({"tokens": tokens[0, len(prompt):].tolist(), "peak_rss": peak_rss()}, open(out, "w"))
"""


def write_folder(name: str, folder: str, layers: int) -> None:
    """The bf16 folder of ``name`` with ``layers`` layers (the first ones of the published pattern)."""
    import transformers

    from fx2onnx.testing.tokenizer import tiny_tokenizer
    from fx2onnx.weights import write_random_checkpoint

    class_name, _, values = CONFIGS[name]
    values = dict(values, num_hidden_layers=layers)
    if "layer_types" in values:
        values["layer_types"] = values["layer_types"][:layers]
    config = getattr(transformers, class_name)(**values)
    config.eos_token_id = config.pad_token_id = None  # generate every token asked for
    write_random_checkpoint(config, folder, "bfloat16", seed=0)
    tiny_tokenizer().save_pretrained(folder)


def reference(folder: str, prompt: list[int], new: int) -> dict:
    """transformers' greedy tokens on ``folder`` loaded in float32, in a child process (its memory freed)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    done = subprocess.run([sys.executable, "-c", _REFERENCE, folder, json.dumps(prompt), str(new), path],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"transformers' generate failed:\n{done.stderr[-3000:]}")
    with open(path) as f:
        result = json.load(f)
    os.remove(path)
    return result


def export(exporter: str, checkpoint: str, out: str, precision: str) -> dict:
    """One export in a child process: ``{"seconds", "peak_rss"}``, or ``{"error": its last line}``."""
    if exporter == "fx2onnx":
        quant = ["--quantize", precision] if precision != "float32" else []
        args = ("fx2onnx", "export", checkpoint, "--out", out, "--quiet", "--no-validate", *quant)
    else:
        args = ("onnxruntime_genai.models.builder", "-i", checkpoint, "-o", out, "-p",
                {"float32": "fp32"}.get(precision, precision), "-e", "cpu")
    try:
        return measured(*args)
    except RuntimeError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return {"error": (lines[-1] if lines else "failed").replace(checkpoint, "FOLDER")}


def agreement(tokens: list[int], expected: list[int]) -> int:
    """How many leading tokens are equal."""
    n = 0
    while n < min(len(tokens), len(expected)) and tokens[n] == expected[n]:
        n += 1
    return n


def table(rows: list[dict]) -> dict:
    """The table the design page renders (``MEASURED_PAGES`` format), from every stored row."""
    columns = ["model", "precision", "exporter", "export (s)", "peak (GB)", "files (MB)", "first token (ms)",
               "decode (tokens/s)", "load", "tokens as transformers'"]
    body, notes = [], []
    for r in rows:
        label = f"{TITLES[r['model']]}, {r['layers']} layers"
        if "error" in r:
            notes.append(f"{r['exporter']} refuses {label} (every precision): ``{r['error']}``")
            continue
        agree = (f"all {r['new']} equal" if r["agree"] == r["new"] else f"first {r['agree']} of {r['new']} equal"
                 if r["agree"] else "the first differs")
        body.append([label, r["precision"], r["exporter"], f"{r['export_s']:.1f}", f"{r['peak_rss_gb']:.2f}",
                     str(r["size_mb"]), f"{r['first_token_ms']:.0f}", f"{r['decode_tok_s']:.2f}",
                     f"{r['load'][0]:.1f}", agree])
    tokens = {(r["model"], r["layers"], r["precision"], r["exporter"]): r["tokens"] for r in rows if "tokens" in r}
    for (model, layers, precision, exporter), ours in tokens.items():
        theirs = tokens.get((model, layers, precision, "onnxruntime-genai"))
        if exporter == "fx2onnx" and precision != "float32" and theirs:
            same = agreement(ours, theirs)
            notes.append(f"{TITLES[model]} {precision}: fx2onnx's folder and the builder's give "
                         + (f"the same {same} tokens." if same == len(ours) else f"the same first {same} tokens."))
    if any(r["model"] == "deepseek-v2-lite" and r["precision"] == "int4" and "error" not in r for r in rows):
        notes.append("DeepSeek-V2-Lite int4: the routed experts' weights (a 3-D tensor per layer and projection, "
                     "the chosen experts gathered from it before their product) stay float32, as does the untied "
                     "embedding table (``quantize_embeddings`` is off by default): int4 rounds the 2-D matrices "
                     "only, hence the folder's size.")
    notes = list(dict.fromkeys(notes))
    notes += ["Random weights: their logits are nearly uniform, so an int4 folder's greedy tokens part early from "
              "transformers' float32 ones (both tools' int4 folders alike); float32 folders must give the same tokens.",
              "The machine is shared with other jobs (load: its 1-minute load average when the row was "
              "measured): timings are noisy, decode speeds are the best of interleaved rounds."]
    commands = "; ".join(dict.fromkeys(r["command"] for r in rows))
    return dict(title="Real widths of the new families", conditions=(
        f"bf16 folders with random weights, {rows[0]['prompt']} prompt tokens, {rows[0]['new']} new ones, greedy, "
        "one intra-op thread; peak: the export's resident memory."), date=max(r["date"] for r in rows),
        machine=f"{os.cpu_count()} cores", versions=rows[-1]["versions"], command=commands,
        columns=columns, rows=body, notes=notes)


def store(rows: list[dict], json_path: str) -> None:
    """Merges ``rows`` into ``json_path`` (a row replaces the one of the same model, layers, precision and
    exporter) and rewrites its table."""
    key = lambda r: (r["model"], r["layers"], r["precision"], r["exporter"])  # noqa: E731
    kept = []
    if os.path.isfile(json_path):
        with open(json_path, encoding="utf-8") as f:
            new_keys = {key(r) for r in rows}
            kept = [r for r in json.load(f)["rows"] if key(r) not in new_keys]
    order = list(CONFIGS)
    merged = sorted(kept + rows, key=lambda r: (order.index(r["model"]), r["layers"], r["precision"] != "float32",
                                                r["exporter"] != "fx2onnx"))
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(dict(page="design/deploy", tables=dict(real_size=table(merged)), findings={}, rows=merged),
                  f, indent=1)
        f.write("\n")


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="lfm2-1.2b", choices=sorted(CONFIGS))
    parser.add_argument("--layers", type=int, default=None, help="default: the number of layers measured")
    parser.add_argument("--precisions", default="float32,int4")
    parser.add_argument("--prompt", type=int, default=24)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--exporters", default="fx2onnx,onnxruntime-genai")
    parser.add_argument("--json", default=None, help="the rows written (merged) into this file")
    args = parser.parse_args(argv)
    layers = args.layers or CONFIGS[args.model][1]
    command = "python " + " ".join([os.path.relpath(sys.argv[0]) if argv is None else "bench_real_size_families.py",
                                    *(sys.argv[1:] if argv is None else argv)])
    rows = []
    with tempfile.TemporaryDirectory() as work:
        checkpoint = os.path.join(work, "checkpoint")
        write_folder(args.model, checkpoint, layers)
        print(f"folder: {folder_size(checkpoint) / 1e9:.2f} GB", flush=True)
        prompt = [int(i) for i in np.random.default_rng(0).integers(3, 300, args.prompt)]
        expected = reference(checkpoint, prompt, args.new)
        print(f"transformers (float32): peak {expected['peak_rss'] / 1e9:.2f} GB, {expected['tokens']}", flush=True)
        for precision in args.precisions.split(","):
            measures = {}
            for exporter in args.exporters.split(","):
                out = os.path.join(work, f"{exporter}_{precision}")
                measures[exporter] = (out, export(exporter, checkpoint, out, precision))
                print(exporter, precision, measures[exporter][1], flush=True)
            loops = {name: run_ours(out, prompt, args.new, args.threads) if name == "fx2onnx"
                     else run_genai(out, prompt, args.new, args.threads)
                     for name, (out, m) in measures.items() if "error" not in m}
            best: dict[str, tuple] = {}
            for _ in range(args.rounds):  # interleaved rounds, the best of each
                for name, once in loops.items():
                    tokens, prefill, decode, steps = once()
                    if name in best:
                        prefill, decode = min(prefill, best[name][1]), min(decode, best[name][2])
                    best[name] = (tokens, prefill, decode, steps)
            for name, (out, m) in measures.items():
                row = dict(model=args.model, layers=layers, precision=precision, exporter=name, prompt=args.prompt,
                           new=args.new, threads=args.threads)
                if "error" in m:
                    row["error"] = m["error"]
                else:
                    tokens, prefill, decode, steps = best[name]
                    row.update(export_s=round(m["seconds"], 1), peak_rss_gb=round(m["peak_rss"] / 1e9, 2),
                               size_mb=round(folder_size(out) / 1e6), first_token_ms=round(prefill * 1e3, 1),
                               decode_tok_s=round(steps / decode, 2), agree=agreement(tokens, expected["tokens"]),
                               tokens=tokens)
                row.update(load=[round(x, 2) for x in os.getloadavg()], date=time.strftime("%Y-%m-%d", time.gmtime()),
                           command=command, versions=run_versions())
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k not in ("tokens", "versions")}), flush=True)
            loops = once = None
            for out, _ in measures.values():
                shutil.rmtree(out, ignore_errors=True)
        if args.json:
            for row in rows:
                row["reference"] = expected["tokens"]
    if args.json:
        store(rows, args.json)
    return rows


if __name__ == "__main__":
    main()
