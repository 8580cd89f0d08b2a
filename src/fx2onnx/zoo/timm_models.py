"""timm's model families, discovered from its registry: one small model per family.

``timm.list_models()`` names about 1,400 models; the module defining each one is its family
(``resnet``, ``vision_transformer``, ``maxxvit``...: about a hundred). :func:`timm_families`
keeps one model per family, the one with the fewest parameters (counted on the ``meta``
device, no memory spent) among the candidates its name ranks first (``test_*`` models, then
the usual size words ``atto`` < ``femto`` < ... < ``small``, then the smallest default image).
:func:`build_timm_model` creates it with random weights (no download) and the two input sets
of a zoo row: the export input and the check input (another batch, and with ``shapes="image"``
another height and width).

.. code-block:: python

    from fx2onnx.zoo.timm_models import build_timm_model, timm_families

    families = timm_families()          # {"resnet": "resnet10t", ...}
    case = build_timm_model(families["resnet"], shapes="image")
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field

import torch

from ..torchvision_cpu import ensure_torchvision

#: size words in timm's names, smallest first (a model name holding an earlier one is preferred)
SIZE_WORDS = ("test", "atto", "femto", "pico", "nano", "xxs", "xxsmall", "micro", "tiny", "xtiny", "mini",
              "xs", "xsmall", "lite", "s0", "b0", "m0", "t0", "050", "10t", "18", "small", "s1", "b1", "s")
#: how many models of a family, ranked by name, have their parameters counted
CANDIDATES = 16


@dataclass
class TimmCase:
    """A timm model with the inputs of one zoo row."""

    #: the timm module defining the model (``resnet``), the diffusers class for a diffusers model
    family: str
    #: the model name in timm's registry, the class or ``class.method`` for diffusers
    name: str
    #: the model, in eval mode
    model: torch.nn.Module
    #: the first positional input of the export (an image batch)
    export_input: torch.Tensor
    #: a first positional input of other shapes, to check the dynamic model
    check_input: torch.Tensor
    #: the dynamic shapes of the inputs
    dynamic_shapes: tuple
    #: the number of parameters of the model
    parameters: int = 0
    #: what the row says about how the model was built (``dynamic_img_size=True``, a reason)
    notes: list[str] = field(default_factory=list)
    #: keyword inputs of the export (none for timm, the others for diffusers)
    export_kwargs: dict = field(default_factory=dict)
    #: keyword inputs of the check (none for timm)
    check_kwargs: dict = field(default_factory=dict)


def _import_timm():
    ensure_torchvision()
    import timm

    return timm


def _size_rank(name: str) -> int:
    tokens = re.split(r"[_\.]", name)
    ranks = [SIZE_WORDS.index(t) for t in tokens if t in SIZE_WORDS]
    return min(ranks) if ranks else len(SIZE_WORDS)


def _default_image(timm, name: str) -> tuple[int, int, int]:
    try:
        cfg = timm.models.get_pretrained_cfg(name)
        size = getattr(cfg, "input_size", None) or (3, 224, 224)
    except Exception:  # noqa: BLE001 - a model without a pretrained configuration
        size = (3, 224, 224)
    return tuple(size)


def timm_families() -> dict[str, str]:
    """``{family: model name}``: the smallest model (by name) of every family of timm's registry."""
    timm = _import_timm()
    from timm.models import _registry

    by_family: dict[str, list[str]] = collections.defaultdict(list)
    for name in timm.list_models():
        by_family[_registry._model_to_module[name]].append(name)
    chosen = {}
    for family, names in sorted(by_family.items()):
        ranked = sorted(names, key=lambda n: (_size_rank(n), _default_image(timm, n)[1], len(n), n))
        candidates = ranked[:CANDIDATES]
        chosen[family] = min(candidates, key=lambda n: (_meta_parameters(timm, n), candidates.index(n)))
    return chosen


def _meta_parameters(timm, name: str) -> float:
    """The number of parameters of a model created on the ``meta`` device (inf if it fails)."""
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False)
    except Exception:  # noqa: BLE001 - a model which cannot be created is not chosen
        return float("inf")
    return float(sum(p.numel() for p in model.parameters()))


def _patch_size(model: torch.nn.Module) -> int:
    patch = getattr(getattr(model, "patch_embed", None), "patch_size", None)
    if isinstance(patch, (tuple, list)):
        patch = patch[0]
    return int(patch) if isinstance(patch, int) else 0


def build_timm_model(name: str, shapes: str = "batch", seed: int = 0) -> TimmCase:
    """Creates the timm model ``name`` (random weights, eval mode) and the inputs of a row.

    ``shapes="batch"``: exported with a dynamic batch (2), checked on a batch of 3;
    ``shapes="image"``: dynamic batch, height and width, checked on 3 images of another
    height and width (by two and four patches, or 32 and 64 pixels). Vision transformers are
    created with ``dynamic_img_size=True`` when their class accepts it.
    """
    if shapes not in ("batch", "image"):
        raise ValueError(f"shapes must be 'batch' or 'image', got {shapes!r}.")
    timm = _import_timm()
    from timm.models import _registry

    torch.manual_seed(seed)
    notes = []
    model = None
    if shapes == "image":
        try:
            model = timm.create_model(name, pretrained=False, num_classes=10, dynamic_img_size=True)
            notes.append("dynamic_img_size=True")
        except TypeError:
            model = None
    if model is None:
        model = timm.create_model(name, pretrained=False, num_classes=10)
    model.eval()
    channels, height, width = _default_image(timm, name)
    generator = torch.Generator().manual_seed(seed)
    export_input = torch.rand(2, channels, height, width, generator=generator)
    dynamic = {0: "batch"}
    check_h, check_w = height, width
    if shapes == "image":
        step = 2 * _patch_size(model) or 32
        check_h, check_w = height + step, width + 2 * step
        dynamic = {0: "batch", 2: "height", 3: "width"}
    check_input = torch.rand(3, channels, check_h, check_w, generator=generator)
    return TimmCase(
        family=_registry._model_to_module[name], name=name, model=model, export_input=export_input,
        check_input=check_input, dynamic_shapes=(dynamic,),
        parameters=sum(p.numel() for p in model.parameters()), notes=notes,
    )
