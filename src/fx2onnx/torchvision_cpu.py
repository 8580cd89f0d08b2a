"""torchvision beside the CPU build of torch (timm needs it; transformers imports it when present).

PyPI's ``torchvision==0.28.0`` (the release paired with torch 2.13) is a CUDA build: its C++
extension ``torchvision/_C.so`` links ``libtorch_cuda.so`` and does not load beside the CPU
torch. torchvision catches that failure, but its fake-tensor registrations
(``torch.library.register_fake("torchvision::nms")``) then fail on an operator that was never
defined, and ``import torchvision`` raises ``operator torchvision::nms does not exist``; with
torchvision installed, ``from transformers import PreTrainedModel`` fails the same way.
timm imports torchvision for ``FrozenBatchNorm2d`` and its transforms, none of which needs
the C++ operators.

:func:`ensure_torchvision` loads the extension when it can (a CPU build of torchvision, or a
CUDA build beside a CUDA torch: nothing is changed then). Otherwise it declares the schemas of
torchvision's operators (:data:`SCHEMAS`, those of its C++ extension) with CPU kernels written
in plain torch (:mod:`fx2onnx.torchvision_kernels`: ``nms``, ``roi_align``, ``roi_pool``,
``ps_roi_align``, ``ps_roi_pool``, ``deform_conv2d`` and their backward), so that the import
succeeds and torchvision's detection models run on CPU. When torchvision is then imported, its
``torchvision.extension._has_ops()`` is made to answer True: torchvision registers its fake
kernels (for :func:`torch.export`), autograd and autocast rules on these operators as it does
beside its own extension. The quantized ``qnms`` and ``qroi_align`` keep no kernel. No file of
torchvision is modified.

:func:`install_import_hook` runs it on the first ``import torchvision`` of a process, whoever
imports it (transformers, timm, a user's script). ``make`` installs the hook into the virtual
environment with :func:`write_pth_file`: a one-line ``.pth`` file of its ``site-packages`` which imports nothing but this small module (torch is imported only when
torchvision is).

.. code-block:: python

    from fx2onnx.torchvision_cpu import ensure_torchvision

    ensure_torchvision()
    import timm  # imports torchvision

    model = timm.create_model("resnet18", pretrained=False)
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import sysconfig
from pathlib import Path
from typing import Any

#: the operators torchvision's ``_meta_registrations`` registers fake kernels for, unconditionally
UNCONDITIONAL_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_SIZES = "float spatial_scale, SymInt pooled_height, SymInt pooled_width"
_SHAPE = "SymInt batch_size, SymInt channels, SymInt height, SymInt width"
_DEFORM = ("Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, SymInt stride_h, SymInt stride_w, "
           "SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, SymInt groups, SymInt offset_groups, "
           "bool use_mask")
#: every operator of torchvision's C++ extension that its Python code calls, as the extension declares it
SCHEMAS = UNCONDITIONAL_SCHEMAS + (
    f"roi_align(Tensor input, Tensor rois, {_SIZES}, int sampling_ratio, bool aligned) -> Tensor",
    f"_roi_align_backward(Tensor grad, Tensor rois, {_SIZES}, {_SHAPE}, int sampling_ratio, bool aligned) -> Tensor",
    f"roi_pool(Tensor input, Tensor rois, {_SIZES}) -> (Tensor, Tensor)",
    f"_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, {_SIZES}, {_SHAPE}) -> Tensor",
    f"ps_roi_align(Tensor input, Tensor rois, {_SIZES}, int sampling_ratio) -> (Tensor, Tensor)",
    f"_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, {_SIZES}, int sampling_ratio, "
    f"{_SHAPE}) -> Tensor",
    f"ps_roi_pool(Tensor input, Tensor rois, {_SIZES}) -> (Tensor, Tensor)",
    f"_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, {_SIZES}, {_SHAPE}) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float input_scale, int input_zero_point, float rois_scale, "
    f"int rois_zero_point, {_SIZES}, int sampling_ratio, bool aligned) -> Tensor",
    f"deform_conv2d({_DEFORM}) -> Tensor",
    f"_deform_conv2d_backward(Tensor grad, {_DEFORM}) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "_cuda_version() -> int",
)
#: the ``.pth`` file :func:`write_pth_file` writes into ``site-packages``
PTH_NAME = "fx2onnx_torchvision_cpu.pth"
#: the library object declaring the schemas (kept alive: dropping it removes the operators)
_DECLARED: Any = None


def _extension_path() -> Path | None:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidates = sorted(Path(folder).glob("_C*.so")) + sorted(Path(folder).glob("_C*.pyd"))
        if candidates:
            return candidates[0]
    return None


def _operator_exists(name: str) -> bool:
    import torch

    try:
        torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
    except RuntimeError:
        return False
    return True


def ensure_torchvision() -> str:
    """Makes ``import torchvision`` work; returns how: ``"native"``, ``"schemas"`` or ``"absent"``.

    ``"native"``: torchvision's C++ operators are available (its extension loads);
    ``"schemas"``: the extension does not load beside this torch, its operators were declared
    with the CPU kernels of :mod:`fx2onnx.torchvision_kernels`; ``"absent"``: torchvision is
    not installed.
    """
    global _DECLARED
    if _DECLARED is not None:
        return "schemas"
    if importlib.util.find_spec("torchvision") is None:
        return "absent"
    import torch

    if _operator_exists("roi_align"):
        return "native"
    path = _extension_path()
    if path is not None:
        try:
            torch.ops.load_library(str(path))
            return "native"
        except (OSError, RuntimeError):
            pass
    if _operator_exists("nms"):  # declared by someone else
        return "schemas"
    from .torchvision_kernels import KERNELS

    library = torch.library.Library("torchvision", "DEF")
    for schema in SCHEMAS:
        library.define(schema)
    for name, kernel in KERNELS.items():
        library.impl(name, kernel, "CPU")
    library.impl("_cuda_version", lambda: -1, "CompositeExplicitAutograd")
    _DECLARED = library
    return "schemas"


def kernels_declared() -> bool:
    """Tells if :func:`ensure_torchvision` declared torchvision's operators with its CPU kernels."""
    return _DECLARED is not None


def _fake_nms(dets: Any, scores: Any, iou_threshold: float) -> Any:
    """The fake kernel of ``nms``: between 0 and ``len(dets)`` kept boxes (torchvision's says at
    least 2, and an exported model then asserts it at run time)."""
    import torch

    torch._check(dets.dim() == 2 and dets.shape[1] == 4, lambda: f"boxes should be (N, 4), got {dets.shape}")
    torch._check(scores.dim() == 1 and scores.shape[0] == dets.shape[0], lambda: "scores should be (N,)")
    kept = torch.library.get_ctx().new_dynamic_size()
    torch._check(kept <= dets.shape[0])
    return dets.new_empty((kept,), dtype=torch.long)


class _ExtensionLoader(importlib.abc.Loader):
    """Loads ``torchvision.extension`` as usual, then makes its ``_has_ops()`` answer True; loads
    ``torchvision._meta_registrations``, then replaces its fake kernels of ``nms`` and ``qnms``
    (:func:`_fake_nms`).
    """

    def __init__(self, loader: Any):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        if not kernels_declared():
            return
        if module.__name__ == "torchvision.extension":
            module._has_ops = kernels_declared
        else:
            import torch

            for name in ("nms", "qnms"):
                torch.library.register_fake(f"torchvision::{name}", _fake_nms, lib=_DECLARED)


class _TorchvisionHook(importlib.abc.MetaPathFinder):
    """Runs :func:`ensure_torchvision` on the first ``import torchvision``, then steps aside (for
    :class:`_ExtensionHook` when the kernels were declared)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torchvision":
            return None
        uninstall_import_hook()
        try:
            ensure_torchvision()
        except Exception:  # noqa: BLE001 - the import then fails with torchvision's own error
            pass
        if kernels_declared():
            sys.meta_path.insert(0, _ExtensionHook())
        return None  # the regular finders import torchvision


class _ExtensionHook(importlib.abc.MetaPathFinder):
    """Wraps the loaders of ``torchvision.extension`` and ``torchvision._meta_registrations``
    (:class:`_ExtensionLoader`), then steps aside."""

    def __init__(self):
        self.waiting = {"torchvision.extension", "torchvision._meta_registrations"}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.waiting:
            return None
        self.waiting.discard(fullname)
        if not self.waiting:
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _ExtensionLoader(spec.loader)
        return spec


def install_import_hook() -> None:
    """Runs :func:`ensure_torchvision` before torchvision is first imported in this process."""
    if "torchvision" in sys.modules or any(isinstance(f, _TorchvisionHook) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _TorchvisionHook())


def uninstall_import_hook() -> None:
    """Removes the hook of :func:`install_import_hook` (does nothing without one)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _TorchvisionHook)]


def write_pth_file(site_packages: str | Path | None = None) -> Path:
    """Writes the ``.pth`` file installing the hook at every start of this environment's Python."""
    folder = Path(site_packages or sysconfig.get_paths()["purelib"])
    path = folder / PTH_NAME
    code = "try:\\n from fx2onnx.torchvision_cpu import install_import_hook\\n install_import_hook()\\nexcept ImportError:\\n pass"
    path.write_text(f'import sys; exec("{code}")\n', encoding="utf-8")
    return path
