"""Every ``torch.nn`` module with a ModuleInfo, on its sample inputs, through ``to_onnx`` and onnxruntime.

torch's test suite describes its modules (``module_db``: ``nn.LSTM`` with projections, ``nn.Conv3d``
with groups, ``nn.TransformerDecoderLayer``...) with constructor arguments and forward inputs. This script
builds each sample in evaluation mode, exports it with :func:`fx2onnx.to_onnx` (``--dynamic``: every
dimension ``Dim.AUTO``), runs it with onnxruntime on the same inputs and compares with eager, with the
statuses of ``opinfo_sweep.py`` (whose checks it reuses). It measures, it does not fail.

    python bench/moduleinfo_sweep.py --dynamic
    python bench/moduleinfo_sweep.py --modules "LSTM|GRU" --dtypes float32,float64

Every module and dtype is a task of :func:`fx2onnx.runner.run_tasks`, as in ``opinfo_sweep.py``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import re
import sys
import warnings
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from opinfo_sweep import check_sample, echo_failures, print_summary, record  # noqa: E402

from fx2onnx.runner import run_tasks  # noqa: E402

#: random in evaluation mode too, or no forward pass to compare
LEFT_OUT = re.compile(r"Dropout|RReLU|FractionalMaxPool|Lazy|CrossMapLRN|Embedding(Bag)?$")


@dataclasses.dataclass
class _Call:
    """A module's forward inputs in the form ``check_sample`` reads (first argument, the others, keywords)."""

    input: Any
    args: tuple
    kwargs: dict


_MODULES: dict[str, Any] = {}


def _modules() -> dict[str, Any]:
    """ModuleInfo name (class and variant) -> ModuleInfo."""
    if not _MODULES:
        from torch.testing._internal.common_modules import module_db

        for info in module_db:
            name = info.module_cls.__name__ + (f".{info.variant_name}" if getattr(info, "variant_name", "") else "")
            _MODULES[name] = info
    return _MODULES


def run_module(task: tuple[str, str, int, bool]) -> dict[str, Any]:
    """The rows of the samples of one module and dtype, ``task = (name, dtype, samples, dynamic)``:
    a task of :func:`fx2onnx.runner.run_tasks` (the rows under ``rows``)."""
    name, dtype_name, samples, dynamic = task
    info, dtype = _modules()[name], getattr(torch, dtype_name)
    rows: list[dict[str, Any]] = []
    try:
        inputs = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=False, training=False)
    except Exception:  # noqa: BLE001 - a sample torch cannot build is no test
        inputs = []
    for index, module_input in enumerate(inputs[:samples]):
        forward = module_input.forward_input
        if forward is None or not forward.args:
            continue
        ctor = module_input.constructor_input
        torch.manual_seed(0)
        try:
            module = info.module_cls(*ctor.args, **ctor.kwargs).to(dtype).eval()
        except Exception:  # noqa: BLE001
            continue
        args = copy.deepcopy(forward.args)
        call = _Call(args[0], tuple(args[1:]), dict(forward.kwargs))
        record(rows, "module", name, dtype, index, check_sample(module, call, dynamic), echo=False)
    return dict(module=name, dtype=dtype_name, rows=rows, success=all(r["status"] == "ok" for r in rows), error=None)


def failed_task(task: tuple, step: str, error: str, elapsed: float) -> dict[str, Any]:
    """The row of a module whose process hung or died: one sample row with status ``timeout`` / ``crash``."""
    row = {"module": task[0], "dtype": task[1], "sample": -1, "status": step, "message": error}
    return dict(module=task[0], dtype=task[1], rows=[row], success=False, error=error)


def sweep(modules: str | None, dtypes: list[torch.dtype], samples: int, dynamic: bool, workers: int = 2,
          timeout: float = 600.0) -> list[dict[str, Any]]:
    """Every module x dtype as a task of :func:`fx2onnx.runner.run_tasks` (``workers=0``: in this process)."""
    pattern = re.compile(modules) if modules else None
    tasks = [(name, str(dtype).replace("torch.", ""), samples, dynamic)
             for name, info in _modules().items() if not LEFT_OUT.search(name) and not (pattern and not pattern.search(name))
             for dtype in dtypes if dtype in info.dtypes]
    task_rows = run_tasks(tasks, run_module, failed_task, workers=workers, timeout=timeout, on_row=echo_failures,
                          description="moduleinfo")
    return [row for task_row in task_rows for row in task_row["rows"]]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", help="regular expression on the module class names")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--samples", type=int, default=4, help="samples per module and dtype")
    parser.add_argument("--dynamic", action="store_true", help="every dimension Dim.AUTO")
    parser.add_argument("--workers", type=int, default=2, help="workers of the local cluster (0: in this process)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the samples of one module")
    parser.add_argument("--address", default=None, help="a running dask cluster (tcp://host:8786), 'local' or 'pool'; "
                        "default: the environment variable FX2ONNX_CLUSTER, else a local cluster")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.address:  # read by fx2onnx.runner.run_tasks
        os.environ["FX2ONNX_CLUSTER"] = args.address
    rows = sweep(args.modules, [getattr(torch, d) for d in args.dtypes.split(",")], args.samples, args.dynamic,
                 args.workers, args.timeout)
    print_summary(rows, "module", "modules")
    return rows


if __name__ == "__main__":
    import moduleinfo_sweep  # the workers receive the functions by name (see opinfo_sweep.py)

    moduleinfo_sweep.main()
