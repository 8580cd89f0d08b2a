"""A checkpoint folder exported by fx2onnx and by onnxruntime-genai's model builder, run side by side.

Writes a bf16 ``save_pretrained`` folder of a published config (random weights, seeded; the
tokenizer made in code, so the vocabulary of the config is kept by the model but the prompt
uses the tokenizer's ids), then for each precision:

* ``python -m fx2onnx export FOLDER --out OUT [--quantize int4]`` and
  ``python -m onnxruntime_genai.models.builder -i FOLDER -o OUT -p int4|fp32 -e cpu``, each in
  a child process: wall time, peak RSS (the child's ``VmHWM``), folder size;
* the two loops on the same prompt, interleaved rounds, same onnxruntime and threads: the
  fx2onnx loop (:class:`fx2onnx.runtime.folder.FolderGenerator`) and onnxruntime-genai's
  ``Generator`` on its own folder, greedy: prefill and decode tokens/s, and whether the
  tokens are equal (random weights: the two int4 quantizations differ, float32 should agree).

Everything is written in a temporary folder removed at the end (each precision's exports as
soon as measured). The checkpoint folder is written tensor by tensor
(:func:`fx2onnx.weights.write_random_checkpoint`): a 7B folder never holds the model in memory.
Configs: Qwen3-0.6B, Llama-3.2-1B, gemma-2-2b, Mistral-7B-v0.3 (published values).

    python bench/bench_deploy.py --model qwen3-0.6b --precisions float32,int4 --threads 1 --new 32
    python bench/bench_deploy.py --model llama-3.2-1b --precisions int4,float32 --new 32
    python bench/bench_deploy.py --model gemma-2-2b --precisions int4 --new 32
    # 14.5 GB of bf16 checkpoint on disk; onnxruntime-genai's builder would need the model in memory
    python bench/bench_deploy.py --model mistral-7b-v0.3 --precisions int4 --exporters fx2onnx --new 8 --rounds 1
    python bench/bench_deploy.py --model qwen3-0.6b --layers 2   # a quick run
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

#: published configs (values from the models' config.json files)
CONFIGS = {
    "qwen3-0.6b": ("Qwen3Config", dict(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
        rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, architectures=["Qwen3ForCausalLM"])),
    "llama-3.2-1b": ("LlamaConfig", dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
        rope_theta=500_000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_scaling=dict(factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
                          original_max_position_embeddings=8192, rope_type="llama3"),
        architectures=["LlamaForCausalLM"])),
    "gemma-2-2b": ("Gemma2Config", dict(
        hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, vocab_size=256000, max_position_embeddings=8192,
        rope_theta=10_000.0, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh", sliding_window=4096,
        query_pre_attn_scalar=256, final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
        tie_word_embeddings=True, architectures=["Gemma2ForCausalLM"])),
    "mistral-7b-v0.3": ("MistralConfig", dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=32768, max_position_embeddings=32768,
        rope_theta=1_000_000.0, rms_norm_eps=1e-5, sliding_window=None, tie_word_embeddings=False,
        architectures=["MistralForCausalLM"])),
}
#: the exporters compared
EXPORTERS = ("fx2onnx", "onnxruntime-genai")
_MEASURED = """
import json, runpy, sys, time
out, module, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv = [module] + argv
begin = time.perf_counter()
try:
    runpy.run_module(module, run_name="__main__")
except SystemExit as e:
    if e.code not in (None, 0):
        raise
# VmHWM, not ru_maxrss: Linux keeps in ru_maxrss the peak of the process before exec (a fork of the
# benchmark, which holds the loaded models)
from fx2onnx.deploy.export import peak_rss
json.dump({"seconds": time.perf_counter() - begin, "peak_rss": peak_rss()}, open(out, "w"))
"""


def write_folder(name: str, folder: str, layers: int | None) -> None:
    import transformers

    from fx2onnx.testing.tokenizer import tiny_tokenizer
    from fx2onnx.weights import write_random_checkpoint

    class_name, values = CONFIGS[name]
    config = getattr(transformers, class_name)(**dict(values, num_hidden_layers=layers or values["num_hidden_layers"]))
    tok = tiny_tokenizer()
    config.eos_token_id = config.pad_token_id = None  # generate every token asked for
    write_random_checkpoint(config, folder, "bfloat16", seed=0)
    tok.save_pretrained(folder)


def measured(module: str, *argv: str) -> dict:
    """Runs ``python -m module argv`` in a child process: its wall time and peak RSS."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    done = subprocess.run([sys.executable, "-c", _MEASURED, path, module, *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    with open(path) as f:
        result = json.load(f)
    os.remove(path)
    return result


def folder_size(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder) for f in files)


def export_both(checkpoint: str, work: str, precision: str, exporters=EXPORTERS,
                builder_may_fail: bool = False) -> dict[str, tuple[str, dict]]:
    """Exports ``checkpoint`` at ``precision`` with each of ``exporters``, each in a child process,
    into ``work/<exporter>_<precision>`` (fx2onnx without its check: the builder has none):
    ``{exporter: (folder, {"seconds", "peak_rss"})}``. ``builder_may_fail``: a failure of
    onnxruntime-genai's builder (an architecture it does not know) is printed, its row left out."""
    ours, theirs = os.path.join(work, f"fx2onnx_{precision}"), os.path.join(work, f"genai_{precision}")
    quant = ["--quantize", precision] if precision != "float32" else []
    measures = {}
    if "fx2onnx" in exporters:
        measures["fx2onnx"] = (ours, measured("fx2onnx", "export", checkpoint, "--out", ours, "--quiet",
                                              "--no-validate", *quant))
    if "onnxruntime-genai" in exporters:
        try:
            measures["onnxruntime-genai"] = (theirs, measured(
                "onnxruntime_genai.models.builder", "-i", checkpoint, "-o", theirs, "-p",
                {"float32": "fp32"}.get(precision, precision), "-e", "cpu"))
        except RuntimeError as e:
            if not builder_may_fail:
                raise
            print(f"onnxruntime-genai's builder failed: {str(e).splitlines()[-1]}")
    return measures


def _row_key(row: dict) -> tuple:
    """What a merged row replaces: the same model, precision, exporter and prompt length."""
    return row["model"], row["precision"], row["exporter"], row.get("prompt", 24)


def run_versions() -> dict[str, str]:
    """The versions of the packages a measure depends on (those installed)."""
    from importlib import metadata

    versions = {}
    for name in ("fx2onnx", "torch", "transformers", "onnxruntime", "onnxruntime-genai"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def report(rows: list[dict], json_path: str | None = None, merge: bool = False) -> None:
    """Prints the rows as a table; writes them in ``json_path`` with the machine's cores and load,
    each row with its date, command and versions.
    ``merge``: the rows of an existing file are kept unless a new row has the same model, precision,
    exporter and prompt length (runs of several models gather in one file)."""
    import pandas

    print(pandas.DataFrame(rows).to_string(index=False))
    for row in rows:  # where each row comes from: the pages render these beside the values
        row.setdefault("date", time.strftime("%Y-%m-%d", time.gmtime()))
        row.setdefault("command", "python " + " ".join(sys.argv))
        row.setdefault("versions", run_versions())
    if json_path:
        kept = []
        if merge and os.path.isfile(json_path):
            with open(json_path, encoding="utf-8") as f:
                new_keys = {_row_key(r) for r in rows}
                kept = [r for r in json.load(f)["rows"] if _row_key(r) not in new_keys]
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(dict(rows=kept + rows, cpus=os.cpu_count(), load=os.getloadavg()), f, indent=1)


def run_ours(folder: str, prompt: list[int], new: int, threads: int):
    from fx2onnx.runtime.folder import FolderGenerator

    gen = FolderGenerator(folder, threads=threads)

    def once():
        r = gen.generate_text(prompt, new)
        return r.new_ids, r.times.prefill_total, r.times.decode_total, r.times.decode_steps

    return once


def run_genai(folder: str, prompt: list[int], new: int, threads: int, window: int = 0):
    """onnxruntime-genai's loop; ``window``: the sliding window of the model (its cache must hold at
    least that many positions: the length is raised to it and the loop stops after ``new`` tokens)."""
    import onnxruntime_genai as og

    config = og.Config(folder)
    config.clear_providers()
    with open(os.path.join(folder, "genai_config.json")) as f:
        data = json.load(f)
    data["model"]["decoder"]["session_options"]["intra_op_num_threads"] = threads
    with open(os.path.join(folder, "genai_config.json"), "w") as f:
        json.dump(data, f)
    model = og.Model(folder)

    def once():
        params = og.GeneratorParams(model)
        length = max(len(prompt) + new, window)
        params.set_search_options(max_length=length, min_length=length, do_sample=False)
        gen = og.Generator(model, params)
        begin = time.perf_counter()
        gen.append_tokens(np.array([prompt], dtype=np.int32))
        gen.generate_next_token()
        tokens = [int(gen.get_next_tokens()[0])]
        prefill = time.perf_counter() - begin
        begin = time.perf_counter()
        while not gen.is_done() and len(tokens) < new:
            gen.generate_next_token()
            tokens.append(int(gen.get_next_tokens()[0]))
        return tokens, prefill, time.perf_counter() - begin, len(tokens) - 1

    return once


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen3-0.6b", choices=sorted(CONFIGS))
    parser.add_argument("--layers", type=int, default=None, help="fewer layers than published (a quick run)")
    parser.add_argument("--precisions", default="float32,int4")
    parser.add_argument("--prompt", type=int, default=24)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None, help="the rows written (merged) into this file")
    parser.add_argument("--exporters", default=",".join(EXPORTERS),
                        help="fx2onnx alone for a model onnxruntime-genai's builder cannot hold in memory")
    args = parser.parse_args(argv)
    exporters = args.exporters.split(",")
    if set(exporters) - set(EXPORTERS):
        parser.error(f"--exporters {args.exporters!r}: choose among {','.join(EXPORTERS)}")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        checkpoint = os.path.join(work, "checkpoint")
        write_folder(args.model, checkpoint, args.layers)
        prompt = [int(i) for i in np.random.default_rng(0).integers(3, 300, args.prompt)]
        for precision in args.precisions.split(","):
            measures = export_both(checkpoint, work, precision, exporters)
            window = CONFIGS[args.model][1].get("sliding_window") or 0
            loops = {name: run_ours(folder, prompt, args.new, args.threads) if name == "fx2onnx"
                     else run_genai(folder, prompt, args.new, args.threads, window)
                     for name, (folder, _) in measures.items()}
            best: dict[str, tuple] = {}
            for _ in range(args.rounds):  # interleaved rounds, the best of each
                for name, once in loops.items():
                    tokens, prefill, decode, steps = once()
                    previous = best.get(name)
                    best[name] = (tokens, min(prefill, previous[1]) if previous else prefill,
                                  min(decode, previous[2]) if previous else decode, steps)
            same = best["fx2onnx"][0] == best["onnxruntime-genai"][0] if len(best) == 2 else None
            for name, (folder, m) in measures.items():
                tokens, prefill, decode, steps = best[name]
                rows.append(dict(model=args.model, precision=precision, exporter=name,
                                 export_s=round(m["seconds"], 1), peak_rss_gb=round(m["peak_rss"] / 1e9, 2),
                                 size_mb=round(folder_size(folder) / 1e6), prefill_tok_s=round(args.prompt / prefill, 1),
                                 decode_tok_s=round(steps / decode, 2), same_tokens=same, prompt=args.prompt,
                                 new=args.new))
            print(json.dumps(rows[-len(measures):]), flush=True)
            loops = once = None
            for folder, _ in measures.values():  # a 7B folder's exports take disk: one precision at a time
                shutil.rmtree(folder, ignore_errors=True)
    report(rows, args.json, merge=True)
    return rows


if __name__ == "__main__":
    main()
