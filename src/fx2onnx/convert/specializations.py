"""Where the model's code made a dynamic dimension a constant, recorded during the capture.

torch.export reports a dimension declared dynamic and specialized by the code (``if
x.shape[0] == 2:``, ``x.reshape(2, -1)``, a broadcast with a weight of size 2) as
``Constraints violated (L['x'].size()[0])! ... your code specialized it to be a constant
(2)``, without the line which did it (``TORCH_LOGS="+dynamic"`` prints it among thousands
of lines). :func:`record_specializations` wraps the point where torch's shape
environment replaces a symbol by an integer and keeps, for each symbol, the innermost
frame outside torch: the user's line, or the library's (transformers) line running it.
:func:`fx2onnx.to_onnx` names it in its error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import os
import re
import sys
from typing import Any, Iterator

from ..patches.registry import Patch, PatchSet


@dataclasses.dataclass
class Specialization:
    """A symbolic dimension torch.export replaced by a constant, and where."""

    symbol: str
    sources: list[str]  # torch's names of the dimension, ``L['x'].size()[0]``
    value: int
    filename: str
    lineno: int
    function: str
    code: str

    def location(self) -> str:
        """``file:line in function: code``."""
        text = f"{self.filename}:{self.lineno} in {self.function}"
        return f"{text}: `{self.code}`" if self.code else text


def _skipped_dirs() -> tuple[str, ...]:
    import sympy
    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    return (
        os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
        os.path.dirname(os.path.abspath(sympy.__file__)) + os.sep,
        here + os.sep,
    )


def _code_frame(skipped: tuple[str, ...]) -> Any:
    """The innermost frame outside torch, sympy, this folder (the capture) and contextlib."""
    frame = sys._getframe(2)
    while frame is not None:
        if _is_model_code(frame.f_code.co_filename, skipped):
            return frame
        frame = frame.f_back
    return None


def _is_model_code(filename: str, skipped: tuple[str, ...]) -> bool:
    """The file is none of torch's, sympy's, the capture's or contextlib's."""
    path = os.path.abspath(filename)
    return not path.startswith(skipped) and not path.endswith("contextlib.py")


@contextlib.contextmanager
def record_specializations() -> Iterator[list[Specialization]]:
    """Records each symbolic dimension replaced by a constant while the context is active,
    once per symbol (its first specialization), with the line of code responsible."""
    found: list[Specialization] = []
    seen: set[str] = set()
    skipped = _skipped_dirs()

    def make(original: Any) -> Any:
        import sympy

        def _set_replacement(self: Any, a: Any, tgt: Any, msg: str) -> None:
            if isinstance(tgt, sympy.Integer) and str(a) not in seen:
                sources = [s.name() if callable(s.name) else str(s.name) for s in self.var_to_sources.get(a, [])]
                frame = _code_frame(skipped) if sources else None
                if frame is not None:
                    seen.add(str(a))
                    filename, lineno = frame.f_code.co_filename, frame.f_lineno
                    found.append(Specialization(
                        str(a), sources, int(tgt), filename, lineno, frame.f_code.co_name,
                        linecache.getline(filename, lineno).strip(),
                    ))
            return original(self, a, tgt, msg)

        _set_replacement.__wrapped__ = original  # type: ignore[attr-defined]
        return _set_replacement

    patch = Patch(
        name="record_specializations",
        kind="torch",
        target="torch.fx.experimental.symbolic_shapes.ShapeEnv._set_replacement",
        make=make,
        expected_args=("self", "a", "tgt", "msg"),
        doc="records the line of code making a dynamic dimension a constant",
    )
    with PatchSet([patch]):
        yield found


#: how torch names the size of an input: ``L['x'].size()[0]`` (shape environment, constraint
#: violations) or ``inputs['x'].shape[0]`` (conflicts with the user's ranges)
_DIMENSION_PATTERNS = (r"L\['(\w+)'\]\.size\(\)\[(\d+)\]", r"inputs\['(\w+)'\]\.shape\[(\d+)\]")


def dimensions_in(text: str) -> list[tuple[str, int]]:
    """The ``(input name, axis)`` of every input size torch's text names, in order, once each."""
    found: list[tuple[str, int]] = []
    for pattern in _DIMENSION_PATTERNS:
        for name, axis in re.findall(pattern, text):
            if (name, int(axis)) not in found:
                found.append((name, int(axis)))
    return found


# a Python loop whose count is a size: ``for t in range(x.shape[1])``, ``for i in range(seq_len)``
_LOOP_OVER_SIZE = re.compile(r"\bfor\b.+\bin\s+range\(")


def specialization_hint(found: list[Specialization], message: str, describe: Any = None) -> str:
    """The lines naming where the dimensions an error of torch.export mentions became constants.

    :param found: what :func:`record_specializations` recorded
    :param message: torch's error message; when it names dimensions, only those are shown
    :param describe: ``describe(name, axis) -> str`` labels an input's dimension (the user's name), or None
    """
    named = set(dimensions_in(message))
    shown = [s for s in found if named & set(dimensions_in(" ".join(s.sources)))] if named else found
    if not shown:
        return ""
    lines = []
    for spec in shown[:5]:
        dims = dimensions_in(" ".join(spec.sources))
        label = describe(*dims[0]) if describe is not None and dims else ""
        label = label or spec.sources[0]
        lines.append(f"  - {label} became the constant {spec.value} at {spec.location()}")
    more = f"\n  ... and {len(shown) - 5} more" if len(shown) > 5 else ""
    advice = ""
    if any(_LOOP_OVER_SIZE.search(spec.code or "") for spec in shown):
        advice = (
            "A Python loop over a dynamic size is unrolled by torch.export, one copy per step of the example: "
            "write it with torch._higher_order_ops.scan (an ONNX Scan, any length) or, for a recurrence, "
            "with nn.LSTM / nn.GRU / nn.RNN over the whole sequence, exported with a dynamic length.\n"
        )
    return "Where the code made a dynamic dimension a constant:\n" + "\n".join(lines) + more + "\n" + advice


def data_dependent_cause(error: BaseException | None) -> BaseException | None:
    """torch's ``GuardOnDataDependentSymNode`` in the chain of causes of ``error`` (itself included), or None."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, GuardOnDataDependentSymNode):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def data_dependent_line(error: BaseException) -> str | None:
    """Where the model reads a Python value from a tensor's data (torch's ``GuardOnDataDependentSymNode``):
    ``file:line in function: `code``` of the innermost frame of the model's code in the traceback, or None."""
    cause = data_dependent_cause(error)
    if cause is None:
        return None
    skipped, found = _skipped_dirs(), None
    tb = cause.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename and os.path.isfile(code.co_filename) and _is_model_code(code.co_filename, skipped):
            found = (code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    if found is None:
        return None
    filename, lineno, function = found
    code = linecache.getline(filename, lineno).strip()
    return f"{filename}:{lineno} in {function}" + (f": `{code}`" if code else "")
