"""Export time: torch.export.export alone, fx2onnx.to_onnx, torch.onnx.export(dynamo=True).

Prints one row per model with the median of a few runs (seconds) and the ratio
``to_onnx / torch.export.export``: to_onnx adds the conversion and the optimization
to the capture, the target is at most 1.3 on the Llamas.

    python bench/bench_export.py [--repeat 3] [--models mlp,cnn,llama64,llama512]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import statistics
import time
import warnings

import torch

import fx2onnx
from fx2onnx.models import export_dynamic_shapes, get_tiny_model
from fx2onnx.models.vision import small_cnn


def mlp():
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    return model.eval(), (torch.randn(8, 64),), {}, ({0: "batch"},)


def cnn():
    model = small_cnn()
    return model.eval(), (torch.randn(4, 3, 32, 32),), {}, ({0: "batch"},)


def llama(**config):
    tiny = get_tiny_model("llama", **config)
    tiny.model.config.use_cache = False
    return tiny.model, (), tiny.inputs, tiny.dynamic_shapes


MODELS = {
    "mlp": mlp,
    "cnn": cnn,
    "llama64": lambda: llama(hidden_size=64, intermediate_size=128, num_hidden_layers=2),
    "llama512": lambda: llama(
        hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, intermediate_size=1376
    ),
}


def _median_times(fns: dict, repeat: int) -> dict:
    """Median time of each function; the runs are interleaved so that a busy machine
    slows all of them alike. A first untimed run of each warms up lazy initializations."""
    for fn in fns.values():
        fn()
    times: dict = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            begin = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - begin)
    return {name: statistics.median(t) for name, t in times.items()}


def _quiet(fn, *args, **kwargs):
    """Runs fn without its progress messages (torch.onnx.export prints several lines)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return fn(*args, **kwargs)


def bench(name: str, repeat: int) -> dict:
    model, args, kwargs, ds = MODELS[name]()
    torch_ds = export_dynamic_shapes(ds)
    row = {"model": name}
    row.update(
        _median_times(
            {
                "torch.export": lambda: torch.export.export(model, args, kwargs, dynamic_shapes=torch_ds, strict=False),
                "to_onnx": lambda: fx2onnx.to_onnx(model, args, kwargs, dynamic_shapes=ds),
                "torch.onnx.export": lambda: _quiet(
                    torch.onnx.export, model, args, kwargs=kwargs, dynamic_shapes=torch_ds, dynamo=True
                ),
            },
            repeat,
        )
    )
    # each model is checked once: a fast but wrong exporter would be no result
    onx = fx2onnx.to_onnx(model, args, kwargs, dynamic_shapes=ds)
    report = fx2onnx.validate(onx, model, args, kwargs)
    assert report.ok, f"{name}: {report}"
    row["to_onnx / torch.export"] = row["to_onnx"] / row["torch.export"]
    return row


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    options = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    rows = []
    columns = ["model", "torch.export", "to_onnx", "torch.onnx.export", "to_onnx / torch.export"]
    print(" | ".join(f"{c:>22}" for c in columns), flush=True)
    for name in options.models.split(","):
        row = bench(name, options.repeat)
        rows.append(row)
        cells = [f"{row[c]:>22.3f}" if isinstance(row[c], float) else f"{row[c]:>22}" for c in columns]
        print(" | ".join(cells), flush=True)
    return rows


if __name__ == "__main__":
    main()
