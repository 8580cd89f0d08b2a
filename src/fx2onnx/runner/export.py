"""What the sweeps share besides the fan-out: the results cache's key and the export helpers.

* :func:`sources_hash` keys a results cache on the sources of fx2onnx and the
  versions of the packages the results depend on.
* :func:`dynamo_export`, :func:`label_export_step`, :func:`first_line`: one export
  of ``torch.onnx.export(dynamo=True)``, the step an error comes from, the line a row shows.
"""

from __future__ import annotations

import contextlib
import hashlib
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

#: packages whose versions key the results caches
KEY_PACKAGES = ("torch", "transformers", "onnx", "onnxruntime", "onnxscript", "onnx-ir")


def sources_hash(extra: Any = None, skip: Iterable[str] = ()) -> str:
    """A hash of the ``.py`` files of fx2onnx (but ``skip``, paths relative to the package),
    the versions of :data:`KEY_PACKAGES`, and ``extra`` (the options)."""
    package = Path(__file__).resolve().parent.parent
    skipped = set(skip)
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative in skipped:
            continue
        digest.update(relative.encode())
        digest.update(path.read_bytes())
    for name in KEY_PACKAGES:
        try:
            digest.update(f"{name}={metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name}=none".encode())
    digest.update(repr(extra).encode())
    return digest.hexdigest()


_TORCHLIB_REGISTRIES: dict[Any, Any] = {}


@contextlib.contextmanager
def reuse_torchlib_registry():
    """Builds the registry of torchlib functions of ``torch.onnx.export`` once per process.

    ``torch.onnx.export(dynamo=True)`` rebuilds it at every call, which is most of its
    time on a small model. Inside this context the first registry built is reused (the
    zoo passes no custom translation table, so nothing modifies it); the export itself
    is unchanged. The original method is restored on exit.
    """
    from torch.onnx._internal.exporter import _registration

    registry_class = _registration.ONNXRegistry
    original = registry_class.__dict__["from_torchlib"]

    def from_torchlib(cls, *args, **kwargs):
        key = (cls, args, tuple(sorted(kwargs.items())))
        if key not in _TORCHLIB_REGISTRIES:
            _TORCHLIB_REGISTRIES[key] = original.__func__(cls, *args, **kwargs)
        return _TORCHLIB_REGISTRIES[key]

    registry_class.from_torchlib = classmethod(from_torchlib)
    try:
        yield
    finally:
        registry_class.from_torchlib = original


#: exception names raised when torch.export.export fails or returns a program which differs from
#: eager (to_onnx's capture check, :class:`fx2onnx.CaptureMismatchError`): the capture step
CAPTURE_ERRORS = ("ExportError", "TorchExportError", "CaptureMismatchError")


@contextlib.contextmanager
def label_export_step(capture_step: str):
    """Sets ``exc.step`` on an exception raised inside: ``capture_step`` when
    :func:`torch.export.export` failed, ``"conversion"`` otherwise; then re-raises it."""
    try:
        yield
    except Exception as e:
        e.step = capture_step if type(e).__name__ in CAPTURE_ERRORS else "conversion"  # type: ignore[attr-defined]
        raise


def dynamo_export(model, args: tuple, kwargs: dict | None, dynamic_shapes: Any, translations: dict | None = None):
    """``torch.onnx.export(dynamo=True)``, its model proto. Without a custom translation table
    the torchlib registry is built once per process (:func:`reuse_torchlib_registry`);
    a table is registered into the registry, so a new one is built then."""
    import torch

    reuse = contextlib.nullcontext() if translations else reuse_torchlib_registry()
    with reuse:
        program = torch.onnx.export(
            model, args, kwargs=kwargs, dynamic_shapes=dynamic_shapes, dynamo=True,
            verbose=False, custom_translation_table=translations or None,
        )
    return program.model_proto


def first_line(exc: BaseException, limit: int = 300) -> str:
    r"""``ExceptionType: first non-empty line of the message``, truncated.

    When the exception was raised from another one (``raise ... from cause``), the
    cause says more (torch.onnx.export wraps every error in a generic one):
    ``ExceptionType <- CauseType: first line of the cause``. A first line announcing
    a list (ending with ``:``) is followed by the list's first item.

    >>> first_line(ValueError("Found the following conflicts:\n- dim 1 is static"))
    'ValueError: Found the following conflicts: - dim 1 is static'
    """
    import re

    cause = exc.__cause__
    if cause is not None and cause is not exc:
        return f"{type(exc).__name__} <- {first_line(cause, limit)}"[:limit]
    message = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    head = f"{lines[0]} {lines[1]}" if len(lines) > 1 and lines[0].endswith(":") else lines[0] if lines else ""
    text = f"{type(exc).__name__}: {head}" if head else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
