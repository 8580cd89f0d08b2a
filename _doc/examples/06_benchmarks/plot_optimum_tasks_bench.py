"""
.. _l-plot-optimum-tasks-bench:

Pipeline tasks from a folder: fx2onnx beside optimum
====================================================

The same checkpoint folder exported by both tools, each with no option but the task optimum needs:
``python -m fx2onnx export FOLDER --out OUT`` and ``optimum-cli export onnx --model FOLDER --task
TASK OUT`` (optimum-onnx in its own environment, which pins transformers 4.57). The folders hold the
published configurations of BERT-base (a text classifier), all-MiniLM-L6 (an embedder), ViT-base,
wav2vec2-base (CTC), DETR-ResNet-50 and T5-small, written in code with random weights and a
processor made in code.

``bench/bench_optimum_tasks.py`` measures, for each tool: the export's wall time (each runs its own
check against PyTorch), the size of the files written, the largest difference of the first output to
the eager model (transformers, float32, one input) and onnxruntime's latency (median, warm) at 1 and
2 intra-op threads for a batch of 1 and of 8: texts of 128 tokens, 224x224 images, 1 s of 16 kHz
audio, 800x800 images for DETR; T5's encoder for T5. The two tools' runs alternate (the order
reversed every other round), so a load coming or going weighs on both alike, each after a pause of
50 ms: onnxruntime's worker threads spin a while after a run ends, and without the pause they held
a core during the other tool's next run (at 2 threads that alone made either tool look up to 1.2x
slower). At 1 thread the CPU time of a run is stored too, which other jobs disturb less than the
wall clock. The numbers come from ``_doc/bench/optimum_tasks.json``, measured on this project's
2-core machine (the JSON's note and each row's load average say how loaded): a ratio within a few
percent says little. The model types each tool exports per task are counted on the
:doc:`tasks page </models/tasks>`.
"""

import json
import os

import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
root = os.path.join(here, "..", "..", "..")
with open(os.path.join(root, "_doc", "bench", "optimum_tasks.json"), encoding="utf-8") as f:
    stored = json.load(f)
print(f"{stored['date']}: {stored['command']}")
print(f"machine: {stored['machine']}; optimum: {', '.join(stored['optimum'][:3])}")
print(", ".join(f"{k} {v}" for k, v in stored.get("versions", {}).items()))
if stored.get("note"):
    print(stored["note"])
rows = stored["rows"]
tools = ("ours", "optimum")


def cell(row, tool, key, fmt="{:.1f}"):
    value = row.get(tool, {}).get(key)
    return "-" if value is None else fmt.format(value)


# %%
# Export time, files size, difference to eager
# --------------------------------------------

print(f"{'model':<15}{'task':<31}{'export s':>16}{'files MB':>16}{'eager diff':>20}")
for r in rows:
    pairs = [" / ".join(cell(r, t, key, fmt) for t in tools)
             for key, fmt in (("export_seconds", "{:.0f}"), ("files_mb", "{:.0f}"),
                              ("eager_max_abs_diff", "{:.0e}"))]
    print(f"{r['model']:<15}{r['task'][:30]:<31}{pairs[0]:>16}{pairs[1]:>16}{pairs[2]:>20}")
print("(ours / optimum)")
for r in rows:
    for tool in tools:
        if r.get(tool, {}).get("error") or r.get("error"):
            print(f"{r['model']}, {tool}: {r.get(tool, {}).get('error') or r.get('error')}")

# %%
# Latency
# -------
#
# Milliseconds per run, ours / optimum, and the ratio (below 1: ours is faster).

settings = ("t1_b1", "t1_b8", "t2_b1", "t2_b8")
print(f"{'model':<15}" + "".join(f"{s:>21}" for s in settings))
ratios = {}
for r in rows:
    ours, theirs = (r.get(t, {}).get("latency_ms") or {} for t in tools)
    cells = []
    for s in settings:
        if s in ours and s in theirs:
            ratios[r["model"], s] = ours[s] / theirs[s]
            cells.append(f"{ours[s]:.0f}/{theirs[s]:.0f} {ours[s] / theirs[s]:.2f}x")
        else:
            cells.append("-")
    print(f"{r['model']:<15}" + "".join(f"{c:>21}" for c in cells))

# %%
# At 1 thread, the CPU time of a run (milliseconds, ours / optimum, and the ratio), where the rows
# store it.

print(f"{'model':<15}" + "".join(f"{s:>21}" for s in settings[:2]))
for r in rows:
    ours, theirs = (r.get(t, {}).get("cpu_ms") or {} for t in tools)
    cells = [f"{ours[s]:.0f}/{theirs[s]:.0f} {ours[s] / theirs[s]:.2f}x"
             if s in ours and s in theirs else "-" for s in settings[:2]]
    print(f"{r['model']:<15}" + "".join(f"{c:>21}" for c in cells))

# %%
# Per row: files no larger (to the tenth of a MB) and a CPU time no larger (to the hundredth) at 1 thread than
# optimum's (batch 1 and 8), and the machine's load average when the row started and ended.

for r in rows:
    ours, theirs = r.get("ours", {}), r.get("optimum", {})
    size = (ours.get("files_mb") is not None and theirs.get("files_mb") is not None
            and ours["files_mb"] <= theirs["files_mb"])
    ours_cpu, theirs_cpu = ours.get("cpu_ms") or {}, theirs.get("cpu_ms") or {}
    cpu = [ours_cpu[s] / theirs_cpu[s] for s in settings[:2] if s in ours_cpu and s in theirs_cpu]
    faster = bool(cpu) and max(round(c, 2) for c in cpu) <= 1.0
    ratio = " ".join(f"{c:.2f}x" for c in cpu) or "-"
    load = r.get("load_average")
    print(f"{r['model']:<15} no larger: {'yes' if size else 'no':<4} no slower (CPU {ratio}): "
          f"{'yes' if faster else 'no':<4} load {load if load else '-'}")

# %%
# The ratios, per model and setting.

models = [r["model"] for r in rows if any((r["model"], s) in ratios for s in settings)]
fig, ax = plt.subplots(figsize=(9, 3.6))
for i, s in enumerate(settings):
    ax.bar([m + (i - 1.5) * 0.2 for m in range(len(models))],
           [ratios.get((name, s), 0) for name in models], 0.2, label=s.replace("_", ", "))
ax.axhline(1.0, color="black", linewidth=0.8)
ax.set_xticks(range(len(models)), models)
ax.set_ylabel("latency ours / optimum")
ax.legend(ncol=4, fontsize="small")
fig.tight_layout()
