"""Aligning two sequences of results with an edit distance.

Two exporters do not produce the same nodes, so results are paired by a
dynamic program (Needleman-Wunsch): pairing two results costs a mix of op type,
dtype, shape and value closeness; leaving a result unpaired costs :data:`GAP`.
Two results are paired only when pairing costs no more than two gaps. The program
computes n x m pairing costs (about a second for 300 x 700 results).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .results import ResultInfo

#: cost of a result present in one model only
GAP = 1.0
#: weights of the pairing cost
OP_TYPE_COST = 0.5
DTYPE_COST = 0.5
RESHAPED_COST = 0.5
SHAPE_COST = 2.5


@dataclasses.dataclass
class ValueDiff:
    """How far two results are: the max absolute difference and whether it is within tolerance."""

    #: the largest absolute difference
    max_abs: float
    #: whether every difference is within ``atol + rtol * |value|`` (never for integers which
    #: differ)
    close: bool
    #: the largest absolute difference divided by the largest absolute value of both results
    relative: float


def value_diff(r1: ResultInfo, r2: ResultInfo, atol: float, rtol: float) -> ValueDiff | None:
    """Compares the values of two results of the same size (shapes may differ).

    Returns None when they cannot be compared (different sizes, not numbers).
    """
    fa, fb = r1.flat, r2.flat
    if fa is None or fb is None or fa.size != fb.size:
        return None
    if fa.size == 0:
        return ValueDiff(0.0, True, 0.0)
    same = (fa == fb) | (np.isnan(fa) & np.isnan(fb))
    if same.all():
        return ValueDiff(0.0, True, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.abs(fa - fb))
    diff = np.where(np.isnan(diff), np.inf, diff)
    max_abs = float(diff.max())
    if r1.value.dtype.kind in "iub" and r2.value.dtype.kind in "iub":
        close = False
    else:
        close = bool(np.all(diff <= atol + rtol * np.abs(np.nan_to_num(fa))))
    scale = max(r1.scale, r2.scale)
    relative = max_abs / scale if scale > 0 else np.inf
    return ValueDiff(max_abs, close, relative)


def pair_cost(r1: ResultInfo, r2: ResultInfo, atol: float, rtol: float) -> tuple[float, ValueDiff | None]:
    """The cost of pairing two results, and the value difference when it could be computed.

    0 for the same op type, dtype, shape and close values; values that differ
    cost 0.4 to 1 depending on the relative difference; a different number of
    elements costs more than two gaps, so such results are never paired.
    """
    cost = 0.0 if r1.op_type == r2.op_type else OP_TYPE_COST
    if r1.value is None or r2.value is None:
        return cost + SHAPE_COST, None
    if r1.value.dtype != r2.value.dtype:
        cost += DTYPE_COST
    if r1.value.size != r2.value.size:
        return cost + SHAPE_COST, None
    if r1.value.shape != r2.value.shape:
        cost += RESHAPED_COST
    diff = value_diff(r1, r2, atol, rtol)
    if diff is None:
        return cost + 1.0, None
    if not diff.close:
        cost += 0.4 + 0.6 * min(1.0, diff.relative)
    return cost, diff


def align(
    results1: list[ResultInfo], results2: list[ResultInfo], atol: float = 1e-4, rtol: float = 1e-3
) -> tuple[list[tuple[int | None, int | None, ValueDiff | None]], float]:
    """Aligns two sequences of results.

    :return: the pairs ``(i1, i2, diff)`` in order, ``i1`` or ``i2`` being None for a
        result found in one model only, and the total cost
    """
    n, m = len(results1), len(results2)
    pairs: dict[tuple[int, int], tuple[float, ValueDiff | None]] = {}
    total = np.zeros((n + 1, m + 1))
    total[:, 0] = np.arange(n + 1) * GAP
    total[0, :] = np.arange(m + 1) * GAP
    # 0: diagonal (pair), 1: result of model1 alone, 2: result of model2 alone
    move = np.zeros((n + 1, m + 1), dtype=np.int8)
    move[1:, 0] = 1
    move[0, 1:] = 2
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            c, d = pair_cost(results1[i - 1], results2[j - 1], atol, rtol)
            pairs[i - 1, j - 1] = (c, d)
            best, how = total[i - 1, j - 1] + c, 0
            if total[i - 1, j] + GAP < best:
                best, how = total[i - 1, j] + GAP, 1
            if total[i, j - 1] + GAP < best:
                best, how = total[i, j - 1] + GAP, 2
            total[i, j] = best
            move[i, j] = how
    path: list[tuple[int | None, int | None, ValueDiff | None]] = []
    i, j = n, m
    while i > 0 or j > 0:
        how = move[i, j]
        if how == 0:
            path.append((i - 1, j - 1, pairs[i - 1, j - 1][1]))
            i, j = i - 1, j - 1
        elif how == 1:
            path.append((i - 1, None, None))
            i -= 1
        else:
            path.append((None, j - 1, None))
            j -= 1
    path.reverse()
    return path, float(total[n, m])
