"""Export time and peak memory of real-size Llamas: torch.export.export, to_onnx, torch.onnx.export.

Each measurement runs in its own child process: the child builds the model (random
weights, float32), resets its peak resident memory once the model is built (Linux:
``/proc/self/clear_refs``; building costs more than the model, and a peak read from the
start of the process, ``ru_maxrss``, would then be the build's), runs one exporter which saves
the model with external data and flushes the files to the disk, then reads the peak
(``VmHWM``). The table gives the time of the export, the peak and, in parentheses, what the
export added to the built model (GiB). The floor is the capture (the row's own capture stage
when it has one, else torch.export alone) plus the bytes of the weights at the disk bandwidth
measured at the start (write + fsync of a 1 GiB file).

    python bench/bench_large_export.py --sizes 0.1B,0.5B [--exporters torch.export,to_onnx,dynamo]
    python bench/bench_large_export.py --sizes 6L --exporters to_onnx --verbose   # stage times
    python bench/bench_large_export.py --sizes 8B --exporters checkpoint --checkpoint DIR --workdir DIR2
    python bench/bench_large_export.py --sizes 0.1B --json _doc/bench/large_export.json

``checkpoint`` exports from a ``save_pretrained`` folder with
:func:`fx2onnx.weights.to_onnx_from_checkpoint` (the model built on the meta device,
bfloat16 for the 8B shape); ``--checkpoint DIR`` writes the random checkpoint there first
when the folder is empty, tensor by tensor (:func:`fx2onnx.weights.write_random_checkpoint`,
the model is never built), then checks by hash that the initializers saved are the
checkpoint's tensors (both files streamed); ``--validate`` also runs the saved file on
onnxruntime against the eager model loaded from the checkpoint (the model must fit twice).
The 3B size needs 14 GiB of memory (12 GiB of weights), the 8B 15 GiB of disk for the
checkpoint and 15 GiB for the ONNX file (``--workdir``), not memory. ``--json`` merges the rows
into a file (the gallery page plots it), each row with the stage times of ``to_onnx`` and the
number of FX nodes.

Measured on a shared 2-core machine (load average 3 to 7, timings noisy; the disk
bandwidth measured at the start of each run, 127 to 470 MB/s), dynamic batch and sequence,
stored in ``_doc/bench/large_export.json`` (``--table`` prints it); a checkpoint row's peak is
the whole process (no model is built). The 8B row: random checkpoint written in 397 s, 291
tensors equal by hash (358 s); 0.1B to 3B from their checkpoints: compared with eager layer by
layer on onnxruntime (max abs 5.5e-6, 1.7e-5, 4.3e-5, 1.4e-4; the 3B's peak 4.01 GiB, its tied
1.5 GiB embeddings read once). The rows come from runs an hour apart: 1.1B's to_onnx and dynamo
rows from the same hour, the 1.1B, 3B and 8B checkpoint rows from a busier one. They were
measured before the peak was reset after the build and before the files were flushed. At
0.1B, measured again with the reset, the build's peak is the model's resident memory (+54 and
+240 MiB for torch.export and to_onnx, +51 and +215 MiB stored): the stored memory of the
smaller models is read as it is. The 3B rows of the built model have none (``n/a``: the build,
13.8 GiB, was their peak); a rerun needs a machine with 16 GiB free:

====  ========  ============  =======  ================  =======  =======  ========
size  dtype     exporter      time     peak RSS (above)  floor    x floor  x dynamo
====  ========  ============  =======  ================  =======  =======  ========
0.1B  float32   dynamo        36.2 s   1.00 GiB (+0.15)  9.4 s    3.87x
0.1B  float32   to_onnx       9.7 s    1.06 GiB (+0.21)  7.9 s    1.23x    0.27x
0.1B  float32   torch.export  7.7 s    0.90 GiB (+0.05)  10.1 s            0.21x
0.1B  float32   checkpoint    7.7 s    0.68 GiB (+0.35)  5.1 s    1.50x    0.21x
0.5B  float32   dynamo        50.5 s   2.20 GiB (+0.20)  15.4 s   3.28x
0.5B  float32   to_onnx       18.8 s   2.25 GiB (+0.26)  16.4 s   1.14x    0.37x
0.5B  float32   torch.export  9.6 s    2.06 GiB (+0.07)  18.0 s            0.19x
0.5B  float32   checkpoint    14.4 s   0.78 GiB (+0.44)  11.5 s   1.25x    0.29x
1.1B  float32   dynamo        116.1 s  4.69 GiB (+0.20)  44.0 s   2.64x
1.1B  float32   to_onnx       45.3 s   4.78 GiB (+0.29)  34.8 s   1.30x    0.39x
1.1B  float32   torch.export  12.1 s   4.55 GiB (+0.07)  33.2 s            0.10x
1.1B  float32   checkpoint    39.2 s   1.01 GiB (+0.67)  26.1 s   1.50x    0.34x
3B    float32   dynamo        161.9 s  n/a               62.8 s   2.58x
3B    float32   to_onnx       81.4 s   n/a               61.9 s   1.31x    0.50x
3B    float32   torch.export  11.6 s   n/a               62.8 s            0.07x
3B    float32   checkpoint    80.5 s   1.95 GiB (+1.61)  41.9 s   1.92x    0.50x
8B    bfloat16  checkpoint    131.1 s  2.50 GiB (+2.16)  115.9 s  1.13x
====  ========  ============  =======  ================  =======  =======  ========
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from typing import Iterator

import numpy as np

# Llama shapes: hidden, layers, heads, kv heads, ffn, vocab, tied embeddings, dtype
SIZES = {
    # a few MB: the gallery page runs it live
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=1024),
    "0.1B": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                 intermediate_size=2048, vocab_size=32000),
    "0.5B": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=4,
                 intermediate_size=4096, vocab_size=32000),
    # TinyLlama-1.1B, and the same with 6 layers (the stage times of the issue)
    "1.1B": dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                 intermediate_size=5632, vocab_size=32000),
    "6L": dict(hidden_size=2048, num_hidden_layers=6, num_attention_heads=32, num_key_value_heads=4,
               intermediate_size=5632, vocab_size=32000),
    # Llama-3.2-3B and Llama-3-8B (bfloat16)
    "3B": dict(hidden_size=3072, num_hidden_layers=28, num_attention_heads=24, num_key_value_heads=8,
               intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True),
    "8B": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
               intermediate_size=14336, vocab_size=128256, dtype="bfloat16"),
}


def _status_gib(field: str) -> float | None:
    """A memory field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in GiB, None without procfs."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 2**20  # kB
    except OSError:
        return None
    return None


def _peak_gb() -> float:
    """Peak resident memory of this process (GiB) since the last :func:`_reset_peak` (``VmHWM``),
    or since it started (``ru_maxrss``, which also keeps the parent's peak across fork and exec:
    the parent never builds a model, checkpoints are written by a child too)."""
    peak = _status_gib("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _reset_peak() -> float:
    """Resets the peak resident memory to the current one (Linux: ``5`` written to
    ``/proc/self/clear_refs``) and returns the current resident memory (GiB). Building the model
    costs more than the model (torch initializes the weights in place, transformers keeps some
    temporaries): without the reset, a process's peak is often the build's, and the export's own
    memory is never seen. Raises when the peak cannot be reset."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")
    current = _status_gib("VmRSS")
    if current is None or abs((_status_gib("VmHWM") or 0) - current) > 0.05:
        raise RuntimeError("the peak resident memory could not be reset (Linux >= 4.0 is needed)")
    return current


def _config(size: str):
    import transformers

    values = dict(SIZES[size])
    dtype = values.pop("dtype", "float32")
    config = transformers.LlamaConfig(max_position_embeddings=2048, use_cache=False, **values)
    config._attn_implementation = "sdpa"
    return config, dtype


def _inputs():
    import torch

    inputs = {"input_ids": torch.randint(3, 1000, (2, 8)), "attention_mask": torch.ones((2, 8), dtype=torch.int64)}
    return inputs, {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}


def _stage_times(text: str) -> dict[str, float]:
    """The stage times ``to_onnx(verbose=1)`` printed."""
    times = {}
    for line in text.splitlines():
        match = re.match(r"\[to_onnx\] (.+) done in ([0-9.]+)s", line)
        if match:
            times[match.group(1)] = float(match.group(2))
    return times


@contextlib.contextmanager
def _count_fx_nodes(row: dict) -> Iterator[None]:
    """Records the number of nodes of the graph ``to_onnx`` captures in ``row["fx_nodes"]``."""
    from fx2onnx.convert import api

    capture = api.capture

    def counting(*args, **kwargs):
        ep, names = capture(*args, **kwargs)
        row["fx_nodes"] = len(ep.graph.nodes)
        return ep, names

    api.capture = counting
    try:
        yield
    finally:
        api.capture = capture


def child(size: str, exporter: str, out: str, verbose: int, checkpoint: str | None, validate: bool = False,
          validate_layers: bool = False) -> dict:
    """Runs one exporter in this process; returns the row."""
    import torch
    import transformers

    torch.manual_seed(0)
    config, dtype = _config(size)
    inputs, dynamic_shapes = _inputs()
    log = io.StringIO()
    if exporter == "checkpoint":
        from fx2onnx.weights import checkpoint_files, to_onnx_from_checkpoint
        from fx2onnx.weights.verify import compare_with_checkpoint

        files = set(checkpoint_files(checkpoint).values())
        nbytes = sum(os.path.getsize(f) for f in files)
        row = dict(size=size, exporter=exporter, dtype=dtype, nbytes=nbytes)
        base = _peak_gb()
        begin = time.perf_counter()
        with contextlib.redirect_stdout(log), _count_fx_nodes(row):
            onx = to_onnx_from_checkpoint(checkpoint, (), inputs, dynamic_shapes=dynamic_shapes, filename=out, verbose=1)
        _sync_files(out)
        duration = time.perf_counter() - begin
        row["flushed"] = True
        peak = _peak_gb()
        largest = max(t.nbytes for t in _largest_tensors(files))
        row.update(time=duration, model_gb=base, peak_gb=peak, above_gb=peak - base, largest_tensor_gb=largest / 2**30,
                   onnx_nodes=len(onx.graph.node), stages=_stage_times(log.getvalue()),
                   params=sum(int(np.prod(t.dims)) for t in onx.graph.initializer))
        begin = time.perf_counter()
        report = compare_with_checkpoint(out, checkpoint)
        row.update(hash_ok=report.ok, hash_matched=len(report.matched), hash_missing=report.missing[:10],
                   hash_time=time.perf_counter() - begin, hash_peak_gb=_peak_gb())
        if validate_layers:  # about one layer's weights twice
            from fx2onnx.weights.layers import validate_by_layers

            begin = time.perf_counter()
            reports = validate_by_layers(out, checkpoint, (), inputs)
            row.update(layers_ok=all(r.ok for r in reports), layers_max_abs=max(r.max_abs for r in reports),
                       layers_time=time.perf_counter() - begin, layers_peak_gb=_peak_gb())
        if validate:  # the whole model twice
            import fx2onnx

            model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype)).eval()
            begin = time.perf_counter()
            check = fx2onnx.validate(out, model, (), inputs, atol=1e-4)
            row.update(validate_ok=check.ok, validate_max_abs=float(check.max_abs),
                       validate_time=time.perf_counter() - begin, validate_peak_gb=_peak_gb())
        return row
    model = transformers.LlamaForCausalLM(config).to(getattr(torch, dtype)).eval()
    params = sum(p.numel() for p in model.parameters())
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    row = dict(size=size, exporter=exporter, dtype=dtype, params=params, nbytes=nbytes)
    row["build_peak_gb"] = _peak_gb()
    base = _reset_peak()  # the built model's resident memory; the peak starts from there
    begin = time.perf_counter()
    if exporter == "torch.export":
        from fx2onnx.zoo import export_dynamic_shapes

        ep = torch.export.export(model, (), inputs, dynamic_shapes=export_dynamic_shapes(dynamic_shapes))
        row["fx_nodes"] = len(ep.graph.nodes)
    elif exporter == "to_onnx":
        import fx2onnx

        with contextlib.redirect_stdout(log), _count_fx_nodes(row):
            onx = fx2onnx.to_onnx(model, (), inputs, dynamic_shapes=dynamic_shapes, filename=out, external_data=True,
                                  verbose=1)
        row.update(onnx_nodes=len(onx.graph.node), stages=_stage_times(log.getvalue()))
    elif exporter == "dynamo":
        from fx2onnx.zoo import export_dynamic_shapes

        program = torch.onnx.export(model, (), kwargs=inputs, dynamic_shapes=export_dynamic_shapes(dynamic_shapes),
                                    dynamo=True, verbose=False)
        program.save(out, external_data=True)
    else:
        raise ValueError(f"unknown exporter {exporter!r}")
    _sync_files(out)
    duration = time.perf_counter() - begin
    row["flushed"] = True
    peak = _peak_gb()
    if verbose:
        print(log.getvalue())
    row.update(time=duration, model_gb=base, peak_gb=peak, above_gb=peak - base)
    return row


def _sync_files(out: str) -> None:
    """Flushes the ONNX file and its external data to the disk: the time of an export then
    includes the write the floor counts (written to the page cache only, a file may seem to be
    written faster than the disk can)."""
    folder = os.path.dirname(os.path.abspath(out))
    for name in os.listdir(folder):
        if name.startswith(os.path.basename(out)):
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _largest_tensors(files):
    """One lightweight description (nbytes) per tensor of the safetensors files, without reading them."""
    import types

    from safetensors import safe_open

    sizes = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1, "BOOL": 1}
    for path in files:
        with safe_open(path, framework="pt") as f:
            for key in f.keys():
                piece = f.get_slice(key)
                n = 1
                for d in piece.get_shape():
                    n *= d
                yield types.SimpleNamespace(nbytes=n * sizes[piece.get_dtype()])


def write_bandwidth(folder: str, nbytes: int = 2**30) -> float:
    """Bytes per second of writing then syncing ``nbytes`` in ``folder``."""
    block = os.urandom(min(2**24, nbytes))
    path = os.path.join(folder, "bandwidth.bin")
    begin = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(max(1, nbytes // len(block))):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    duration = time.perf_counter() - begin
    os.remove(path)
    return nbytes / duration


def write_checkpoint(size: str, folder: str) -> None:
    """A random ``save_pretrained`` checkpoint of the shape ``size``, written tensor by tensor
    (the model is never built: the 8B shape takes 16 GB of disk, a few MB of memory)."""
    from fx2onnx.weights import write_random_checkpoint

    config, dtype = _config(size)
    config.architectures = ["LlamaForCausalLM"]
    write_random_checkpoint(config, folder, dtype, seed=0, progress=True)


def floor_of(row: dict, rows: list[dict]) -> float:
    """The shortest time an export of ``row`` can take: its capture (the capture stage of the row
    when it has one, else the time of torch.export alone on the same size) plus the bytes of the
    weights written at the disk bandwidth measured at the start of the run."""
    capture = row.get("stages", {}).get("capture (torch.export.export)")
    if capture is None:
        capture = next((r["time"] for r in rows if (r["size"], r["exporter"]) == (row["size"], "torch.export")), 0.0)
    return capture + row["floor_write"]


def memory_text(row: dict) -> str:
    """``peak GiB (+above the built model)``; ``n/a`` for a row measured before the peak was reset
    after the build (the build was the peak: the export's own memory was not seen)."""
    if row.get("above_gb") is None:
        return "n/a"
    return f"{row['peak_gb']:.2f} GiB (+{row['above_gb']:.2f})"


def table(rows: list[dict]) -> str:
    """An rst table of the rows: time, peak RSS (above the built model), the floor (the capture
    plus the write of the weights) and the ratios to the floor and to ``torch.onnx.export``."""
    by = {(r["size"], r["exporter"]): r for r in rows}
    lines = []
    for r in sorted(rows, key=lambda r: (r["nbytes"], r["exporter"])):
        floor = floor_of(r, rows)
        dynamo = by.get((r["size"], "dynamo"), {}).get("time")
        ratio = "" if r["exporter"] == "torch.export" else f"{r['time'] / floor:.2f}x"
        lines.append([r["size"], r["dtype"], r["exporter"], f"{r['time']:.1f} s", memory_text(r), f"{floor:.1f} s",
                      ratio, f"{r['time'] / dynamo:.2f}x" if dynamo and r["exporter"] != "dynamo" else ""])
    header = ["size", "dtype", "exporter", "time", "peak RSS (above)", "floor", "x floor", "x dynamo"]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
    rule = "  ".join("=" * w for w in widths)
    fmt = lambda values: "  ".join(str(v).ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return "\n".join([rule, fmt(header), rule] + [fmt(v) for v in lines] + [rule])


def _merge_json(path: str, rows: list[dict], bandwidth: float) -> None:
    """Adds ``rows`` to the results file ``path``, replacing the rows of the same size and exporter."""
    data = {"rows": []}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    old = {(r["size"], r["exporter"]): r for r in data["rows"]}
    for row in rows:  # the time the checkpoint took to write, when written by an earlier run
        if "checkpoint_write_time" in old.get((row["size"], row["exporter"]), {}):
            row.setdefault("checkpoint_write_time", old[(row["size"], row["exporter"])]["checkpoint_write_time"])
    keys = {(r["size"], r["exporter"]) for r in rows}
    data["rows"] = [r for r in data["rows"] if (r["size"], r["exporter"]) not in keys] + rows
    data.setdefault("bandwidth", {})[time.strftime("%Y-%m-%d %H:%M")] = bandwidth
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0.1B,0.5B")
    parser.add_argument("--exporters", default="torch.export,to_onnx,dynamo")
    parser.add_argument("--verbose", action="store_true", help="to_onnx prints its stage times")
    parser.add_argument("--checkpoint", help="folder of the checkpoints (exporter checkpoint): one sub-folder per size, "
                        "written when missing")
    parser.add_argument("--validate", action="store_true", help="exporter checkpoint: compare the saved file "
                        "with eager on onnxruntime (the model loaded once more)")
    parser.add_argument("--validate-layers", action="store_true", help="exporter checkpoint: compare the saved "
                        "file with eager one layer at a time (fx2onnx.weights.layers.validate_by_layers)")
    parser.add_argument("--workdir", help="where the ONNX files are written (default: a temporary folder)")
    parser.add_argument("--json", help="merge the rows into this file")
    parser.add_argument("--table", help="print the rows of this results file as an rst table and stop")
    parser.add_argument("--bandwidth-mb", type=int, default=1024, help="MB written to measure the disk bandwidth")
    parser.add_argument("--child", nargs=3, metavar=("SIZE", "EXPORTER", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--write-checkpoint", nargs=2, metavar=("SIZE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table, encoding="utf-8") as f:
            print(table(json.load(f)["rows"]))
        return []
    if args.write_checkpoint:
        write_checkpoint(*args.write_checkpoint)
        return []
    if args.child:
        row = child(*args.child, verbose=int(args.verbose), checkpoint=args.checkpoint, validate=args.validate,
                    validate_layers=args.validate_layers)
        print("ROW " + json.dumps(row))
        return [row]
    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as folder:
        bandwidth = write_bandwidth(folder, args.bandwidth_mb * 2**20)
        print(f"disk write bandwidth (write + fsync {args.bandwidth_mb} MB): {bandwidth / 1e6:.0f} MB/s")
        for size in args.sizes.split(","):
            for exporter in args.exporters.split(","):
                checkpoint = os.path.join(args.checkpoint, size) if args.checkpoint else None
                write_time = None
                if exporter == "checkpoint" and not os.path.exists(os.path.join(checkpoint or "", "config.json")):
                    begin = time.perf_counter()
                    subprocess.run([sys.executable, __file__, "--write-checkpoint", size, checkpoint], check=True)
                    write_time = time.perf_counter() - begin
                out = os.path.join(folder, f"{size}_{exporter}.onnx")
                cmd = [sys.executable, __file__, "--child", size, exporter, out]
                cmd += ["--verbose"] if args.verbose else []
                cmd += ["--checkpoint", checkpoint] if checkpoint else []
                cmd += ["--validate"] if args.validate else []
                cmd += ["--validate-layers"] if args.validate_layers else []
                proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
                if args.verbose:
                    print(proc.stdout.strip())
                lines = [line for line in proc.stdout.splitlines() if line.startswith("ROW ")]
                if proc.returncode or not lines:
                    print(f"{size} {exporter} failed:\n{proc.stderr[-2000:]}")
                    continue
                row = json.loads(lines[-1][4:])
                row["bandwidth"] = bandwidth
                row["floor_write"] = row["nbytes"] / bandwidth
                if write_time is not None:
                    row["checkpoint_write_time"] = write_time
                rows.append(row)
                print(f"{size:>5} {exporter:<13} {row['time']:7.2f} s  peak RSS {row['peak_gb']:5.2f} GiB "
                      f"(+{row['above_gb'] * 1024:.0f} MiB above the built model)  "
                      f"write floor {row['floor_write'] * 1e3:.0f} ms"
                      + (f"  largest tensor {row['largest_tensor_gb']:.2f} GiB" if "largest_tensor_gb" in row else "")
                      + (f"  hash {'ok' if row['hash_ok'] else 'MISMATCH'} ({row['hash_matched']} tensors, "
                         f"{row['hash_time']:.0f} s)" if "hash_ok" in row else "")
                      + (f"  by layers vs eager {row['layers_max_abs']:.1e}" if "layers_ok" in row else "")
                      + (f"  onnxruntime vs eager {row['validate_max_abs']:.1e}" if "validate_ok" in row else ""))
                for name in os.listdir(folder):
                    os.remove(os.path.join(folder, name))
                if args.json:
                    _merge_json(args.json, [row], bandwidth)
    return rows


if __name__ == "__main__":
    main()
