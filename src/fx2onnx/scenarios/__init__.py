"""The scenario zoo: small modules exported by several exporters, static and dynamic.

* :mod:`~fx2onnx.scenarios.cases`: the cases (``get_cases()``), from fx2onnx's
  own case modules and from torch's export database,
* :mod:`~fx2onnx.scenarios.run`: ``run()`` exports every case with every exporter and
  returns one row per task,
* :mod:`~fx2onnx.scenarios.report`: rows -> rst pages and a chart,
* :mod:`~fx2onnx.scenarios.build`: both, with a cache (``python -m fx2onnx scenarios``).
"""

from __future__ import annotations

from .build import build_pages
from .cases import get_case, get_cases
from .report import summary, write_pages
from .run import EXPORTERS, run, run_task

__all__ = ["EXPORTERS", "build_pages", "get_case", "get_cases", "run", "run_task", "summary", "write_pages"]
