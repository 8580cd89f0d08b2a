"""Peak memory of one export, measured in a fresh process: torch.export.export, to_onnx, torch.onnx.export.

    python bench/bench_export_memory.py mlp to_onnx          # the MB the export added
    python bench/bench_export_memory.py "tiny llama" torch.onnx.export

The process builds the model, exports a single ``Linear`` first (the exporter's modules are
loaded then), resets its peak resident memory (``VmHWM``, Linux: ``5`` written to
``/proc/self/clear_refs``), exports the model and prints how far the peak rose above the memory
used before the export. In a process which exported before, the memory freed by the previous
exports would be reused and every export would seem to cost nothing: hence one process per
measurement. The gallery example ``plot_torch_export_201.py`` uses the exporters and models of
this file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import torch

import fx2onnx
from fx2onnx.zoo import export_dynamic_shapes, get_tiny_model

#: name -> ``export(model, args, kwargs, dynamic_shapes)``
EXPORTERS = {
    "torch.export": lambda m, a, k, ds: torch.export.export(m, a, k, dynamic_shapes=export_dynamic_shapes(ds)),
    "to_onnx": lambda m, a, k, ds: fx2onnx.to_onnx(m, a, kwargs=k, dynamic_shapes=ds),
    "torch.onnx.export": lambda m, a, k, ds: torch.onnx.export(
        m, a, kwargs=k, dynamic_shapes=ds, dynamo=True, verbose=False
    ).model_proto,
}


def build(name: str) -> tuple:
    """``mlp`` or ``tiny llama``: the model, args, kwargs, dynamic shapes, then a second input set
    (args, kwargs) of other shapes."""
    torch.manual_seed(0)
    if name == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)).eval()
        return model, (torch.randn(8, 64),), {}, ({0: "batch"},), (torch.randn(5, 64),), {}
    if name == "tiny llama":
        tiny = get_tiny_model("llama")
        return tiny.model, (), tiny.inputs, tiny.dynamic_shapes, (), tiny.inputs2
    raise ValueError(f"unknown model {name!r}")


def _status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return int(next(line for line in f if line.startswith(field + ":")).split()[1])


def child(model_name: str, exporter: str) -> float:
    """Runs in the fresh process: the MB one export adds to the peak resident memory."""
    warnings.filterwarnings("ignore")
    export = EXPORTERS[exporter]
    model, args, kwargs, dynamic_shapes = build(model_name)[:4]
    export(torch.nn.Linear(2, 2), (torch.randn(3, 2),), {}, ({0: "batch"},))  # loads the exporter's modules
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # VmHWM becomes the current resident memory
    before = _status_kb("VmRSS")
    export(model, args, kwargs, dynamic_shapes)
    return (_status_kb("VmHWM") - before) / 1024


def peak_memory_mb(model_name: str, exporter: str) -> float:
    """Starts a fresh process measuring one export (one thread); returns the MB it added."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), model_name, exporter], capture_output=True,
                          text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return float(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(child(*sys.argv[1:3]))
