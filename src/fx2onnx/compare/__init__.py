"""Comparing two ONNX models result by result.

:func:`compare_onnx_execution` runs both models keeping every intermediate
result, aligns the two sequences with an edit distance and shows where the
values start to diverge.
"""

from .api import compare_onnx_execution
from .feeds import check_feeds, load_model
from .report import AlignedRow, CompareResult
from .results import ResultInfo, run_with_intermediate_results

__all__ = [
    "AlignedRow",
    "CompareResult",
    "ResultInfo",
    "check_feeds",
    "compare_onnx_execution",
    "load_model",
    "run_with_intermediate_results",
]
