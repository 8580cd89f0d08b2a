"""Latency of exported models: to_onnx at each optimization level against dynamo, eager
and torch.compile, on onnxruntime CPU.

Scenarios: a Llama (hidden 512, 4 layers, 8 heads, 2 kv heads, ffn 1376) and a phi-2
shaped model (hidden 640, 4 layers, 8 heads of 80, ffn 2560, rotary on 40% of each head,
biases, LayerNorm, gelu) in prefill (batch 1 x 128 tokens, vocab 1024, no cache) and in
decode (1 token after 255 cached, vocab 32000), an MLP and a CNN; ``--quick`` uses tiny
models and shorter sequences.
Every ONNX model is checked against eager on the benchmark inputs before being timed.
Latencies are medians of many runs after a warm-up, the runs of all exporters
interleaved in one process so that a busy machine slows them alike.

    python bench/bench_models.py [--quick] [--threads 1,2] [--repeat 50]
        [--scenarios llama-prefill,llama-decode,phi-prefill,phi-decode,mlp,cnn,llama-generate]
        [--exporters ...] [--profile] [--gen-repeat 10]

``llama-generate``: greedy generation with the benchmark Llama (its weights trained by
``trained_llama.py``, random with ``--quick``): new tokens per second of ``fx2onnx.generate``
for 64 new tokens after a 128-token prompt (16 after 32 with ``--quick``) at float32, int8 and
int4 (the exporters ``to_onnx[onnxruntime]``, ``to_onnx[onnxruntime,int8|int4]`` among
``--exporters``) against transformers' eager ``generate(do_sample=False)`` at float32, one
thread; the generations of all runtimes interleaved in a shuffled order, ``--repeat`` rounds
(``--gen-repeat``), the median and the spread (min, max) of each; the loop's overhead per
token: the time of a decode step minus onnxruntime's run in it
(:class:`fx2onnx.runtime.GenerationTimes`).

Exporters: ``to_onnx[<level>]``, ``to_onnx[onnxruntime,int4]`` and ``to_onnx[onnxruntime,int8]``
(weight-only quantization, their rows give the logits' max and mean difference from eager and
how often the greedy token is the same), ``dynamo``, ``dynamo+optimize``, ``dynamo+ort``,
``eager``, ``compile``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import io
import logging
import random
import re
import statistics
import time
import warnings
from typing import Any, Callable

import onnx
import torch

import fx2onnx
from fx2onnx.zoo import export_dynamic_shapes, get_tiny_model
from fx2onnx.zoo.vision import small_cnn

LEVELS = ("default", "onnxruntime", "opset23")
#: weight-only quantization on top of the onnxruntime level (MatMulNBits, blocks of 32)
QUANTIZED = ("int8", "int4")
EXPORTERS = tuple(f"to_onnx[{lv}]" for lv in LEVELS) + tuple(f"to_onnx[onnxruntime,{q}]" for q in QUANTIZED) + (
    "dynamo", "dynamo+optimize", "dynamo+ort", "eager", "compile",
)
MATMUL_OPS = ("MatMul", "Gemm", "FusedMatMul", "FusedGemm", "MatMulNBits")


@dataclasses.dataclass
class Scenario:
    """A model, the inputs it is exported with and the inputs it is timed on."""

    name: str
    model: torch.nn.Module
    export_kwargs: dict[str, Any]
    dynamic_shapes: Any
    bench_kwargs: dict[str, Any]
    patches: bool = False


def _llama_config(quick: bool) -> dict[str, Any]:
    if quick:
        return dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128)
    return dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, intermediate_size=1376)


def _phi_config(quick: bool) -> dict[str, Any]:
    """phi-2's shape, scaled down: multi-head attention with biases, a rotary embedding on 40% of each
    head, LayerNorm, gelu_new, attention and MLP in parallel on one normalization."""
    if quick:
        return dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                    intermediate_size=256, partial_rotary_factor=0.4)
    # phi-2's head size (80, 32 of them rotated), a fourth of its width
    return dict(hidden_size=640, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
                intermediate_size=2560, partial_rotary_factor=0.4)


def _decoder(name: str, arch: str, config: dict[str, Any], quick: bool, decode: bool) -> Scenario:
    """Prefill (batch 1, 128 tokens, vocab 1024) or decode (1 token after 255 cached, vocab 32000)."""
    from fx2onnx.zoo.tiny import _decoder_inputs

    vocab = 32000 if decode and not quick else 1024
    tiny = get_tiny_model(arch, with_cache=decode, attn_implementation="sdpa", vocab_size=vocab, **config)
    gen = torch.Generator().manual_seed(7)
    if decode:
        bench = _decoder_inputs(tiny.config, 1, 1, 31 if quick else 255, with_cache=True, position_ids=True, generator=gen)
    else:
        bench = _decoder_inputs(tiny.config, 1, 32 if quick else 128, 0, with_cache=False, position_ids=True, generator=gen)
    return Scenario(name, tiny.model, tiny.inputs, tiny.dynamic_shapes, bench, patches=True)


def llama_prefill(quick: bool) -> Scenario:
    return _decoder("llama-prefill", "llama", _llama_config(quick), quick, decode=False)


def llama_decode(quick: bool) -> Scenario:
    return _decoder("llama-decode", "llama", _llama_config(quick), quick, decode=True)


def llama_decode_wide(quick: bool) -> Scenario:
    """The decode step at TinyLlama-1.1B's width (hidden 2048, 16 heads, 4 kv heads, ffn 5632), 4 of its 22
    layers: where the share of time outside the matmuls stands once they are as wide as a real model's
    (not in the default run: 1.2 GB of float32 weights)."""
    config = dict(hidden_size=2048, num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
                  intermediate_size=5632)
    return _decoder("llama-decode-wide", "llama", _llama_config(True) if quick else config, quick, decode=True)


def phi_prefill(quick: bool) -> Scenario:
    return _decoder("phi-prefill", "phi", _phi_config(quick), quick, decode=False)


def phi_decode(quick: bool) -> Scenario:
    return _decoder("phi-decode", "phi", _phi_config(quick), quick, decode=True)


def mlp(quick: bool) -> Scenario:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    ).eval()
    return Scenario("mlp", model, {"input": torch.randn(8, 64)}, {"input": {0: "batch"}}, {"input": torch.randn(32, 64)})


def cnn(quick: bool) -> Scenario:
    model = small_cnn()
    return Scenario("cnn", model, {"input": torch.randn(4, 3, 32, 32)}, {"input": {0: "batch"}}, {"input": torch.randn(8, 3, 32, 32)})


SCENARIOS: dict[str, Callable[[bool], Scenario]] = {
    "llama-prefill": llama_prefill, "llama-decode": llama_decode, "phi-prefill": phi_prefill,
    "phi-decode": phi_decode, "mlp": mlp, "cnn": cnn, "llama-decode-wide": llama_decode_wide,
}
#: the scenarios run when none is named
DEFAULT_SCENARIOS = [name for name in SCENARIOS if name != "llama-decode-wide"]
#: the generation scenario (not a single call: bench_generation, not bench)
GENERATE = "llama-generate"
#: the exporters the generation scenario runs, when asked for
GENERATE_EXPORTERS = ("to_onnx[onnxruntime]",) + tuple(f"to_onnx[onnxruntime,{q}]" for q in QUANTIZED)


def bench_generation(quick: bool, exporters: list[str], repeat: int) -> list[dict]:
    """Greedy generation, see the module's docstring: one row per runtime (``threads`` 1)."""
    import numpy as np
    import onnxruntime

    from fx2onnx.runtime import OnnxGenerator

    prompt_length, new = (32, 16) if quick else (128, 64)
    if quick:  # the gallery's: no training in the docs build
        tiny = get_tiny_model("llama", with_cache=True, attn_implementation="sdpa", max_position_embeddings=512,
                              **_llama_config(True))
        tiny.model.generation_config.eos_token_id = None
        ids = torch.randint(3, tiny.config.vocab_size, (1, prompt_length), generator=torch.Generator().manual_seed(0))
    else:
        import trained_llama

        tiny = trained_llama.trained_llama(quick)
        ids = trained_llama.Corpus(tiny.config.vocab_size).sample(1, prompt_length, seed=79)
    torch.set_num_threads(1)
    runs: dict[str, Callable[[], Any]] = {}

    def eager():
        with torch.no_grad():
            return tiny.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                                       min_new_tokens=new, pad_token_id=0), None

    runs["transformers"] = eager
    with fx2onnx.torch_export_patches(patch_transformers=True):
        for name in GENERATE_EXPORTERS:
            if name not in exporters:
                continue
            quantize = name[len("to_onnx[onnxruntime,"):-1] if _is_quantized(name) else None
            onx = _quiet(fx2onnx.to_onnx, tiny.model, (), copy.deepcopy(tiny.inputs),
                         dynamic_shapes=tiny.dynamic_shapes, optimize="onnxruntime", quantize=quantize)
            # the loop creates the session: the argmax of the last logits in the graph (add_next_token)
            generator = OnnxGenerator(onx, session_options=_session_options(1))
            runs[name] = lambda g=generator: (g.generate(ids, new), g.last_times)
    tokens = {name: fn()[0] for name, fn in runs.items()}  # warm-up, and the tokens compared below
    assert torch.equal(tokens.get("to_onnx[onnxruntime]", tokens["transformers"]), tokens["transformers"]), (
        "fx2onnx.generate at float32 does not generate what transformers does")
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    overhead: dict[str, list[tuple[float, float, float]]] = {name: [] for name in runs}
    names, order = list(runs), random.Random(0)
    for _ in range(repeat):
        order.shuffle(names)
        for name in names:
            begin = time.perf_counter()
            _, times = runs[name]()
            seconds[name].append(time.perf_counter() - begin)
            if times is not None:  # the loop's time outside the model over the decode steps' time: in all, and
                # the median step's (one slow step of a busy machine weighs less)
                step = times.decode_total / times.decode_steps
                overhead[name].append((times.overhead_share, times.median_overhead / step, times.overhead_per_token * 1e6))
    eager_rates = new / np.array(seconds["transformers"])
    rows = []
    for name in runs:
        rates = new / np.array(seconds[name])
        row = dict(scenario=GENERATE, exporter=name, threads=1, tokens_per_s=float(np.median(rates)),
                   tokens_per_s_min=float(rates.min()), tokens_per_s_max=float(rates.max()),
                   vs_transformers=float(np.median(rates / eager_rates)),
                   vs_transformers_min=float((rates / eager_rates).min()),
                   vs_transformers_max=float((rates / eager_rates).max()))
        if overhead[name]:
            row["loop_overhead"], row["loop_overhead_median_step"], row["loop_overhead_us"] = np.median(
                np.array(overhead[name]), axis=0).tolist()
        same = tokens[name][0, prompt_length:] == tokens.get("to_onnx[onnxruntime]", tokens["transformers"])[0, prompt_length:]
        row["tokens_equal_float32"] = f"{int(same.sum())}/{new}"
        rows.append(row)
    return rows


def _quiet(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return fn(*args, **kwargs)


def _patches(sc: Scenario):
    return fx2onnx.torch_export_patches(patch_transformers=True) if sc.patches else contextlib.nullcontext()


_WARM: list[bool] = []


def export_all(sc: Scenario, exporters: list[str]) -> tuple[dict[str, onnx.ModelProto], dict[str, float]]:
    """ONNX models of every exporter and their export times (seconds, torch.export.export included)."""
    models, times = {}, {}
    kw = lambda: copy.deepcopy(sc.export_kwargs)  # noqa: E731
    with _patches(sc):
        if not _WARM:  # the first export pays the lazy imports: not timed
            fx2onnx.to_onnx(sc.model, (), kw(), dynamic_shapes=sc.dynamic_shapes)
            _WARM.append(True)
        begin = time.perf_counter()
        torch.export.export(sc.model, (), kw(), dynamic_shapes=export_dynamic_shapes(sc.dynamic_shapes), strict=False)
        times["torch.export"] = time.perf_counter() - begin
        for level in LEVELS:
            if f"to_onnx[{level}]" in exporters:
                begin = time.perf_counter()
                models[f"to_onnx[{level}]"] = fx2onnx.to_onnx(sc.model, (), kw(), dynamic_shapes=sc.dynamic_shapes, optimize=level)
                times[f"to_onnx[{level}]"] = time.perf_counter() - begin
        for q in QUANTIZED:
            if (name := f"to_onnx[onnxruntime,{q}]") in exporters:
                begin = time.perf_counter()
                models[name] = fx2onnx.to_onnx(
                    sc.model, (), kw(), dynamic_shapes=sc.dynamic_shapes, optimize="onnxruntime", quantize=q
                )
                times[name] = time.perf_counter() - begin
        if any(e.startswith("dynamo") for e in exporters):
            import onnx_ir as ir
            from onnxscript.rewriter.ort_fusions import optimize_for_ort

            begin = time.perf_counter()
            program = _quiet(
                torch.onnx.export, sc.model, (), kwargs=kw(), dynamic_shapes=export_dynamic_shapes(sc.dynamic_shapes),
                dynamo=True,
            )
            times["dynamo"] = time.perf_counter() - begin
            models["dynamo"] = program.model_proto
            if "dynamo+ort" in exporters:
                begin = time.perf_counter()
                fused, _ = optimize_for_ort(ir.from_proto(program.model_proto))
                models["dynamo+ort"] = ir.to_proto(fused)
                times["dynamo+ort"] = times["dynamo"] + time.perf_counter() - begin
            if "dynamo+optimize" in exporters:
                begin = time.perf_counter()
                _quiet(program.optimize)
                models["dynamo+optimize"] = program.model_proto
                times["dynamo+optimize"] = times["dynamo"] + time.perf_counter() - begin
    return {k: v for k, v in models.items() if k in exporters}, times


def _session_options(threads: int):
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return opts


def _session(onx: onnx.ModelProto, threads: int):
    import onnxruntime

    return onnxruntime.InferenceSession(onx.SerializeToString(), _session_options(threads),
                                        providers=["CPUExecutionProvider"])


def outside_matmul_share(onx: onnx.ModelProto, feeds: dict, threads: int, repeat: int) -> float:
    """Share of the node time spent outside MatMul / Gemm / MatMulNBits: onnxruntime's profile
    (fx2onnx.profiling's reader), the median time of each node over the runs (a run a busy
    machine slows, one node waiting for a core, does not count as that node's time)."""
    import os
    import tempfile

    import onnxruntime

    from fx2onnx.profiling import read_profile_events

    warmup = 3
    with tempfile.TemporaryDirectory(prefix="bench_profile_") as folder:
        opts = _session_options(threads)
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(folder, "profile")
        sess = onnxruntime.InferenceSession(onx.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        for _ in range(warmup + repeat):
            sess.run(None, feeds)
        events = read_profile_events(sess.end_profiling())
    events = events[events["run"] >= warmup]
    per_run = events.groupby(["run", "node", "op_type"])["duration_us"].sum().reset_index()
    median = per_run.groupby(["node", "op_type"])["duration_us"].median().reset_index()
    total = median["duration_us"].sum()
    return float(median[~median["op_type"].isin(MATMUL_OPS)]["duration_us"].sum() / total) if total else float("nan")


def time_all(sc: Scenario, models: dict, exporters: list[str], threads: int, repeat: int, warmup: int) -> dict[str, float]:
    """Median latency (seconds) of each exporter, the runs interleaved in a shuffled order."""
    from fx2onnx.validation import make_feeds

    torch.set_num_threads(threads)
    fns: dict[str, Callable[[], Any]] = {}
    for name, onx in models.items():
        sess = _session(onx, threads)
        feeds = make_feeds(sess, (), copy.deepcopy(sc.bench_kwargs))
        fns[name] = lambda sess=sess, feeds=feeds: sess.run(None, feeds)
    if "eager" in exporters or "compile" in exporters:
        kwargs = sc.bench_kwargs

        def eager(fn=sc.model):
            with torch.no_grad():
                return fn(**copy.deepcopy(kwargs))

        if "eager" in exporters:
            fns["eager"] = eager
        if "compile" in exporters:
            compiled = torch.compile(sc.model)
            try:
                eager(compiled)
                fns["compile"] = lambda: eager(compiled)
            except Exception as e:  # inductor needs a C++ compiler: the row is left out, said so
                print(f"[bench_models] torch.compile failed on {sc.name}: {type(e).__name__}: {str(e)[:200]}")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    order = random.Random(0)
    for _ in range(repeat):
        # a new order each round: with a fixed (or rotating) one, the run following torch.compile's
        # was 13-25% slower (its OpenMP threads still spinning), always the same exporter
        order.shuffle(names)
        for name in names:
            begin = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - begin)
    return {name: statistics.median(t) for name, t in times.items()}


def bench(sc: Scenario, exporters: list[str], threads: list[int], repeat: int, warmup: int, profile: bool) -> list[dict]:
    """One row per (exporter, threads): latency, ratio to dynamo, nodes, export time, share outside MatMul."""
    from fx2onnx.validation import make_feeds

    models, export_times = export_all(sc, exporters)
    accuracy = {}
    for name, onx in models.items():
        if _is_quantized(name):  # not the float results: how far its first output (the logits) is
            accuracy[name] = output_error(onx, sc)
            continue
        report = fx2onnx.validate(onx, sc.model, (), copy.deepcopy(sc.bench_kwargs), atol=1e-3, rtol=1e-2)
        assert report.ok, f"{sc.name}, {name}: {report}"
    rows = []
    for n_threads in threads:
        latency = time_all(sc, models, exporters, n_threads, repeat, warmup)
        for name, seconds in latency.items():
            row = dict(scenario=sc.name, exporter=name, threads=n_threads, latency_ms=seconds * 1000)
            if "dynamo" in latency:
                row["vs_dynamo"] = seconds / latency["dynamo"]
            if name in models:
                row["nodes"] = len(models[name].graph.node)
                if name in export_times:
                    row["export_vs_torch_export"] = export_times[name] / export_times["torch.export"]
                if name in accuracy:
                    row.update(accuracy[name])
                if profile and n_threads == threads[0]:
                    feeds = make_feeds(models[name], (), copy.deepcopy(sc.bench_kwargs))
                    row["outside_matmul"] = outside_matmul_share(models[name], feeds, n_threads, max(10, repeat // 5))
            rows.append(row)
    return rows


def _is_quantized(exporter: str) -> bool:
    return any(exporter.endswith(f",{q}]") for q in QUANTIZED)


def output_error(onx: onnx.ModelProto, sc: Scenario) -> dict[str, float]:
    """Max and mean absolute difference of the first output (the logits) from eager float32, and
    how often the argmax of the last axis (the greedy token) is the same."""
    import numpy as np

    from fx2onnx.validation import flatten_outputs, run_onnx

    with torch.no_grad():
        expected = flatten_outputs(sc.model(**copy.deepcopy(sc.bench_kwargs)))[0].numpy()
    got = run_onnx(onx, (), copy.deepcopy(sc.bench_kwargs))[0]
    diff = np.abs(got - expected)
    same = got.argmax(-1) == expected.argmax(-1) if expected.ndim >= 2 else np.array([True])
    return dict(max_diff=float(diff.max()), mean_diff=float(diff.mean()), argmax_agree=float(same.mean()))


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny models, short sequences")
    parser.add_argument("--scenarios", default=",".join([*DEFAULT_SCENARIOS, GENERATE]))
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="share of time outside MatMul (fx2onnx.profiling), first thread count")
    parser.add_argument("--gen-repeat", type=int, default=10, help="rounds of generations (llama-generate)")
    options = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    # a comma inside brackets belongs to the name: to_onnx[onnxruntime,int4]
    exporters = re.split(r",(?![^\[]*\])", options.exporters)
    unknown = sorted(set(exporters) - set(EXPORTERS))
    if unknown:
        parser.error(f"unknown exporter(s) {unknown}: choose among {list(EXPORTERS)}")
    threads = [int(t) for t in options.threads.split(",")]
    rows = []
    for name in options.scenarios.split(","):
        if name == GENERATE:
            rows.extend(bench_generation(options.quick, exporters, options.gen_repeat))
            continue
        sc = SCENARIOS[name](options.quick)
        rows.extend(bench(sc, exporters, threads, options.repeat, options.warmup, options.profile))
    import pandas

    frame = pandas.DataFrame(rows)
    with pandas.option_context("display.width", 200, "display.max_columns", 20):
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return rows


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # trained_llama
    main()
