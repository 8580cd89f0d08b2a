"""A patch: a target given by its dotted path, a replacement, a guard; always restored.

A :class:`Patch` never raises an import error: a target missing from the
installed torch or transformers, or whose signature changed, is *skipped* with
a reason. :class:`PatchSet` applies a list of patches and restores every
original attribute on exit, also after an exception.

.. code-block:: python

    import math
    from fx2onnx.patches.registry import Patch, PatchSet

    patch = Patch(
        name="math_sqrt_twice",
        kind="custom",
        target="math.sqrt",
        make=lambda original: (lambda x: 2 * original(x)),
        expected_args=("x",),
        doc="doubles math.sqrt",
    )
    with PatchSet([patch]):
        assert math.sqrt(4) == 4
    assert math.sqrt(4) == 2
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from typing import Any, Callable, Iterable, Sequence

_MISSING = object()


class PatchTargetError(LookupError):
    """Raised when a dotted path cannot be resolved."""


def resolve_target(target: str) -> tuple[Any, str, Any]:
    """Resolves ``"package.module.Class.attribute"`` into ``(owner, attribute, value)``.

    The longest importable module prefix is imported, the rest is walked with
    :func:`getattr`. Raises :class:`PatchTargetError` with the missing part.
    """
    parts = target.split(".")
    if len(parts) < 2:
        raise PatchTargetError(f"{target!r} is not a dotted path 'module.attribute'.")
    owner: Any = None
    index = len(parts) - 1
    errors = []
    while index > 0:
        module_name = ".".join(parts[:index])
        try:
            owner = importlib.import_module(module_name)
            break
        except ImportError as e:
            errors.append(str(e))
            index -= 1
    if owner is None:
        raise PatchTargetError(f"no module of {target!r} can be imported ({errors[-1] if errors else ''}).")
    for i, name in enumerate(parts[index:-1], start=index):
        if not hasattr(owner, name):
            raise PatchTargetError(f"{'.'.join(parts[: i + 1])} does not exist.")
        owner = getattr(owner, name)
    attribute = parts[-1]
    value = inspect.getattr_static(owner, attribute, _MISSING)
    if value is _MISSING:
        raise PatchTargetError(f"{target} does not exist.")
    if isinstance(value, staticmethod):
        value = value.__func__
    return owner, attribute, value


def _parameter_names(function: Any) -> tuple[str, ...] | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    return tuple(signature.parameters)


@dataclasses.dataclass
class Patch:
    """One patch.

    :param name: a short unique name
    :param kind: ``"torch"``, ``"transformers"``, ``"cache"``, ``"rewrite"`` or ``"custom"``
    :param target: dotted path of the attribute to replace
    :param make: ``make(original) -> replacement``
    :param expected_args: parameter names the original must have (else skipped)
    :param guard: ``guard(original) -> None or a reason to skip``
    :param doc: why the patch exists
    """

    #: a short unique name
    name: str
    #: ``"torch"``, ``"transformers"``, ``"cache"``, ``"rewrite"`` or ``"custom"``
    kind: str
    #: dotted path of the attribute to replace
    target: str
    #: ``make(original) -> replacement``
    make: Callable[[Any], Any]
    #: parameter names the original must have (else the patch is skipped)
    expected_args: Sequence[str] | None = None
    #: ``guard(original) -> None or a reason to skip``
    guard: Callable[[Any], str | None] | None = None
    #: why the patch exists
    doc: str = ""

    def check(self) -> tuple[Any, str, Any] | str:
        """Returns ``(owner, attribute, original)`` or the reason why the patch is skipped."""
        try:
            owner, attribute, original = resolve_target(self.target)
        except PatchTargetError as e:
            return f"target missing: {e}"
        if self.expected_args is not None:
            names = _parameter_names(original)
            if names is None:
                return f"signature of {self.target} cannot be read"
            missing = [n for n in self.expected_args if n not in names]
            if missing:
                return f"signature changed: {self.target}{names} has no parameter {missing}"
        if self.guard is not None:
            reason = self.guard(original)
            if reason:
                return reason
        return owner, attribute, original


def patch_if_imported(module: str, attribute: str, name: str, **fields: Any) -> list[Patch]:
    """A transformers patch of ``module.attribute`` when ``module`` is already imported (the
    modeling file of the user's model), none otherwise: importing every modeling file to
    patch it would cost seconds at each export."""
    if module not in sys.modules:
        return []
    return [Patch(name=name, kind="transformers", target=f"{module}.{attribute}", **fields)]


def source_guard(name: str, *needles: str, absent: str, unwrap: bool = True) -> Callable[[Any], str | None]:
    """A ``Patch.guard`` skipping the patch unless the source of the original (behind its
    decorators when ``unwrap``) holds every one of ``needles``; ``absent`` says why otherwise."""

    def guard(original: Any) -> str | None:
        try:
            source = inspect.getsource(inspect.unwrap(original) if unwrap else original)
        except (OSError, TypeError):
            return f"source of {name} cannot be read"
        return None if all(needle in source for needle in needles) else absent

    return guard


@dataclasses.dataclass
class PatchReport:
    """What happened to one patch: applied or skipped, and why."""

    name: str
    kind: str
    target: str
    status: str  # "applied", "skipped", "applicable" (checked, not applied)
    reason: str = ""
    doc: str = ""

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


class PatchSet:
    """Applies patches on enter and restores the originals on exit (also on exceptions)."""

    def __init__(self, patches: Iterable[Patch], verbose: int = 0):
        self.patches = list(patches)
        self.verbose = verbose
        #: one report per patch, applied or skipped (with the reason), filled by :meth:`apply`
        self.reports: list[PatchReport] = []
        self._undo: list[tuple[Any, str, Any]] = []

    def apply(self) -> list[PatchReport]:
        """Applies every patch whose target exists and whose checks pass, skips the others; returns
        the reports; raises when two patches share a name.
        """
        names = [p.name for p in self.patches]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"Patches must have unique names, {duplicated} appear twice.")
        for patch in self.patches:
            checked = patch.check()
            if isinstance(checked, str):
                self.reports.append(
                    PatchReport(patch.name, patch.kind, patch.target, "skipped", checked, patch.doc)
                )
                if self.verbose:
                    print(f"[fx2onnx.patches] skip {patch.name}: {checked}")
                continue
            owner, attribute, original = checked
            before = owner.__dict__.get(attribute, _MISSING) if hasattr(owner, "__dict__") else _MISSING
            replacement = patch.make(original)
            if isinstance(before, staticmethod):
                replacement = staticmethod(replacement)
            elif isinstance(before, classmethod):
                raise TypeError(
                    f"Patch {patch.name!r}: classmethod targets are not supported ({patch.target})."
                )
            self._undo.append((owner, attribute, before))
            setattr(owner, attribute, replacement)
            self.reports.append(PatchReport(patch.name, patch.kind, patch.target, "applied", "", patch.doc))
            if self.verbose:
                print(f"[fx2onnx.patches] apply {patch.name} on {patch.target}")
        return self.reports

    def restore(self) -> None:
        """Puts back every original attribute, in reverse order."""
        while self._undo:
            owner, attribute, before = self._undo.pop()
            if before is _MISSING:
                # the attribute was inherited or created by the patch
                if attribute in getattr(owner, "__dict__", {}):
                    delattr(owner, attribute)
            else:
                setattr(owner, attribute, before)
            if self.verbose:
                print(f"[fx2onnx.patches] restore {getattr(owner, '__name__', owner)}.{attribute}")

    def __enter__(self) -> "PatchSet":
        try:
            self.apply()
        except BaseException:
            self.restore()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def check_patches(patches: Iterable[Patch]) -> list[PatchReport]:
    """Checks patches without applying them: ``applicable`` or ``skipped`` with a reason."""
    reports = []
    for patch in patches:
        checked = patch.check()
        if isinstance(checked, str):
            reports.append(PatchReport(patch.name, patch.kind, patch.target, "skipped", checked, patch.doc))
        else:
            reports.append(PatchReport(patch.name, patch.kind, patch.target, "applicable", "", patch.doc))
    return reports
