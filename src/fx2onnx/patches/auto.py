"""The patches :func:`fx2onnx.to_onnx` applies by itself (``patches="auto"``).

A user exporting a transformers model for the first time does not know that
:func:`torch.export.export` needs :func:`fx2onnx.torch_export_patches`: without
it, a decoder with its default ``use_cache=True`` fails (``Found DynamicCache in
output``) and a mixture-of-experts layer keeps the custom operator
``transformers::grouped_mm_fallback`` no converter knows. With
``patches="auto"`` (the default of :func:`fx2onnx.to_onnx`), the capture runs
inside ``torch_export_patches(patch_transformers=True)`` when the model is or
contains a module of transformers, or an input is a cache of transformers, and
with the timm rewrites (:mod:`fx2onnx.patches.timm_fixes`) when it contains a module
of timm, with the diffusers rewrites (:mod:`fx2onnx.patches.diffusers_fixes`) when it
contains a module of diffusers, with the torchvision patches
(:mod:`fx2onnx.patches.torchvision_detection`) when it contains a detection model of torchvision.

Inside an explicit :func:`fx2onnx.torch_export_patches`, only the kinds of patches
the active contexts do not apply already are added (:func:`active_patches`):
nothing is patched twice.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator

import torch
from torch.utils import _pytree as pytree

from .context import PATCH_KINDS, active_patches, torch_export_patches


def holds_module_of(model: Any, package: str) -> bool:
    """Tells if ``model`` is or contains a module whose class ``package`` defines."""
    if package not in sys.modules or not isinstance(model, torch.nn.Module):
        return False
    return any(type(module).__module__.startswith(f"{package}.") for module in model.modules())


def uses_timm(model: Any) -> bool:
    """Tells if ``model`` is or contains a module defined by timm."""
    return holds_module_of(model, "timm")


def uses_diffusers(model: Any) -> bool:
    """Tells if ``model`` is or contains a module defined by diffusers."""
    return holds_module_of(model, "diffusers")


def uses_torchvision(model: Any) -> bool:
    """Tells if ``model`` is or contains a module defined by torchvision's detection models."""
    return holds_module_of(model, "torchvision.models.detection")


def uses_transformers(model: Any, args: tuple = (), kwargs: dict | None = None) -> bool:
    """Tells if ``model`` is or contains a module defined by transformers, or if an input
    is (or holds) a cache of transformers."""
    if "transformers" not in sys.modules:
        return False
    if holds_module_of(model, "transformers"):
        return True
    from transformers.cache_utils import Cache

    # pytree does not know the caches outside the patches: they come out as leaves
    leaves = pytree.tree_leaves((tuple(args), dict(kwargs or {})))
    return any(isinstance(leaf, Cache) for leaf in leaves)


def check_patches_option(patches: Any) -> None:
    """Raises a clear error for a value of ``patches`` which is not ``"auto"``, True or False."""
    if not (patches is True or patches is False or (isinstance(patches, str) and patches == "auto")):
        raise ValueError(
            f"patches must be 'auto' (patch transformers models), True (always) or False (never), got {patches!r}."
        )


@contextlib.contextmanager
def auto_patches(patches: Any, model: Any, args: tuple = (), kwargs: dict | None = None) -> Iterator[list[str]]:
    """Applies the patches a model needs when ``patches`` asks for them.

    :param patches: ``"auto"`` (the transformers patches when :func:`uses_transformers`, the
        timm rewrites when :func:`uses_timm`, the diffusers ones when :func:`uses_diffusers`),
        True (every kind),
        False (none)
    :return: the kinds of patches applied (``[]``, ``["patch_transformers"]``...)
    """
    check_patches_option(patches)
    if isinstance(model, torch.export.ExportedProgram):
        yield []
        return
    wanted: list[str] = []
    if patches is True or (patches == "auto" and uses_transformers(model, args, kwargs)):
        wanted += ["patch_torch", "patch_transformers"]
    if patches is True or (patches == "auto" and uses_timm(model)):
        wanted.append("patch_timm")
    if patches is True or (patches == "auto" and uses_diffusers(model)):
        wanted.append("patch_diffusers")
    if patches is True or (patches == "auto" and uses_torchvision(model)):
        wanted.append("patch_torchvision")
    active = active_patches()
    missing = [kind for kind in wanted if not active[kind]]
    if not missing:
        yield []
        return
    with torch_export_patches(**{kind: kind in missing for kind in PATCH_KINDS}):
        yield missing
