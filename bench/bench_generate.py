"""Greedy generation: fx2onnx.generate on onnxruntime against transformers' eager generate.

The benchmark Llama (hidden 512, 4 layers, 8 heads, 2 kv heads, ffn 1376, vocab 32000,
sdpa attention, random weights) exported with a cache by ``fx2onnx.to_onnx`` at each
optimization level; a prompt of 128 tokens, 64 new tokens, batch 1, one thread for torch
and onnxruntime. For each level: new tokens per second (prefill included, best of
``--repeat`` runs), the tokens equal to transformers', and the overhead of the loop per
token: the time of a decode step in the loop minus the time of onnxruntime's run in it
(:class:`fx2onnx.runtime.GenerationTimes`). ``--quick`` uses a tiny Llama.

    python bench/bench_generate.py [--quick] [--levels default,onnxruntime] [--repeat 5]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import time

import onnxruntime
import torch

import fx2onnx
from fx2onnx.zoo import get_tiny_model
from fx2onnx.runtime import OnnxGenerator


def llama(quick: bool):
    config = dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                  intermediate_size=1376, vocab_size=32000)
    if quick:
        config = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, vocab_size=1024)
    tiny = get_tiny_model("llama", with_cache=True, attn_implementation="sdpa", max_position_embeddings=512,
                          **config)
    tiny.model.generation_config.eos_token_id = None
    return tiny


def best(fn, repeat: int) -> tuple[float, object]:
    """(best time, result of that run)"""
    results = []
    for _ in range(repeat):
        begin = time.perf_counter()
        out = fn()
        results.append((time.perf_counter() - begin, out))
    return min(results, key=lambda r: r[0])


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--levels", default="default,onnxruntime")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=64)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    tiny = llama(args.quick)
    ids = torch.randint(3, tiny.config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(0))

    def eager():
        with torch.no_grad():
            return tiny.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                       max_new_tokens=args.new, pad_token_id=0)

    eager_time, expected = best(eager, args.repeat)
    rows = [dict(runtime="transformers eager", tokens_per_s=args.new / eager_time)]
    for level in args.levels.split(","):
        with fx2onnx.torch_export_patches(patch_transformers=True), contextlib.redirect_stderr(io.StringIO()):
            onx = fx2onnx.to_onnx(tiny.model, (), kwargs=copy.deepcopy(tiny.inputs),
                                  dynamic_shapes=tiny.dynamic_shapes, optimize=level)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        generator = OnnxGenerator(onx, session_options=options)  # the argmax added to the graph

        def run():
            tokens = generator.generate(ids, args.new)
            return tokens, generator.last_times

        onnx_time, (tokens, times) = best(run, args.repeat)
        rows.append(dict(
            runtime=f"fx2onnx.generate [{level}]",
            tokens_per_s=args.new / onnx_time,
            equal=f"{int((tokens[:, args.prompt:] == expected[:, args.prompt:]).sum())}/{args.new}",
            step_us=times.decode_total / times.decode_steps * 1e6,
            model_us=times.decode_model / times.decode_steps * 1e6,
            overhead_us=times.overhead_per_token * 1e6,
            overhead_share=times.overhead_share,
            median_overhead_us=times.median_overhead * 1e6,
        ))
    for row in rows:
        extra = ""
        if "equal" in row:
            extra = (f"  tokens equal {row['equal']}, decode step {row['step_us']:.0f} us (model {row['model_us']:.0f} "
                     f"us, loop overhead {row['overhead_us']:.0f} us = {row['overhead_share']:.1%}, "
                     f"median {row['median_overhead_us']:.0f} us)")
        print(f"{row['runtime']:<32} {row['tokens_per_s']:8.1f} tokens/s{extra}")
    return rows


if __name__ == "__main__":
    main()
