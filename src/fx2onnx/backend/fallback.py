"""What the backend does with a graph it cannot run on onnxruntime when ``fallback=True``.

A graph may fail at four stages: aot_autograd cannot trace it (``"aot_autograd"``),
a converter is missing or fails (``"conversion"``), onnxruntime refuses the model
(``"session"``), or running it fails or gives results of the wrong rank or type
(``"run"``). With ``fallback=False`` (the default) the error is raised. With
``fallback=True`` the graph runs eagerly from then on (the other graphs still run
on onnxruntime), a :class:`FallbackWarning` names the graph, the stage and the
error, the logger ``fx2onnx.backend`` keeps the traceback (level DEBUG), and
the backend lists the record in :attr:`OrtBackend.fallbacks
<fx2onnx.backend.OrtBackend.fallbacks>`.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings

logger = logging.getLogger("fx2onnx.backend")

STAGES = ("aot_autograd", "conversion", "session", "run")


class FallbackWarning(UserWarning):
    """A graph runs eagerly because the backend could not run it on onnxruntime (``fallback=True``)."""


@dataclasses.dataclass
class Fallback:
    """One graph the backend runs eagerly: its name, the stage which failed and the error."""

    #: the name of the graph which runs eagerly
    graph: str
    #: the stage which failed, ``aot_autograd``, ``conversion``, ``session`` or ``run``
    stage: str
    #: the exception raised at that stage
    error: BaseException

    @property
    def reason(self) -> str:
        """The error's type and first line."""
        text = str(self.error).strip()
        return f"{type(self.error).__name__}: {text.splitlines()[0] if text else ''}"

    def __str__(self) -> str:
        return f"graph {self.graph!r} runs eagerly ({self.stage} failed): {self.reason}"


def report_fallback(records: list[Fallback], graph: str, stage: str, error: BaseException) -> Fallback:
    """Appends the record of a fallback to ``records``, warns and logs it."""
    if stage not in STAGES:
        raise ValueError(f"Unknown stage {stage!r}, expected one of {STAGES}.")
    record = Fallback(graph, stage, error)
    records.append(record)
    logger.debug("fx2onnx backend: %s", record, exc_info=error)
    warnings.warn(f"fx2onnx backend: {record} (fallback=True)", FallbackWarning, stacklevel=3)
    return record
