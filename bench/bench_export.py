"""Export time: torch.export.export alone, fx2onnx.to_onnx, torch.onnx.export(dynamo=True).

Prints one row per model with the median of a few runs (seconds) and the ratio
``to_onnx / torch.export.export``: to_onnx adds the conversion and the optimization
to the capture, the target is at most 1.3 on the Llamas. Each exporter runs once untimed on
the first model (its lazy initializations: imports, registries); ``--warm-up each`` does so on
every model. The to_onnx model of the last timed run is checked against eager.

    python bench/bench_export.py [--repeat 3] [--models mlp,cnn,llama64,llama512]
    python bench/bench_export.py --repeat 1 --models longformer-base --exporters torch.export,to_onnx

``longformer-base`` (not run by default: minutes) is ``LongformerForMaskedLM`` with transformers' default
configuration (12 layers, hidden 768, window 512, random weights) exported with a dynamic batch and
sequence (example 2 x 13, padded to the window); to_onnx captures it inside its transformers patches
(``patches="auto"``), torch.export.export and torch.onnx.export run inside
:func:`fx2onnx.torch_export_patches` (without them the capture fails on a data-dependent branch).
Measured numbers: ``design/patches.rst``.
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
from fx2onnx.zoo import export_dynamic_shapes, get_tiny_model
from fx2onnx.zoo.vision import small_cnn


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


def longformer_base():
    import transformers

    torch.manual_seed(0)
    config = transformers.LongformerConfig()
    model = transformers.LongformerForMaskedLM(config).eval()
    generator = torch.Generator().manual_seed(0)
    kwargs = {"input_ids": torch.randint(3, config.vocab_size, (2, 13), generator=generator),
              "attention_mask": torch.ones((2, 13), dtype=torch.int64)}
    ds = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return model, (), kwargs, ds


#: models measured only when named in --models (minutes each)
LARGE = {"longformer-base": longformer_base}

MODELS = {
    "mlp": mlp,
    "cnn": cnn,
    "llama64": lambda: llama(hidden_size=64, intermediate_size=128, num_hidden_layers=2),
    "llama512": lambda: llama(
        hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, intermediate_size=1376
    ),
}


def _median_times(fns: dict, repeat: int, warm_up: bool = True) -> dict:
    """Median time of each function; the runs are interleaved so that a busy machine
    slows all of them alike. With ``warm_up``, a first untimed run of each warms up lazy
    initializations."""
    for fn in fns.values() if warm_up else ():
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


def _patched(fn):
    """fn run inside fx2onnx's transformers patches (to_onnx applies them itself)."""
    def run():
        with fx2onnx.torch_export_patches(patch_transformers=True), torch.no_grad():
            return fn()
    return run


EXPORTERS = ("torch.export", "to_onnx", "torch.onnx.export")


def bench(name: str, repeat: int, exporters: tuple[str, ...] = EXPORTERS, warm_up: bool = True) -> dict:
    model, args, kwargs, ds = {**MODELS, **LARGE}[name]()
    torch_ds = export_dynamic_shapes(ds)
    row = {"model": name}
    exported: dict = {}

    def to_onnx():
        exported["onx"] = fx2onnx.to_onnx(model, args, kwargs, dynamic_shapes=ds)
        return exported["onx"]

    fns = {
        "torch.export": lambda: torch.export.export(model, args, kwargs, dynamic_shapes=torch_ds, strict=False),
        "to_onnx": to_onnx,
        "torch.onnx.export": lambda: _quiet(
            torch.onnx.export, model, args, kwargs=kwargs, dynamic_shapes=torch_ds, dynamo=True
        ),
    }
    if name in LARGE:
        fns["torch.export"] = _patched(fns["torch.export"])
        fns["torch.onnx.export"] = _patched(fns["torch.onnx.export"])
    row.update(_median_times({k: fn for k, fn in fns.items() if k in exporters}, repeat, warm_up))
    row.update({k: float("nan") for k in EXPORTERS if k not in exporters})
    # each model is checked once: a fast but wrong exporter would be no result
    onx = exported.get("onx") or to_onnx()
    report = fx2onnx.validate(onx, model, args, kwargs)
    assert report.ok, f"{name}: {report}"
    row["to_onnx / torch.export"] = row["to_onnx"] / row["torch.export"]
    return row


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS), help=f"among {', '.join({**MODELS, **LARGE})}")
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--warm-up", choices=["first", "each"], default="first",
                        help="an untimed run of each exporter on the first model only, or on each model")
    options = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    rows = []
    columns = ["model", "torch.export", "to_onnx", "torch.onnx.export", "to_onnx / torch.export"]
    print(" | ".join(f"{c:>22}" for c in columns), flush=True)
    for index, name in enumerate(options.models.split(",")):
        warm_up = index == 0 or options.warm_up == "each"
        row = bench(name, options.repeat, tuple(options.exporters.split(",")), warm_up)
        rows.append(row)
        cells = [f"{row[c]:>22.3f}" if isinstance(row[c], float) else f"{row[c]:>22}" for c in columns]
        print(" | ".join(cells), flush=True)
    return rows


if __name__ == "__main__":
    main()
