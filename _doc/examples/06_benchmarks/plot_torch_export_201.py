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
import importlib.util
import os
import statistics
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import onnxruntime
import torch

import fx2onnx
from fx2onnx.validation import flatten_outputs, make_feeds

warnings.filterwarnings("ignore")

# %%
# The exporters and the two models come from the repository's script
# ``bench/bench_export_memory.py``, which also measures the memory of an export.

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
path = os.path.join(here, "..", "..", "..", "bench", "bench_export_memory.py")
spec = importlib.util.spec_from_file_location("bench_export_memory", path)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
EXPORTERS, MODELS = bench.EXPORTERS, {name: bench.build(name) for name in ("mlp", "tiny llama")}
mlp = MODELS["mlp"][0]
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
    export(*MODELS["mlp"][:4])
llama, args, kwargs, ds = MODELS["tiny llama"][:4]
_ = EXPORTERS["torch.export"](llama, args, copy.deepcopy(kwargs), ds)

# %%
# Export time and memory
# ----------------------
#
# The peak memory of an export is measured in a fresh Python process
# (``bench.peak_memory_mb``): the model is built, a first export of a single ``Linear``
# loads the modules of the exporter, the process's peak resident memory (``VmHWM``) is
# reset, the model is exported, and the peak is compared with the memory used before the
# export. Measured in this process, the memory freed by the previous exports would be
# reused and every export would cost "0 MB". Part of the time of ``torch.onnx.export``
# does not depend on the model: at every call it builds its registry of onnxscript
# functions (most of the export time of the MLP).

rows = []
for model_name, (model, args, kwargs, ds, args2, kwargs2) in MODELS.items():
    for name, export in EXPORTERS.items():
        repeat = 3 if model_name == "mlp" else 1
        duration, exported = median_time(lambda: export(model, args, copy.deepcopy(kwargs), ds), repeat)
        memory = bench.peak_memory_mb(model_name, name)
        row = dict(model=model_name, exporter=name, export_s=duration, memory_mb=memory)
        if name == "torch.export":
            runner = exported.module()
            pairs = zip(
                flatten_outputs(runner(*args2, **kwargs2)), flatten_outputs(model(*args2, **kwargs2))
            )
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
        print(
            f"{model_name:>10} {name:>17}: {duration:.2f} s, +{row['memory_mb']:.1f} MB, max diff "
            f"{diff:.1e}"
        )
        rows.append(row)

# %%
# Latency
# -------
#
# Eager and ``torch.compile`` run on the same second inputs, ``torch.export`` means
# the module it returns, the ONNX exporters mean their model run by onnxruntime.
# Every runtime uses one thread (torch's setting is restored after).

for model_name, (model, args, kwargs, ds, args2, kwargs2) in MODELS.items():
    rows.append(
        dict(model=model_name, exporter="eager", call=lambda m=model, a=args2, k=kwargs2: m(*a, **k))
    )
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

fig, axes = plt.subplots(3, 1, figsize=(7.4, 10))  # stacked: the page's width
panels = [
    ("export_s", list(EXPORTERS), "export time (s)"),
    ("memory_mb", list(EXPORTERS), "peak memory (MB)"),
    ("latency_ms", ["eager", "torch.compile", *EXPORTERS], "latency (ms, one thread, log scale)"),
]
for ax, (key, names, title) in zip(axes, panels):
    for k, model_name in enumerate(MODELS):
        by_name = {r["exporter"]: r[key] for r in rows if r["model"] == model_name and key in r}
        ax.bar(
            np.arange(len(names)) + (k - 0.5) * 0.4,
            [by_name.get(n, np.nan) for n in names],
            0.4,
            label=model_name,
        )
    ax.set_xticks(range(len(names)), [n.replace(".", ".\n", 1) for n in names])
    ax.set_yscale("log" if key == "latency_ms" else "linear")
    ax.set_title(title)
    ax.legend()
fig.tight_layout()
