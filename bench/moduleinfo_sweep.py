"""Every ``torch.nn`` module with a ModuleInfo, on its sample inputs, through ``to_onnx`` and onnxruntime.

torch's test suite describes its modules (``module_db``: ``nn.LSTM`` with projections, ``nn.Conv3d``
with groups, ``nn.TransformerDecoderLayer``...) with constructor arguments and forward inputs. This script
builds each sample in evaluation mode, exports it with :func:`fx2onnx.to_onnx` (``--dynamic``: every
dimension ``Dim.AUTO``), runs it with onnxruntime on the same inputs and compares with eager, with the
statuses of ``opinfo_sweep.py`` (whose checks it reuses). It measures, it does not fail.

    python bench/moduleinfo_sweep.py --dynamic
    python bench/moduleinfo_sweep.py --modules "LSTM|GRU" --dtypes float32,float64
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
from opinfo_sweep import check_sample, print_summary, record  # noqa: E402

#: random in evaluation mode too, or no forward pass to compare
LEFT_OUT = re.compile(r"Dropout|RReLU|FractionalMaxPool|Lazy|CrossMapLRN|Embedding(Bag)?$")


@dataclasses.dataclass
class _Call:
    """A module's forward inputs in the form ``check_sample`` reads (first argument, the others, keywords)."""

    input: Any
    args: tuple
    kwargs: dict


def sweep(modules: str | None, dtypes: list[torch.dtype], samples: int, dynamic: bool) -> list[dict[str, Any]]:
    from torch.testing._internal.common_modules import module_db

    pattern = re.compile(modules) if modules else None
    rows = []
    for info in module_db:
        name = info.module_cls.__name__ + (f".{info.variant_name}" if getattr(info, "variant_name", "") else "")
        if LEFT_OUT.search(name) or (pattern and not pattern.search(name)):
            continue
        for dtype in dtypes:
            if dtype not in info.dtypes:
                continue
            try:
                inputs = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=False, training=False)
            except Exception:  # noqa: BLE001 - a sample torch cannot build is no test
                continue
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
                record(rows, "module", name, dtype, index, check_sample(module, call, dynamic))
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", help="regular expression on the module class names")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--samples", type=int, default=4, help="samples per module and dtype")
    parser.add_argument("--dynamic", action="store_true", help="every dimension Dim.AUTO")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    rows = sweep(args.modules, [getattr(torch, d) for d in args.dtypes.split(",")], args.samples, args.dynamic)
    print_summary(rows, "module", "modules")
    return rows


if __name__ == "__main__":
    main()
