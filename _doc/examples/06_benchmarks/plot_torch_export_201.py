"""
.. _l-plot-torch-export-201:

Exporters compared: export time, peak memory, latency of the exported model
===========================================================================

Three ways to get a graph from a model:

* :func:`torch.export.export` alone, the capture every exporter below starts with,
* :func:`fx2onnx.to_onnx`, the capture then one converter per aten operator,
* ``torch.onnx.export(..., dynamo=True)``, the capture, torch's decompositions and
  the translation with :epkg:`onnxscript`.

For an MLP and a one-layer tiny Llama, this example measures the export time (median
of three exports of the MLP, one of the Llama), the peak memory of an export and the
latency of the exported model, compared with eager and :func:`torch.compile` (inductor,
MLP only: on a small machine inductor needs more than a minute to compile the C++
kernels of the Llama). Every ONNX model is checked against eager on a second input of
other shapes (``atol=1e-4``).

The exporters
-------------
"""

import copy
import os
import statistics
import subprocess
import sys
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import onnxruntime
import torch

import fx2onnx
from fx2onnx.models import export_dynamic_shapes, get_tiny_model
from fx2onnx.validation import flatten_outputs, make_feeds

warnings.filterwarnings("ignore")
EXPORTERS = {  # (model, args, kwargs, dynamic shapes) -> exported model
    "torch.export": lambda m, a, k, ds: torch.export.export(m, a, k, dynamic_shapes=export_dynamic_shapes(ds)),
    "to_onnx": lambda m, a, k, ds: fx2onnx.to_onnx(m, a, kwargs=k, dynamic_shapes=ds),
    "torch.onnx.export": lambda m, a, k, ds: torch.onnx.export(
        m, a, kwargs=k, dynamic_shapes=ds, dynamo=True, verbose=False
    ).model_proto,
}

mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)).eval()
tiny = get_tiny_model("llama")
MODELS = {
    "mlp": (mlp, (torch.randn(8, 64),), {}, ({0: "batch"},), (torch.randn(5, 64),), {}),
    "tiny llama": (tiny.model, (), tiny.inputs, tiny.dynamic_shapes, (), tiny.inputs2),
}
CPU, ONE_THREAD = ["CPUExecutionProvider"], onnxruntime.SessionOptions()
ONE_THREAD.intra_op_num_threads = 1  # latencies are measured on one thread


def median_time(fn, repeat):
    times, result = [], None
    for _ in range(repeat):
        begin, result = time.perf_counter(), fn()
        times.append(time.perf_counter() - begin)
    return statistics.median(times), result


# not measured: the first export of each exporter, the first capture of the Llama
for export in EXPORTERS.values():
    export(mlp, MODELS["mlp"][1], {}, MODELS["mlp"][3])
_ = EXPORTERS["torch.export"](tiny.model, (), copy.deepcopy(tiny.inputs), tiny.dynamic_shapes)

# %%
# Export time and memory
# ----------------------
#
# The peak memory of an export is measured in a fresh Python process (the script
# ``PEAK`` below): the model is built, a first export of a single ``Linear`` loads the
# modules of the exporter, the process's peak resident memory (``VmHWM``) is reset, the
# model is exported, and the peak is compared with the memory used before the export. Measured in this process, the memory freed by the previous exports
# would be reused and every export would cost "0 MB". Part of the time of
# ``torch.onnx.export`` does not depend on the model: at every call it builds its
# registry of onnxscript functions (most of the export time of the MLP).

PEAK = """
import sys, warnings
warnings.filterwarnings("ignore")
import torch, fx2onnx
from fx2onnx.models import export_dynamic_shapes, get_tiny_model

def status_kb(field):
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith(field)).split()[1])

model_name, exporter = sys.argv[1:3]
if model_name == "mlp":
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)).eval()
    args, kwargs, ds = (torch.randn(8, 64),), {}, ({0: "batch"},)
else:
    tiny = get_tiny_model("llama")
    model, args, kwargs, ds = tiny.model, (), tiny.inputs, tiny.dynamic_shapes


def export(m, a, k, ds):
    if exporter == "torch.export":
        return torch.export.export(m, a, k, dynamic_shapes=export_dynamic_shapes(ds))
    if exporter == "to_onnx":
        return fx2onnx.to_onnx(m, a, kwargs=k, dynamic_shapes=ds)
    return torch.onnx.export(m, a, kwargs=k, dynamic_shapes=ds, dynamo=True, verbose=False)


export(torch.nn.Linear(2, 2), (torch.randn(3, 2),), {}, ({0: "batch"},))  # loads the exporter's modules
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current resident memory
before = status_kb("VmRSS")
export(model, args, kwargs, ds)
print((status_kb("VmHWM") - before) / 1024)
"""


def peak_memory_mb(model_name, exporter):
    done = subprocess.run([sys.executable, "-c", PEAK, model_name, exporter], capture_output=True, text=True,
                          check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return float(done.stdout.strip().splitlines()[-1])


rows = []
for model_name, (model, args, kwargs, ds, args2, kwargs2) in MODELS.items():
    for name, export in EXPORTERS.items():
        repeat = 3 if model_name == "mlp" else 1
        duration, exported = median_time(lambda: export(model, args, copy.deepcopy(kwargs), ds), repeat)
        row = dict(model=model_name, exporter=name, export_s=duration, memory_mb=peak_memory_mb(model_name, name))
        if name == "torch.export":
            runner = exported.module()
            pairs = zip(flatten_outputs(runner(*args2, **kwargs2)), flatten_outputs(model(*args2, **kwargs2)))
            diff = max((a - b).abs().max().item() for a, b in pairs)
            row["call"] = lambda r=runner, a=args2, k=kwargs2: r(*a, **k)
        else:
            report = fx2onnx.validate(exported, model, args2, kwargs2, atol=1e-4)
            assert report.ok, (model_name, name, report)
            sess = onnxruntime.InferenceSession(exported.SerializeToString(), ONE_THREAD, providers=CPU)
            diff, feeds = report.max_abs, make_feeds(sess, args2, kwargs2)
            row["call"] = lambda s=sess, f=feeds: s.run(None, f)
        assert diff < 1e-4, (model_name, name, diff)
        assert row["memory_mb"] > 0, row  # an export allocates
        print(f"{model_name:>10} {name:>17}: {duration:.2f} s, +{row['memory_mb']:.1f} MB, max diff {diff:.1e}")
        rows.append(row)

# %%
# Latency
# -------
#
# Eager and ``torch.compile`` run on the same second inputs, ``torch.export`` means
# the module it returns, the ONNX exporters mean their model run by onnxruntime.
# Every runtime uses one thread (torch's setting is restored after).

for model_name, (model, args, kwargs, ds, args2, kwargs2) in MODELS.items():
    rows.append(dict(model=model_name, exporter="eager", call=lambda m=model, a=args2, k=kwargs2: m(*a, **k)))
x2 = MODELS["mlp"][4][0]
with torch._inductor.config.patch(compile_threads=1), torch.no_grad():
    compiled = torch.compile(copy.deepcopy(mlp))
    torch.testing.assert_close(compiled(x2), mlp(x2), atol=1e-4, rtol=1e-3)
rows.append(dict(model="mlp", exporter="torch.compile", call=lambda: compiled(x2)))

torch_threads = torch.get_num_threads()
torch.set_num_threads(1)
with torch.no_grad():
    for row in rows:
        row["call"]()  # warm-up
        row["latency_ms"] = median_time(row.pop("call"), repeat=10)[0] * 1000
        print(f"{row['model']:>10} {row['exporter']:>17}: {row['latency_ms']:.3f} ms")
torch.set_num_threads(torch_threads)
assert len(rows) == 9 and all(r["latency_ms"] > 0 for r in rows)

# %%
# Plots
# -----

fig, axes = plt.subplots(1, 3, figsize=(15, 4))
panels = [("export_s", list(EXPORTERS), "export time (s)"), ("memory_mb", list(EXPORTERS), "peak memory (MB)"),
          ("latency_ms", ["eager", "torch.compile", *EXPORTERS], "latency (ms, one thread, log scale)")]
for ax, (key, names, title) in zip(axes, panels):
    for k, model_name in enumerate(MODELS):
        by_name = {r["exporter"]: r[key] for r in rows if r["model"] == model_name and key in r}
        ax.bar(np.arange(len(names)) + (k - 0.5) * 0.4, [by_name.get(n, np.nan) for n in names], 0.4, label=model_name)
    ax.set_xticks(range(len(names)), [n.replace(".", ".\n", 1) for n in names])
    ax.set_yscale("log" if key == "latency_ms" else "linear")
    ax.set_title(title)
    ax.legend()
fig.tight_layout()
