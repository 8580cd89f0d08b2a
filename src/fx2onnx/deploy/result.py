"""What a folder export wrote and measured (:class:`FolderExport`), shared by the folder export and its families."""

from __future__ import annotations

import dataclasses
import os
import resource

import torch

from ..weights.checkpoint import CheckpointFileError
from .check import FolderCheck


@dataclasses.dataclass
class FolderExport:
    """What :func:`export_folder` wrote and measured."""

    out: str
    task: str
    dtype: torch.dtype
    files: list[str]
    nbytes: int
    seconds: float
    peak_rss: int
    checks: list[FolderCheck]
    #: why onnxruntime-genai cannot run the folder (None: genai_config.json written)
    genai: str | None
    #: what each check ran on (default: the first and second input sets of the model)
    check_names: list[str] | None = None
    #: False: the check failed, nothing was written at ``out`` (a previous folder there is kept)
    written: bool = True
    #: the family of pieces (:data:`fx2onnx.deploy.families.FAMILIES`; None: one model)
    family: str | None = None
    #: the weight-only quantization of the matrices (``int4``, ``int8``; None: ``dtype`` everywhere)
    quantize: str | None = None
    #: after a failed check: the weights transformers' ``from_pretrained`` changes after reading them, with their
    #: max abs difference to the checkpoint (:func:`fx2onnx.weights.loading_changes.weights_changed_on_loading`)
    loading_changes: list[tuple[str, float]] = dataclasses.field(default_factory=list)

    def kind(self) -> str:
        """The task, the family of pieces and the weights' types, as the summary says them."""
        dtype = str(self.dtype).replace("torch.", "")
        weights = f"{self.quantize} matrices, {dtype} elsewhere" if self.quantize else dtype
        return f"{self.task}{': ' + self.family if self.family else ''}, {weights}"

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def check_lines(self) -> list[str]:
        """One line per check: what it ran on, and its outcome."""
        names = self.check_names or ["first input set", "second input set"]
        return [f"{name}: {check}" for name, check in zip(names, self.checks)]

    def __str__(self) -> str:
        if not self.written:
            changed = ""
            if self.loading_changes:
                named = ", ".join(f"{name} by {diff:.3g}" for name, diff in self.loading_changes[:3])
                changed = (f"; transformers' from_pretrained changes {len(self.loading_changes)} weight(s) after "
                           f"reading them ({named}): eager is not the checkpoint's model, the export is")
            return (f"nothing written at {self.out}: the check against eager failed ({self.kind()}, "
                    f"{self.seconds:.1f} s){changed}; a previous folder there is kept")
        return (f"wrote {self.out}: {len(self.files)} files, {self.nbytes / 2**20:.1f} MiB ({self.kind()}) "
                f"in {self.seconds:.1f} s, peak memory {self.peak_rss / 2**30:.2f} GiB")


def peak_rss() -> int:
    """The peak resident memory of this process, bytes: ``VmHWM`` where Linux gives it (its
    ``ru_maxrss`` keeps the peak of the process before ``exec``, the parent's size for a command
    started from a large Python process), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024



def config_error(folder: str, what: str, error: BaseException) -> CheckpointFileError:
    """One line naming config.json, what failed and the error's first line."""
    reason = str(error).splitlines()[0] if str(error) else ""
    return CheckpointFileError(f"{os.path.join(folder, 'config.json')!r} {what} ({type(error).__name__}: "
                               f"{reason[:200]}): restore it from the model's repository.")


def folder_files(out_dir: str) -> list[str]:
    """The files of ``out_dir``, its sub-folders' included (``onnx/model.onnx``), relative paths, sorted."""
    return sorted(os.path.relpath(os.path.join(root, name), out_dir).replace(os.sep, "/")
                  for root, _, names in os.walk(out_dir) for name in names)
