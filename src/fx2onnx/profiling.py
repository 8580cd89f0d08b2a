"""Profiling an ONNX model with onnxruntime: time per node and per op type.

onnxruntime's profiler writes a JSON trace (one event per node per run);
:func:`profile` runs the model with it, drops the warmup runs, and returns a
DataFrame with one row per node. :func:`aggregate_by_op_type` sums it per op
type and :func:`plot_profile` draws the op types taking the most time.

.. code-block:: python

    from fx2onnx.profiling import aggregate_by_op_type, plot_profile, profile

    per_node = profile(onx, {"x": x}, repeat=20)
    per_op = aggregate_by_op_type(per_node)
    plot_profile(per_op, top=8)
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Mapping, Sequence

import onnx

from .compare.feeds import check_feeds, load_model

_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
_KERNEL_SUFFIX = "_kernel_time"


def read_profile_events(path: str | os.PathLike):
    """Reads an onnxruntime profiling trace into a DataFrame, one row per node execution.

    Columns: ``run`` (index of the run the event belongs to, -1 if outside any run),
    ``node``, ``op_type``, ``provider``, ``ts`` and ``duration_us`` (microseconds).
    """
    import pandas

    with open(path, encoding="utf-8") as f:
        events = json.load(f)
    runs = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    rows = []
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith(_KERNEL_SUFFIX):
            continue
        args = e.get("args", {})
        run = next((k for k, (begin, end) in enumerate(runs) if begin <= e["ts"] <= end), -1)
        rows.append(
            {
                "run": run,
                "node": e["name"][: -len(_KERNEL_SUFFIX)],
                "op_type": args.get("op_name", "?"),
                "provider": args.get("provider", "?"),
                "ts": e["ts"],
                "duration_us": float(e["dur"]),
            }
        )
    frame = pandas.DataFrame(rows, columns=["run", "node", "op_type", "provider", "ts", "duration_us"])
    frame.attrs["runs"] = [end - begin for begin, end in runs]
    return frame


def profile(
    model: onnx.ModelProto | str | os.PathLike,
    feeds: Mapping[str, Any] | Sequence[Any],
    *,
    repeat: int = 10,
    warmup: int = 2,
    optimization: str = "all",
    providers: Sequence[str] | None = None,
    intra_op_num_threads: int | None = None,
):
    """Profiles a model with onnxruntime and returns the time spent in each node.

    :param model: a ModelProto or a path to an .onnx file
    :param feeds: a dict keyed by the input names or a list in order
        (numpy arrays or torch tensors)
    :param repeat: measured runs
    :param warmup: runs before the measured ones, not counted
    :param optimization: onnxruntime graph optimizations, ``"disable"`` (the nodes
        are those of the model), ``"basic"``, ``"extended"`` or ``"all"`` (what a
        user gets by default: fused nodes such as ``FusedMatMul`` may appear)
    :param providers: onnxruntime providers, CPU by default
    :param intra_op_num_threads: threads used by onnxruntime (its default if None)
    :return: a DataFrame sorted by decreasing time, one row per node: ``node``,
        ``op_type``, ``provider``, ``count`` (executions measured), ``total_us``,
        ``mean_us`` (per run) and ``share`` (fraction of the time of all nodes);
        ``frame.attrs`` holds ``repeat``, ``warmup`` and ``run_mean_us`` (mean time
        of one run as onnxruntime measured it)

    The profiling trace is written in a temporary directory removed afterwards.
    """
    import onnxruntime

    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat must be >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}.")
    if optimization not in _LEVELS:
        raise ValueError(f"optimization must be one of {sorted(_LEVELS)}, not {optimization!r}.")
    is_path = isinstance(model, (str, os.PathLike))
    # a file is given to onnxruntime as it is (its external weights stay on disk)
    proto = load_model(model, load_external_data=not is_path)
    checked = check_feeds(proto, feeds)
    with tempfile.TemporaryDirectory(prefix="fx2onnx_profile_") as folder:
        opts = onnxruntime.SessionOptions()
        opts.log_severity_level = 3
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(folder, "profile")
        opts.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, _LEVELS[optimization])
        if intra_op_num_threads is not None:
            opts.intra_op_num_threads = intra_op_num_threads
        sess = onnxruntime.InferenceSession(
            str(model) if is_path else proto.SerializeToString(),
            opts,
            providers=list(providers or ["CPUExecutionProvider"]),
        )
        for _ in range(warmup + repeat):
            sess.run(None, checked)
        events = read_profile_events(sess.end_profiling())
    measured = events[events["run"] >= warmup]
    grouped = measured.groupby(["node", "op_type", "provider"], sort=False)["duration_us"]
    frame = grouped.agg(count="count", total_us="sum").reset_index()
    frame["mean_us"] = frame["total_us"] / repeat
    total = frame["total_us"].sum()
    frame["share"] = frame["total_us"] / total if total > 0 else 0.0
    frame = frame.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)
    run_times = events.attrs["runs"][warmup:]
    frame.attrs.update(
        repeat=repeat,
        warmup=warmup,
        optimization=optimization,
        run_mean_us=sum(run_times) / len(run_times) if run_times else float("nan"),
    )
    return frame


def aggregate_by_op_type(per_node):
    """Sums the per-node profile of :func:`profile` per op type.

    :return: a DataFrame sorted by decreasing time: ``op_type``, ``n_nodes``,
        ``count``, ``total_us``, ``mean_us`` (per run) and ``share``
    """
    frame = (
        per_node.groupby("op_type", sort=False)
        .agg(n_nodes=("node", "nunique"), count=("count", "sum"), total_us=("total_us", "sum"), mean_us=("mean_us", "sum"))
        .reset_index()
    )
    total = frame["total_us"].sum()
    frame["share"] = frame["total_us"] / total if total > 0 else 0.0
    frame = frame.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)
    frame.attrs.update(per_node.attrs)
    return frame


def plot_profile(profile_frame, top: int = 10, ax=None, title: str | None = None):
    """Draws a horizontal bar chart of the ``top`` op types (or nodes) taking the most time.

    :param profile_frame: the output of :func:`profile` (bars per node) or of
        :func:`aggregate_by_op_type` (bars per op type)
    :param top: how many bars
    :param ax: a matplotlib Axes, a new figure if None
    :return: the Axes
    """
    import matplotlib.pyplot as plt

    key = "op_type" if "n_nodes" in profile_frame.columns else "node"
    data = profile_frame.sort_values("mean_us", ascending=False).head(top).iloc[::-1]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.35 * len(data) + 1.2))
    ax.barh(data[key].astype(str), data["mean_us"])
    for y, (value, share) in enumerate(zip(data["mean_us"], data["share"])):
        ax.text(value, y, f" {share:.0%}", va="center", fontsize=8)
    ax.set_xlabel("time per run (µs)")
    ax.set_title(title or f"top {len(data)} {'op types' if key == 'op_type' else 'nodes'} by time")
    return ax
