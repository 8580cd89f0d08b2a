"""The context manager :func:`torch_export_patches` gathering every kind of patch."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from typing import Any, Iterable, Iterator

import torch

from .caches import (
    is_registered,
    register_cache_serialization,
    supported_cache_classes,
    unregister_cache_serialization,
)
from .diffusers_fixes import diffusers_patches
from .moe_fixes import moe_patches
from .recurrences import recurrence_patches
from .registry import Patch, PatchReport, PatchSet, check_patches
from .rewrite import rewrite_patches
from .state_space import state_space_patches
from .timm_fixes import timm_patches
from .torch_fixes import torch_patches
from .torchvision_detection import torchvision_patches
from .transformers_fixes import transformers_patches


def custom_class_patches(patched: Any) -> list[Patch]:
    """Turns a user's patch into :class:`Patch` objects.

    ``patched`` is a :class:`Patch` or a class declaring ``target_class`` (the class
    to patch) and optionally ``methods`` (the names to replace, by default every
    function the class defines)::

        class PatchedAttention:
            target_class = MyAttention
            def forward(self, x):
                ...
    """
    if isinstance(patched, Patch):
        return [patched]
    if not isinstance(patched, type) or not hasattr(patched, "target_class"):
        raise TypeError(
            f"custom_patches expects Patch objects or classes with a 'target_class' attribute, "
            f"got {patched!r}."
        )
    target_class = patched.target_class
    names = getattr(patched, "methods", None) or [
        name
        for name, value in patched.__dict__.items()
        if inspect.isfunction(value) and not name.startswith("__")
    ]
    patches = []
    for name in names:
        if name not in patched.__dict__:
            raise AttributeError(f"{patched.__name__} lists method {name!r} but does not define it.")
        replacement = patched.__dict__[name]
        if isinstance(replacement, staticmethod):
            replacement = replacement.__func__
        patches.append(
            Patch(
                name=f"{patched.__name__}.{name}",
                kind="custom",
                target=f"{target_class.__module__}.{target_class.__qualname__}.{name}",
                make=lambda original, replacement=replacement: replacement,
                doc=(patched.__doc__ or "").strip().split("\n")[0],
            )
        )
    return patches


def _transformers_loaded() -> bool:
    return "transformers" in sys.modules


#: the kinds of patches :func:`torch_export_patches` applies on demand
PATCH_KINDS = ("patch_torch", "patch_transformers", "patch_timm", "patch_diffusers", "patch_torchvision")

#: the options of every :func:`torch_export_patches` context now active, outermost first
_ACTIVE: list[dict[str, bool]] = []


def active_patches() -> dict[str, bool]:
    """Which kinds of patches the :func:`torch_export_patches` contexts now active apply:
    ``{"patch_torch": bool, "patch_transformers": bool, "patch_timm": bool, "patch_diffusers": bool}`` (all False outside
    any context). :func:`fx2onnx.to_onnx` reads it not to apply a patch twice."""
    return {key: any(options.get(key, False) for options in _ACTIVE) for key in PATCH_KINDS}


def collect_patches(
    *,
    patch_torch: bool = True,
    patch_transformers: bool = False,
    catch_constraints: bool = True,
    stop_if_static: int = 0,
    rewrite: Any = None,
    dump_rewriting: str | os.PathLike | None = None,
    custom_patches: Iterable[Any] = (),
    patch_timm: bool = False,
    patch_diffusers: bool = False,
    patch_torchvision: bool = False,
) -> list[Patch]:
    """The patches :func:`torch_export_patches` applies for these options."""
    patches: list[Patch] = []
    if patch_torch:
        patches.extend(torch_patches(catch_constraints=catch_constraints, stop_if_static=stop_if_static))
    if patch_transformers:
        patches.extend(transformers_patches())
        patches.extend(moe_patches())
        patches.extend(state_space_patches())
        patches.extend(recurrence_patches())
    if patch_timm:
        patches.extend(timm_patches())
    if patch_diffusers:
        patches.extend(diffusers_patches())
    if patch_torchvision:
        patches.extend(torchvision_patches())
    if rewrite is not None:
        patches.extend(rewrite_patches(rewrite, dump_rewriting=dump_rewriting))
    for patched in custom_patches:
        patches.extend(custom_class_patches(patched))
    return patches


def _cache_report(name: str, status: str) -> PatchReport:
    """The report row of the pytree registration of one cache class of transformers.

    A registration is only ``skipped`` when the class already is a pytree node.
    """
    return PatchReport(
        name=name,
        kind="cache",
        target=f"transformers.cache_utils.{name}",
        status=status,
        reason="already a pytree node, kept as it is" if status == "skipped" else "",
        doc="registered as a pytree node",
    )


class PatchContext:
    """What ``with torch_export_patches(...) as modificator`` gives.

    Calling it converts inputs if needed (legacy caches given as a list of
    ``(key, value)`` pairs become a ``DynamicCache``). ``reports`` lists every
    patch applied or skipped, ``registered`` the cache classes registered.
    """

    def __init__(self, patch_set: PatchSet, registered: dict[str, bool]):
        self.patch_set = patch_set
        self.registered = registered

    @property
    def reports(self) -> list[PatchReport]:
        """Every patch applied or skipped, then every cache class registered (or skipped)."""
        rows = list(self.patch_set.reports)
        for name, done in self.registered.items():
            rows.append(_cache_report(name, "applied" if done else "skipped"))
        return rows

    def __call__(self, inputs: Any) -> Any:
        return convert_legacy_inputs(inputs)


def convert_legacy_inputs(inputs: Any) -> Any:
    """Replaces a ``past_key_values`` given as pairs ``(key, value)`` by a ``DynamicCache``."""
    if isinstance(inputs, dict):
        out = {}
        for key, value in inputs.items():
            if key == "past_key_values" and _is_legacy_cache(value):
                from transformers.cache_utils import DynamicCache

                value = DynamicCache([tuple(pair) for pair in value])
            out[key] = value
        return out
    if isinstance(inputs, tuple):
        return tuple(convert_legacy_inputs(v) if isinstance(v, dict) else v for v in inputs)
    return inputs


def _is_legacy_cache(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(
            isinstance(pair, (list, tuple))
            and len(pair) == 2
            and all(isinstance(t, torch.Tensor) for t in pair)
            for pair in value
        )
    )


@contextlib.contextmanager
def torch_export_patches(
    patch_torch: bool = True,
    patch_transformers: bool = False,
    patch_sympy: bool = True,
    catch_constraints: bool = True,
    stop_if_static: int = 0,
    rewrite: Any = None,
    dump_rewriting: str | os.PathLike | None = None,
    custom_patches: Iterable[Any] = (),
    verbose: int = 0,
    patch_timm: bool = False,
    patch_diffusers: bool = False,
    patch_torchvision: bool = False,
) -> Iterator[PatchContext]:
    """Applies the patches making :func:`torch.export.export` work on more models.

    :param patch_torch: torch fixes (see :mod:`fx2onnx.patches.torch_fixes`)
    :param patch_transformers: transformers methods replaced while exporting
        (see :mod:`fx2onnx.patches.transformers_fixes`)
    :param patch_sympy: accepted for compatibility; torch 2.13 needs no sympy patch
    :param catch_constraints: with ``patch_torch``, turns constraint violations
        between named dimensions into warnings
    :param stop_if_static: with ``patch_torch``, raises where a dynamic dimension
        becomes static (``>= 2`` also prints the stack)
    :param rewrite: functions, methods, classes or a module whose ``if`` tests on
        tensors are rewritten into :func:`torch.cond`
    :param dump_rewriting: folder receiving each rewritten function and a diff
    :param custom_patches: :class:`~fx2onnx.patches.registry.Patch` objects or
        classes with a ``target_class`` attribute
    :param verbose: prints what is applied and restored
    :param patch_timm: timm functions rewritten (see :mod:`fx2onnx.patches.timm_fixes`)
    :param patch_diffusers: diffusers functions rewritten (see :mod:`fx2onnx.patches.diffusers_fixes`)
    :param patch_torchvision: torchvision's detection models with dynamic image sizes
        (see :mod:`fx2onnx.patches.torchvision_detection`)
    :return: a :class:`PatchContext` (call it on the inputs)

    The cache classes of transformers are registered as pytree nodes when
    transformers is imported. Everything is restored on exit, also after an
    exception.

    .. code-block:: python

        import torch
        from fx2onnx import torch_export_patches
        from fx2onnx.zoo import export_dynamic_shapes, get_tiny_model

        tiny = get_tiny_model("llama", with_cache=True)
        with torch_export_patches(patch_transformers=True) as modificator:
            ep = torch.export.export(
                tiny.model,
                (),
                kwargs=modificator(tiny.inputs),
                dynamic_shapes=export_dynamic_shapes(tiny.dynamic_shapes),
                strict=False,
            )
    """
    del patch_sympy  # nothing to patch in sympy with the supported versions
    patches = collect_patches(
        patch_torch=patch_torch,
        patch_transformers=patch_transformers,
        catch_constraints=catch_constraints,
        stop_if_static=stop_if_static,
        rewrite=rewrite,
        dump_rewriting=dump_rewriting,
        custom_patches=custom_patches,
        patch_timm=patch_timm,
        patch_diffusers=patch_diffusers,
        patch_torchvision=patch_torchvision,
    )
    patch_set = PatchSet(patches, verbose=verbose)
    registered: dict[str, bool] = {}
    options: dict[str, bool] | None = None
    try:
        if patch_transformers or _transformers_loaded():
            registered = register_cache_serialization(verbose=verbose)
        patch_set.apply()
        options = {"patch_torch": patch_torch, "patch_transformers": patch_transformers, "patch_timm": patch_timm,
                   "patch_diffusers": patch_diffusers, "patch_torchvision": patch_torchvision}
        _ACTIVE.append(options)
        yield PatchContext(patch_set, registered)
    finally:
        if options is not None:
            _ACTIVE.remove(options)
        patch_set.restore()
        if registered:
            unregister_cache_serialization(registered, verbose=verbose)


bypass_export_some_errors = torch_export_patches
"""The former name of :func:`torch_export_patches`."""


def list_patches(
    patch_torch: bool = True,
    patch_transformers: bool = True,
    catch_constraints: bool = True,
    stop_if_static: int = 1,
    rewrite: Any = None,
    custom_patches: Iterable[Any] = (),
    patch_timm: bool = True,
    patch_diffusers: bool = True,
    patch_torchvision: bool = True,
) -> list[dict[str, str]]:
    """Lists every patch for these options with the installed versions, without applying any.

    Each row has ``name``, ``kind``, ``target``, ``status`` (``applicable`` or
    ``skipped``), ``reason`` (why skipped) and ``doc`` (why it exists).

    .. code-block:: python

        import pandas
        from fx2onnx import list_patches

        print(pandas.DataFrame(list_patches())[["kind", "name", "status"]])
    """
    patches = collect_patches(
        patch_torch=patch_torch,
        patch_transformers=patch_transformers,
        catch_constraints=catch_constraints,
        stop_if_static=stop_if_static,
        rewrite=rewrite,
        custom_patches=custom_patches,
        patch_timm=patch_timm,
        patch_diffusers=patch_diffusers,
        patch_torchvision=patch_torchvision,
    )
    rows = [r.as_dict() for r in check_patches(patches)]
    try:
        import transformers.cache_utils as cache_utils
    except ImportError:
        cache_utils = None  # type: ignore[assignment]
    if cache_utils is not None:
        for name in supported_cache_classes():
            already = is_registered(getattr(cache_utils, name))
            rows.append(_cache_report(name, "skipped" if already else "applicable").as_dict())
    return rows
