"""The rows of an aligned comparison, as a table or as text."""

from __future__ import annotations

import dataclasses
from typing import Any

#: marker of each row status in the text rendering
MARKERS = {"same": "=", "diff": "x", "only1": "-", "only2": "+"}


@dataclasses.dataclass
class AlignedRow:
    """One row of the alignment: a result of model1, of model2, or a pair of both.

    ``status`` is ``"same"`` (paired, values within tolerance), ``"diff"`` (paired,
    values differ or cannot be compared), ``"only1"`` or ``"only2"`` (found in one
    model only). ``module1`` and ``module2`` name the torch module a node comes
    from when the exporter recorded it.
    """

    #: ``"same"``, ``"diff"``, ``"only1"`` or ``"only2"``
    status: str
    #: the position of the result in the first model (None when it is only in the second one)
    index1: int | None = None
    #: the op type of the node producing it in the first model (``"input"`` for an input)
    op_type1: str = ""
    #: the name of the result in the first model
    name1: str = ""
    #: its shape in the first model, as text (``2x8x16``)
    shape1: str = ""
    #: its element type in the first model, short (``f32``, ``i64``)
    dtype1: str = ""
    #: a few of its values, or min / max / mean
    summary1: str = ""
    #: the torch module the node comes from in the first model, when recorded
    module1: str = ""
    #: the position of the result in the second model (None when it is only in the first one)
    index2: int | None = None
    #: the op type of the node producing it in the second model
    op_type2: str = ""
    #: the name of the result in the second model
    name2: str = ""
    #: its shape in the second model, as text
    shape2: str = ""
    #: its element type in the second model, short
    dtype2: str = ""
    #: a few of its values, or min / max / mean
    summary2: str = ""
    #: the torch module the node comes from in the second model, when recorded
    module2: str = ""
    #: the largest absolute difference of a paired row (None when not compared)
    max_abs_diff: float | None = None

    @property
    def marker(self) -> str:
        """The marker of the status in the side-by-side text, ``=``, ``x``, ``-`` or ``+``."""
        return MARKERS[self.status]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


@dataclasses.dataclass
class CompareResult:
    """The aligned results of two models, see :func:`fx2onnx.compare_onnx_execution`.

    ``rows`` is the alignment; ``notes`` says how inputs were mapped; ``to_frame()``
    gives a pandas DataFrame; ``str(result)`` the side-by-side text.
    """

    #: the alignment, in the order of the results of both models
    rows: list[AlignedRow]
    #: the number of results (inputs and node outputs) of the first model
    n_results1: int
    #: the number of results of the second model
    n_results2: int
    #: the absolute tolerance of the comparison
    atol: float
    #: the relative tolerance of the comparison
    rtol: float
    #: the total cost of the alignment (see :mod:`fx2onnx.compare.align`)
    cost: float
    #: how the inputs were mapped, when the models do not name them alike
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def first_divergence(self) -> int | None:
        """The index of the first paired row whose values differ, None if there is none."""
        for i, row in enumerate(self.rows):
            if row.status == "diff":
                return i
        return None

    def count(self, status: str) -> int:
        """The number of rows with this status (same, diff, only1, only2)."""
        if status not in MARKERS:
            raise ValueError(f"status must be one of {sorted(MARKERS)}, not {status!r}.")
        return sum(row.status == status for row in self.rows)

    def to_dicts(self) -> list[dict[str, Any]]:
        """The rows as a list of dicts."""
        return [dataclasses.asdict(row) for row in self.rows]

    def to_frame(self):
        """The rows as a pandas DataFrame (one column per field of :class:`AlignedRow`)."""
        import pandas

        frame = pandas.DataFrame(self.to_dicts())
        for column in ["index1", "index2"]:
            frame[column] = frame[column].astype("Int64")
        return frame

    def summary(self) -> str:
        """One line: counts of paired, diverging and unpaired results."""
        first = self.first_divergence
        where = "values never diverge" if first is None else f"values diverge from row {first}"
        return (
            f"model1: {self.n_results1} results, model2: {self.n_results2} results; "
            f"{self.count('same')} paired with close values, {self.count('diff')} paired "
            f"with different values, {self.count('only1')} only in model1, "
            f"{self.count('only2')} only in model2; {where} "
            f"(atol={self.atol:g}, rtol={self.rtol:g})"
        )

    def to_text(
        self,
        name_width: int = 14,
        op_width: int = 10,
        show_values: bool = True,
        start: int = 0,
        max_rows: int | None = None,
    ) -> str:
        """Renders the alignment side by side.

        Each line is: row number, marker (``=`` close values, ``x`` different values,
        ``-`` only in model1, ``+`` only in model2), then for each model its result
        index, op type, name, shape, dtype and a value summary, then the max absolute
        difference. The first row where values diverge is pointed at with ``>>``.
        ``start`` and ``max_rows`` select the rows to show.
        """
        first = self.first_divergence
        widths = [4, op_width, name_width, 10, 4] + ([22] if show_values else [])

        def side(cells: list[str]) -> str:
            return " ".join(
                f"{_cut(c, w):>{w}}" if k == 0 else f"{_cut(c, w):<{w}}"
                for k, (c, w) in enumerate(zip(cells, widths))
            )

        def cells(row: AlignedRow, k: str) -> list[str]:
            index = getattr(row, f"index{k}")
            if index is None:
                return [""] * len(widths)
            names = ["op_type", "name", "shape", "dtype"] + (["summary"] if show_values else [])
            return [str(index)] + [getattr(row, f"{n}{k}") for n in names]

        titles = ["op", "name", "shape", "dt"] + (["values"] if show_values else [])
        header = (
            f"{'row':>4}    {side(['#1'] + [t + '1' for t in titles])} | "
            f"{side(['#2'] + [t + '2' for t in titles])} | max|diff|"
        )
        lines = [*self.notes, self.summary(), header, "-" * len(header)]
        end = len(self.rows) if max_rows is None else min(len(self.rows), start + max_rows)
        if start > 0:
            lines.append(f"... {start} rows before")
        for k in range(start, end):
            row = self.rows[k]
            diff = "" if row.max_abs_diff is None else f"{row.max_abs_diff:.3g}"
            pointer = ">>" if k == first else "  "
            lines.append(
                f"{k:>4} {pointer}{row.marker} {side(cells(row, '1'))} | "
                f"{side(cells(row, '2'))} | {diff}".rstrip()
            )
        if end < len(self.rows):
            lines.append(f"... {len(self.rows) - end} more rows")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()
