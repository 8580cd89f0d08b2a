"""The sweeps' runner: the local pool (no engine) against dask distributed, on 1 and 2 workers.

    python bench/bench_runner.py                       # every measurement, a table on stdout
    python bench/bench_runner.py --repeat 3 --json runner.json
    python bench/bench_runner.py --address tcp://host:8786   # also the same sweep on a running cluster

Three measurements (design/runner.rst shows the table):

* **start-up**: the seconds to start a local cluster of 2 workers and stop it, nothing run;
* **empty tasks**: ``--empty`` tasks doing nothing: the runner's own cost per task,
  ``workers x wall / tasks`` (start-up included, sandboxes included);
* **scenario zoo**: real exports, the scenario zoo restricted to ``--cases`` with every
  exporter, static and dynamic: the wall time, the seconds spent inside the tasks (measured
  in the task's process) and the overhead per task, ``(workers x wall - time in tasks) / tasks``.

Each configuration runs ``--repeat`` times, interleaved (in the reverse order every other time),
and the median is kept: the machine may be shared.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import time
from typing import Any

from fx2onnx.runner import run_tasks

#: a few scenarios of each kind of signature (plain tensors, control flow, shapes, pytrees)
CASES = ["OneTensor", "TwoTensors", "DictOfTensors", "CondOnValue"]


def _empty(task: int) -> dict[str, Any]:
    return dict(task=task, success=True, error=None, time=0.0)


def _failed(task: Any, step: str, error: str, elapsed: float) -> dict[str, Any]:
    return dict(task=task, success=False, step=step, error=error, time=elapsed)


def _scenario(task: tuple) -> dict[str, Any]:
    run = importlib.import_module("fx2onnx.scenarios.run")
    begin = time.perf_counter()
    row = run.run_task(*task)
    row["inside"] = time.perf_counter() - begin
    return row


def startup(address: str = "local", workers: int = 2) -> float:
    """Seconds to start a local cluster of ``workers`` and stop it (or connect and disconnect)."""
    from fx2onnx.runner.cluster import connect

    begin = time.perf_counter()
    with connect(address, workers) as client:
        client.wait_for_workers(workers if address == "local" else 1)
    return time.perf_counter() - begin


def sweep(tasks: list, run_one, address: str, workers: int) -> dict[str, float]:
    """Wall time, seconds inside the tasks and the overhead per task of one sweep."""
    begin = time.perf_counter()
    rows = run_tasks(tasks, run_one, _failed, workers=workers, timeout=300, progress=False, address=address)
    wall = time.perf_counter() - begin
    inside = sum(r.get("inside", 0.0) for r in rows)
    return dict(wall=wall, inside=inside, overhead=(workers * wall - inside) / len(tasks),
                failed=sum(not r["success"] for r in rows))


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--empty", type=int, default=100, help="number of empty tasks")
    parser.add_argument("--cases", nargs="*", default=CASES, help="scenario cases of the real sweep")
    parser.add_argument("--workers", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--address", default=None, help="also run on this cluster (its own workers)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["startup", "empty", "scenarios"])
    parser.add_argument("--json", default=None, help="write the rows there")
    args = parser.parse_args(argv)

    run = importlib.import_module("fx2onnx.scenarios.run")
    real = run.make_tasks(args.cases, list(run.EXPORTERS), (False, True))
    configs = [(where, w) for w in args.workers for where in ("pool", "local")]
    if args.address:
        configs.append((args.address, 1))
    measures: dict[tuple, list[dict[str, float]]] = {}
    for repeat in range(args.repeat):
        if "startup" not in args.skip:
            measures.setdefault(("startup", "local", 2), []).append(dict(wall=startup("local", 2)))
        for where, w in configs if repeat % 2 == 0 else configs[::-1]:  # no runner always first
            if "empty" not in args.skip:
                measures.setdefault(("empty", where, w), []).append(sweep(list(range(args.empty)), _empty, where, w))
            if "scenarios" not in args.skip:
                measures.setdefault(("scenarios", where, w), []).append(sweep(real, _scenario, where, w))
    rows = []
    for (name, where, w), runs in measures.items():
        row = dict(sweep=name, runner=where, workers=w, runs=len(runs),
                   tasks={"empty": args.empty, "scenarios": len(real)}.get(name, 0))
        for key in runs[0]:
            row[key] = statistics.median(r[key] for r in runs)
        rows.append(row)
    print(f"{'sweep':<10} {'runner':<8} {'workers':>7} {'tasks':>5} {'wall s':>8} {'in tasks s':>10} "
          f"{'overhead s/task':>15}")
    for r in rows:
        print(f"{r['sweep']:<10} {r['runner']:<8} {r['workers']:>7} {r['tasks']:>5} {r['wall']:>8.2f} "
              f"{r.get('inside', 0.0):>10.2f} {r.get('overhead', float('nan')):>15.3f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(rows=rows, cpus=os.cpu_count(), load=os.getloadavg()), f, indent=1)
    return rows


if __name__ == "__main__":
    main()
