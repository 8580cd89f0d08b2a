"""Export time and peak memory of real-size Llamas: torch.export.export, to_onnx, torch.onnx.export.

Each measurement runs in its own child process: the child builds the model (random
weights, float32), records its peak RSS (``resource.getrusage``), runs one exporter
which saves the model with external data, then records the peak RSS again. The
table gives the time of the export and the peak memory above the built model.
The floor is the time to write the weights at the disk bandwidth measured at the
start (write + fsync of a 1 GB file).

    python bench/bench_large_export.py --sizes 0.1B,0.5B [--exporters torch.export,to_onnx,dynamo]
    python bench/bench_large_export.py --sizes 6L --exporters to_onnx --verbose   # stage times
    python bench/bench_large_export.py --sizes 8B --exporters checkpoint --checkpoint DIR

``checkpoint`` exports from a ``save_pretrained`` folder with
:func:`fx2onnx.weights.to_onnx_from_checkpoint` (the model built on the meta device,
bfloat16 for the 8B shape); ``--checkpoint DIR`` writes the random checkpoint there first
when the folder is empty. The 3B and 8B sizes need about 13 and 16 GB of memory or disk.

Measured on a shared 2-core machine (other jobs running, timings noisy; the disk bandwidth
measured at the start of each run: 213, 91 and 54 MB/s), float32, dynamic batch and sequence:

==========  ============  =======  ============================  ===========
size        exporter      time     peak RSS (above the model)    write floor
==========  ============  =======  ============================  ===========
0.1B        torch.export  13.0 s   0.90 GB (+0.05)               2.3 s
0.1B        to_onnx       30.5 s   0.96 GB (+0.11)               2.3 s
0.1B        dynamo        101.7 s  1.00 GB (+0.15)               2.3 s
0.5B        torch.export  26.3 s   2.06 GB (+0.07)               8.1 s
0.5B        to_onnx       104.7 s  2.12 GB (+0.13)               8.1 s
0.5B        dynamo        249.5 s  2.20 GB (+0.20)               8.1 s
0.5B        checkpoint    61.6 s   0.80 GB (nothing built)       18.9 s
1.1B        torch.export  37.9 s   4.56 GB (+0.07)               82.2 s
1.1B        to_onnx       188.7 s  4.61 GB (+0.12)               82.2 s
1.1B        dynamo        401.9 s  4.69 GB (+0.20)               82.2 s
==========  ============  =======  ============================  ===========
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

# Llama shapes: hidden, layers, heads, kv heads, ffn, vocab, tied embeddings, dtype
SIZES = {
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


def _peak_gb() -> float:
    """Peak resident memory of this process (GB). ``ru_maxrss`` keeps the parent's peak across
    fork and exec: the parent never builds a model (checkpoints are written by a child too)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


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


def child(size: str, exporter: str, out: str, verbose: int, checkpoint: str | None) -> dict:
    """Runs one exporter in this process; returns the row."""
    import torch
    import transformers

    torch.manual_seed(0)
    config, dtype = _config(size)
    inputs, dynamic_shapes = _inputs()
    if exporter == "checkpoint":
        from fx2onnx.weights import to_onnx_from_checkpoint

        from fx2onnx.weights import checkpoint_files

        files = set(checkpoint_files(checkpoint).values())
        nbytes = sum(os.path.getsize(f) for f in files)
        base = _peak_gb()
        begin = time.perf_counter()
        to_onnx_from_checkpoint(checkpoint, (), inputs, dynamic_shapes=dynamic_shapes, filename=out, verbose=verbose)
        duration = time.perf_counter() - begin
        largest = max(t.nbytes for t in _largest_tensors(files))
        return dict(size=size, exporter=exporter, nbytes=nbytes, time=duration, model_gb=base, peak_gb=_peak_gb(),
                    above_gb=_peak_gb() - base, largest_tensor_gb=largest / 2**30)
    model = transformers.LlamaForCausalLM(config).to(getattr(torch, dtype)).eval()
    params = sum(p.numel() for p in model.parameters())
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    base = _peak_gb()
    begin = time.perf_counter()
    if exporter == "torch.export":
        from fx2onnx.models import export_dynamic_shapes

        torch.export.export(model, (), inputs, dynamic_shapes=export_dynamic_shapes(dynamic_shapes))
    elif exporter == "to_onnx":
        import fx2onnx

        fx2onnx.to_onnx(model, (), inputs, dynamic_shapes=dynamic_shapes, filename=out, external_data=True, verbose=verbose)
    elif exporter == "dynamo":
        from fx2onnx.models import export_dynamic_shapes

        program = torch.onnx.export(model, (), kwargs=inputs, dynamic_shapes=export_dynamic_shapes(dynamic_shapes),
                                    dynamo=True, verbose=False)
        program.save(out, external_data=True)
    else:
        raise ValueError(f"unknown exporter {exporter!r}")
    duration = time.perf_counter() - begin
    peak = _peak_gb()
    return dict(size=size, exporter=exporter, params=params, nbytes=nbytes, time=duration, model_gb=base,
                peak_gb=peak, above_gb=peak - base)


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
    block = os.urandom(2**24)
    path = os.path.join(folder, "bandwidth.bin")
    begin = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(nbytes // len(block)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    duration = time.perf_counter() - begin
    os.remove(path)
    return nbytes / duration


def write_checkpoint(size: str, folder: str) -> None:
    """A random ``save_pretrained`` checkpoint of the shape ``size``, built in memory (the 8B shape
    needs 16 GB here, once; the export from it does not)."""
    import torch
    import transformers

    config, dtype = _config(size)
    config.dtype = dtype
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = transformers.LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(folder)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0.1B,0.5B")
    parser.add_argument("--exporters", default="torch.export,to_onnx,dynamo")
    parser.add_argument("--verbose", action="store_true", help="to_onnx prints its stage times")
    parser.add_argument("--checkpoint", help="folder of a save_pretrained checkpoint (exporter checkpoint)")
    parser.add_argument("--child", nargs=3, metavar=("SIZE", "EXPORTER", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--write-checkpoint", nargs=2, metavar=("SIZE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_checkpoint:
        write_checkpoint(*args.write_checkpoint)
        return []
    if args.child:
        row = child(*args.child, verbose=int(args.verbose), checkpoint=args.checkpoint)
        print("ROW " + json.dumps(row))
        return [row]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        bandwidth = write_bandwidth(folder)
        print(f"disk write bandwidth (write + fsync 1 GB): {bandwidth / 1e6:.0f} MB/s")
        for size in args.sizes.split(","):
            for exporter in args.exporters.split(","):
                if exporter == "checkpoint" and args.checkpoint and not os.listdir(args.checkpoint):
                    subprocess.run([sys.executable, __file__, "--write-checkpoint", size, args.checkpoint], check=True)
                out = os.path.join(folder, f"{size}_{exporter}.onnx")
                cmd = [sys.executable, __file__, "--child", size, exporter, out]
                cmd += ["--verbose"] if args.verbose else []
                cmd += ["--checkpoint", args.checkpoint] if args.checkpoint else []
                proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
                if args.verbose:
                    print(proc.stdout.strip())
                lines = [line for line in proc.stdout.splitlines() if line.startswith("ROW ")]
                if proc.returncode or not lines:
                    print(f"{size} {exporter} failed:\n{proc.stderr[-2000:]}")
                    continue
                row = json.loads(lines[-1][4:])
                if "nbytes" in row:
                    row["floor_write"] = row["nbytes"] / bandwidth
                rows.append(row)
                print(f"{size:>5} {exporter:<13} {row['time']:7.1f} s  peak RSS {row['peak_gb']:5.2f} GB "
                      f"(+{row['above_gb']:.2f} above the built model)"
                      + (f"  write floor {row['floor_write']:.1f} s" if "floor_write" in row else "")
                      + (f"  largest tensor {row['largest_tensor_gb']:.2f} GB" if "largest_tensor_gb" in row else ""))
                for name in os.listdir(folder):
                    os.remove(os.path.join(folder, name))
    return rows


if __name__ == "__main__":
    main()
