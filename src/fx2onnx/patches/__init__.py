"""Patches making :func:`torch.export.export` work on transformers models.

Four kinds of patches, applied together by :func:`torch_export_patches` and
restored on exit:

* torch fixes (:mod:`fx2onnx.patches.torch_fixes`),
* transformers methods replaced while exporting (:mod:`fx2onnx.patches.transformers_fixes`),
* cache classes registered as pytree nodes (:mod:`fx2onnx.patches.caches`),
* ``if`` tests on tensors rewritten into :func:`torch.cond` (:mod:`fx2onnx.patches.rewrite`).
"""

from __future__ import annotations

from .caches import register_cache_serialization, unregister_cache_serialization
from .context import bypass_export_some_errors, list_patches, torch_export_patches
from .needing_rewriting import code_needing_rewriting
from .registry import Patch, PatchReport, PatchSet
from .rewrite import rewrite_function

__all__ = [
    "Patch",
    "PatchReport",
    "PatchSet",
    "bypass_export_some_errors",
    "code_needing_rewriting",
    "list_patches",
    "register_cache_serialization",
    "rewrite_function",
    "torch_export_patches",
    "unregister_cache_serialization",
]
