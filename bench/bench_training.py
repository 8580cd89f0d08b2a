"""Training step of a Llama-shaped decoder: eager, inductor and fx2onnx's onnxruntime backend.

Every measure runs in its own child process (peak memory is the child's
``resource.getrusage(RUSAGE_SELF).ru_maxrss``): build the model (seeded, training
mode, transformers' default configuration but for the sizes: ``use_cache=True``,
sdpa attention), one step with ``labels=input_ids`` and AdamW whose gradients are
saved, then ``--warmup`` steps and ``--repeat`` timed steps (``zero_grad``, forward,
backward, ``optimizer.step``): the median of their wall times (``step_ms``) and of
their process times (``cpu_ms``, all threads, steadier on a busy machine). The parent
compares the first step's gradients with eager's and prints one row per (hidden
size, threads, engine).

Engines: ``eager``; ``inductor`` (``torch.compile``'s default); ``ort``
(``make_onnxruntime_backend(threads=...)``, the converted graphs as they are);
``ort_fused`` (the same with ``optimize="onnxruntime"``: the optimizer's clean-up and
onnxruntime's fused operators); ``ort_default`` (``optimize=True``: the clean-up only).

``--interleave`` runs the engines in one process instead, one step of each in
turn (a busy machine slows them alike): the medians of their wall and process
times, and of the process time of the forward, the backward and the optimizer's
step (``fwd_ms``, ``bwd_ms``, ``opt_ms``); no peak memory (the engines share the process).

.. code-block:: bash

    python bench/bench_training.py                       # hidden 256 and 512, 1 and 2 threads
    python bench/bench_training.py --hidden 256 --threads 1 --repeat 5 --engines eager,ort
    python bench/bench_training.py --threads 1 --interleave --repeat 20
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

ENGINES = ("eager", "inductor", "ort", "ort_fused", "ort_default")


def build_model(hidden: int, layers: int, vocab: int, seed: int = 0) -> Any:
    """A LlamaForCausalLM of transformers' default configuration with the given sizes (64 per head)."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,  # Llama's ratio (11008 / 4096 is about 2.7)
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        vocab_size=vocab,
        max_position_embeddings=2048,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).train()


def _compiled(model: Any, engine: str, threads: int) -> tuple[Any, Any]:
    import torch

    if engine == "eager":
        return model, None
    if engine == "inductor":
        return torch.compile(model), None
    from fx2onnx.backend import make_onnxruntime_backend

    optimize = {"ort": False, "ort_fused": "onnxruntime", "ort_default": True}[engine]
    backend = make_onnxruntime_backend(threads=threads, optimize=optimize)
    return torch.compile(model, backend=backend), backend


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Measures one engine in this process; returns the row (gradients saved in ``spec["grads"]``)."""
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(spec["threads"])
    model = build_model(spec["hidden"], spec["layers"], spec["vocab"])
    compiled, backend = _compiled(model, spec["engine"], spec["threads"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, spec["vocab"], (spec["batch"], spec["seq"]), generator=torch.Generator().manual_seed(1))

    def step() -> tuple[float, float]:
        begin, cpu = time.perf_counter(), time.process_time()
        optimizer.zero_grad(set_to_none=True)
        loss = compiled(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        return time.perf_counter() - begin, time.process_time() - cpu

    begin = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    first = time.perf_counter() - begin
    torch.save({n.removeprefix("_orig_mod."): p.grad for n, p in model.named_parameters()}, spec["grads"])
    optimizer.step()
    for _ in range(spec["warmup"]):
        step()
    measures = [step() for _ in range(spec["repeat"])]
    times, cpu_times = [m[0] for m in measures], [m[1] for m in measures]
    row = dict(
        hidden=spec["hidden"],
        threads=spec["threads"],
        engine=spec["engine"],
        step_ms=statistics.median(times) * 1e3,
        min_ms=min(times) * 1e3,
        cpu_ms=statistics.median(cpu_times) * 1e3,
        first_step_s=first,
        peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        loss=float(loss),
    )
    if backend is not None:
        stats = backend.stats()
        row["graphs"], row["fallbacks"] = stats["graphs"], stats["fallbacks"]
        for runner in backend.runners:
            kind = runner.name.split("_", 1)[1]
            row[f"fx_{kind}"] = len(runner.gm.graph.nodes)
            row[f"onnx_{kind}"] = runner.node_count
    return row


def run_interleaved(hidden: int, threads: int, engines: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """All engines in this process, one training step of each in turn; returns one row per engine."""
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(1))
    runs = {}
    for engine in engines:
        model = build_model(hidden, args.layers, args.vocab)
        compiled, backend = _compiled(model, engine, threads)
        runs[engine] = (model, compiled, backend, torch.optim.AdamW(model.parameters(), lr=1e-4))
    grads, first, measures = {}, {}, {e: [] for e in engines}
    for engine, (model, compiled, _, optimizer) in runs.items():
        begin = time.perf_counter()
        compiled(input_ids=ids, labels=ids).loss.backward()
        first[engine] = time.perf_counter() - begin
        grads[engine] = {n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters()}
        optimizer.step()
    for i in range(args.warmup + args.repeat):
        for engine, (model, compiled, _, optimizer) in runs.items():
            begin, cpu = time.perf_counter(), time.process_time()
            optimizer.zero_grad(set_to_none=True)
            loss = compiled(input_ids=ids, labels=ids).loss
            forward = time.process_time()
            loss.backward()
            backward = time.process_time()
            optimizer.step()
            end = time.process_time()
            if i >= args.warmup:
                measures[engine].append((time.perf_counter() - begin, end - cpu, forward - cpu, backward - forward, end - backward))
    rows = []
    for engine in engines:
        times, cpu_times = [m[0] for m in measures[engine]], [m[1] for m in measures[engine]]
        row = dict(hidden=hidden, threads=threads, engine=engine, step_ms=statistics.median(times) * 1e3,
                   min_ms=min(times) * 1e3, cpu_ms=statistics.median(cpu_times) * 1e3, first_step_s=first[engine])
        # where the CPU time goes: forward, backward, the optimizer's step (eager AdamW for every engine)
        for k, name in enumerate(("fwd_ms", "bwd_ms", "opt_ms"), start=2):
            row[name] = statistics.median(m[k] for m in measures[engine]) * 1e3
        if "eager" in grads:
            row["grad_diff"] = max(float((grads[engine][n] - g).abs().max()) for n, g in grads["eager"].items() if g is not None)
        rows.append(row)
    return rows


def _max_grad_diff(path: str, reference: str) -> float:
    import torch

    got, expected = torch.load(path), torch.load(reference)
    diffs = [
        float((got[n] - g).abs().max()) if got.get(n) is not None else float("inf")
        for n, g in expected.items()
        if g is not None
    ]
    return max(diffs)


def measure(hidden: int, threads: int, engine: str, args: argparse.Namespace, grads: str) -> dict[str, Any]:
    """Runs one child process and returns its row."""
    spec = dict(
        hidden=hidden, threads=threads, engine=engine, layers=args.layers, vocab=args.vocab,
        seq=args.seq, batch=args.batch, warmup=args.warmup, repeat=args.repeat, grads=grads,
    )
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
        capture_output=True, text=True, env=env, check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        lines = (done.stderr or done.stdout).strip().splitlines()
        error = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "no output")
        return dict(hidden=hidden, threads=threads, engine=engine, error=error.strip()[:200])
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Runs the benchmark; returns the rows (also printed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", default="256,512", help="hidden sizes (64 per attention head)")
    parser.add_argument("--threads", default="1,2", help="torch and onnxruntime threads")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"among {ENGINES}")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096,
                        help="vocabulary (Llama's 32000 makes the output layer most of the step, the same GEMM everywhere)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2, help="steps after the first one, not timed")
    parser.add_argument("--repeat", type=int, default=10, help="timed steps (the median is reported)")
    parser.add_argument("--csv", default=None, help="also writes the rows there")
    parser.add_argument("--interleave", action="store_true",
                        help="all engines in one process, one step of each in turn (no peak memory)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(json.loads(args.child))))
        return []
    engines = args.engines.split(",")
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engines {unknown}, expected some of {ENGINES}")
    if "eager" in engines:
        engines = ["eager"] + [e for e in engines if e != "eager"]  # the gradients' reference first
    rows = []
    if args.interleave:
        for hidden in (int(h) for h in args.hidden.split(",")):
            for threads in (int(t) for t in args.threads.split(",")):
                for row in run_interleaved(hidden, threads, engines, args):
                    rows.append(row)
                    print(_format_row(row), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        for hidden in (int(h) for h in args.hidden.split(",")):
            for threads in (int(t) for t in args.threads.split(",")):
                reference = os.path.join(folder, f"eager_{hidden}_{threads}.pt")
                for engine in engines if not args.interleave else []:
                    grads = os.path.join(folder, f"{engine}_{hidden}_{threads}.pt")
                    row = measure(hidden, threads, engine, args, grads)
                    if "error" not in row and os.path.exists(reference):
                        row["grad_diff"] = _max_grad_diff(grads, reference)
                    rows.append(row)
                    print(_format_row(row), flush=True)
    for row in rows:
        eager = next((r for r in rows if r["engine"] == "eager" and r["hidden"] == row["hidden"]
                      and r["threads"] == row["threads"] and "step_ms" in r), None)
        if eager is not None and "step_ms" in row:
            row["vs_eager"] = row["step_ms"] / eager["step_ms"]
            row["cpu_vs_eager"] = row["cpu_ms"] / eager["cpu_ms"]
    _print_table(rows)
    if args.csv:
        import pandas

        pandas.DataFrame(rows).to_csv(args.csv, index=False)
    return rows


def _format_row(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"hidden={row['hidden']} threads={row['threads']} {row['engine']}: ERROR {row['error']}"
    return (
        f"hidden={row['hidden']} threads={row['threads']} {row['engine']:>11}: median step {row['step_ms']:.1f} ms, "
        f"first step {row['first_step_s']:.1f} s, " + (f"peak {row['peak_mb']:.0f} MB, " if "peak_mb" in row else "")
        + f"grad diff {row.get('grad_diff', 0):.1e}"
    )


def _print_table(rows: list[dict[str, Any]]) -> None:
    import pandas

    df = pandas.DataFrame(rows)
    columns = [c for c in ["hidden", "threads", "engine", "step_ms", "vs_eager", "min_ms", "cpu_ms", "cpu_vs_eager", "fwd_ms", "bwd_ms", "opt_ms", "first_step_s", "peak_mb",
                           "grad_diff", "fx_forward", "onnx_forward", "fx_backward", "onnx_backward", "fallbacks", "error"]
               if c in df.columns]
    for c in ("fx_forward", "onnx_forward", "fx_backward", "onnx_backward", "fallbacks"):
        if c in df.columns:
            df[c] = df[c].astype("Int64")
    print()
    print(df[columns].to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
