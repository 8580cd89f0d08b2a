"""compare_onnx_execution: run two models, keep every result, align them."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import onnx

from .align import align
from .feeds import check_feeds, load_model, map_feeds
from .report import AlignedRow, CompareResult
from .results import ResultInfo, run_with_intermediate_results


def _side(prefix: str, result: ResultInfo | None) -> dict[str, Any]:
    if result is None:
        return {}
    return {
        f"index{prefix}": result.index,
        f"op_type{prefix}": result.op_type,
        f"name{prefix}": result.name,
        f"shape{prefix}": result.shape_text,
        f"dtype{prefix}": result.dtype,
        f"summary{prefix}": result.summary,
        f"module{prefix}": result.module,
    }


def compare_onnx_execution(
    model1: onnx.ModelProto | str | os.PathLike,
    model2: onnx.ModelProto | str | os.PathLike,
    feeds: Mapping[str, Any] | Sequence[Any],
    *,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    runtime: str = "onnxruntime",
    include_constants: bool = False,
    providers: list[str] | None = None,
) -> CompareResult:
    """Runs two models on the same inputs and aligns their intermediate results.

    Every node output of both models is kept, then the two sequences are aligned
    by an edit distance whose pairing cost mixes op type, dtype, shape and value
    closeness (see :mod:`fx2onnx.compare.align`), so two exporters producing
    different nodes can still be compared.

    :param model1: a ModelProto or a path to an .onnx file
    :param model2: the second model, taking the same inputs (names may differ:
        inputs are then mapped by position and ``result.notes`` says so)
    :param feeds: the inputs of model1, a dict keyed by its input names or a list
        in order; numpy arrays or torch tensors
    :param atol: absolute tolerance under which two values are close
    :param rtol: relative tolerance
    :param runtime: ``"onnxruntime"`` or ``"reference"`` (onnx's ReferenceEvaluator)
    :param include_constants: also align the outputs of Constant nodes
    :param providers: onnxruntime providers (CPU by default)
    :return: a :class:`CompareResult`: ``print(result)`` shows both models side by
        side, ``result.to_frame()`` is a DataFrame

    .. code-block:: python

        result = fx2onnx.compare_onnx_execution(onx1, onx2, {"x": x.numpy()})
        print(result)
        assert result.first_divergence is None
    """
    proto1, proto2 = load_model(model1), load_model(model2)
    feeds1 = check_feeds(proto1, feeds)
    feeds2, note = map_feeds(proto1, proto2, feeds1)
    kwargs = dict(runtime=runtime, include_constants=include_constants, providers=providers)
    results1 = run_with_intermediate_results(proto1, feeds1, **kwargs)
    results2 = run_with_intermediate_results(proto2, feeds2, **kwargs)
    path, cost = align(results1, results2, atol=atol, rtol=rtol)
    rows = []
    for i1, i2, diff in path:
        r1 = None if i1 is None else results1[i1]
        r2 = None if i2 is None else results2[i2]
        if r1 is None:
            status = "only2"
        elif r2 is None:
            status = "only1"
        else:
            status = "same" if diff is not None and diff.close else "diff"
        rows.append(
            AlignedRow(
                status=status,
                max_abs_diff=None if diff is None else diff.max_abs,
                **_side("1", r1),
                **_side("2", r2),
            )
        )
    return CompareResult(
        rows=rows,
        n_results1=len(results1),
        n_results2=len(results2),
        atol=atol,
        rtol=rtol,
        cost=cost,
        notes=[note] if note else [],
    )
