"""torchvision's detection and segmentation models, small and checkable, with their inputs.

:func:`build_torchvision_model` builds a model of ``torchvision.models.detection`` or
``torchvision.models.segmentation`` with ``weights=None`` (no download), small images
(``min_size=160``), and random weights a comparison with eager can see through:

* the batch norms are calibrated on the example images (a fresh backbone's features vanish
  to 1e-7 after a few blocks: every box then gets the same score);
* the classification layers (``cls_logits``, ``cls_score``, SSD's classification head) are
  scaled to logits of standard deviation 1, so that scores spread over (0, 1) and rarely tie:
  the order of boxes of equal scores is unspecified (torchvision says so of its ``nms``), and a
  comparison with eager needs distinct scores;
* Keypoint R-CNN's heatmaps peak at a corner of each box (:func:`_peak_keypoints`): with random
  weights a heatmap is flat, its argmax jumps between near-equal maxima at the slightest
  difference of rounding or of box size (the keypoints then differ by a box's width);
* the v2 R-CNNs keep :data:`V2_PROPOSALS` proposals per image (1000 by default): their box head's
  four convolutions over every proposal cost twenty times the rest of the model, and the check
  runs the model a dozen times.

A detection model takes a list of images (:data:`IMAGES`: the number of images is fixed by the
export, each image's height and width are dynamic); a segmentation model a batch
``(N, 3, H, W)`` (batch, height and width dynamic).

.. code-block:: python

    from fx2onnx.zoo.torchvision_models import build_torchvision_model

    case = build_torchvision_model("fasterrcnn_mobilenet_v3_large_fpn")
    outputs = case.model(*case.export_args)
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator

import torch

#: the detection builders of torchvision.models.detection, cheapest first
DETECTION = (
    "fasterrcnn_mobilenet_v3_large_fpn",
    "fasterrcnn_mobilenet_v3_large_320_fpn",
    "fasterrcnn_resnet50_fpn",
    "fasterrcnn_resnet50_fpn_v2",
    "retinanet_resnet50_fpn",
    "retinanet_resnet50_fpn_v2",
    "fcos_resnet50_fpn",
    "ssd300_vgg16",
    "ssdlite320_mobilenet_v3_large",
    "maskrcnn_resnet50_fpn",
    "maskrcnn_resnet50_fpn_v2",
    "keypointrcnn_resnet50_fpn",
)
#: the segmentation builders of torchvision.models.segmentation
SEGMENTATION = (
    "lraspp_mobilenet_v3_large",
    "fcn_resnet50",
    "fcn_resnet101",
    "deeplabv3_mobilenet_v3_large",
    "deeplabv3_resnet50",
    "deeplabv3_resnet101",
)
#: detection models built from torchvision's classes without a builder of their own: Mask R-CNN on
#: the MobileNetV3-Large FPN backbone and anchors of ``fasterrcnn_mobilenet_v3_large_fpn`` (the
#: gallery's: Faster R-CNN's boxes and Mask R-CNN's masks, faster to export than on a ResNet-50)
VARIANTS = ("maskrcnn_mobilenet_v3_large_fpn",)
#: the number of images of a detection model's list (fixed by the export)
IMAGES = 2
#: the detections kept per image: the best ones, apart enough in score that the order rarely
#: depends on rounding (a model exported with 100 keeps near-equal scores at the cut)
DETECTIONS = 20
#: the standard deviation given to the classification logits
LOGIT_STD = 1.0
#: the proposals kept per image by the v2 R-CNNs (their box head convolves each one)
V2_PROPOSALS = 200
#: Keypoint R-CNN's heatmaps: the height of each one's peak, and how far above the rest of the
#: features it stands (in standard deviations of the random features)
PEAK, PEAK_CONTRAST = 5.0, 100.0
_CLASSIFIERS = ("cls_logits", "cls_score", "classification_head.module_list")


@dataclasses.dataclass
class TorchvisionCase:
    """A model, the inputs it is exported with, other inputs to check it on, its dynamic shapes."""

    name: str
    task: str  # "detection" or "segmentation"
    model: torch.nn.Module
    export_args: tuple
    check_args: list[tuple]
    dynamic_shapes: tuple


def _images(sizes, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(3, h, w, generator=g) for h, w in sizes]


def _calibrate(model: torch.nn.Module, args: tuple) -> None:
    """Batch norms calibrated on ``args``, classification logits scaled to :data:`LOGIT_STD`."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
        norm.train()
    with torch.no_grad():
        model(*args)
    for norm in norms:
        norm.eval()
    layers = {name: m for name, m in model.named_modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))
              and any(key in name for key in _CLASSIFIERS)}
    # a layer feeding another one (SSDlite's depthwise convolution before its classifier) scales
    # the next one's output: measured again until every output has the wanted spread
    for _ in range(3):
        spread: dict[str, list[float]] = {}
        hooks = [m.register_forward_hook(lambda m, i, o, name=name: spread.setdefault(name, []).append(float(o.std())))
                 for name, m in layers.items()]
        with torch.no_grad():
            model(*args)
        for hook in hooks:
            hook.remove()
        factors = {name: LOGIT_STD / max(values) for name, values in spread.items() if max(values) > 0}
        if all(abs(f - 1) < 1e-2 for f in factors.values()):
            break
        with torch.no_grad():
            for name, factor in factors.items():
                layers[name].weight.mul_(factor)


def _peak_keypoints(model: torch.nn.Module, args: tuple) -> None:
    """Keypoint R-CNN's heatmaps peaked at a corner of the box, a different corner per keypoint.

    The last convolution of the keypoint head gets a bias far above its random output (the
    features become a constant plus a small random part); the predictor's transposed convolution
    (kernel 4, stride 2, padding 1) reads a single tap at each corner of its output: the weights
    of that tap are positive, the others negative, so that a constant input peaks at that corner
    (by ``PEAK``) and the random part moves it by a few hundredths."""
    heads = model.roi_heads
    last = [m for m in heads.keypoint_head.modules() if isinstance(m, torch.nn.Conv2d)][-1]
    spread: list[float] = []
    hook = last.register_forward_hook(lambda m, i, o: spread.append(float(o.std())))
    with torch.no_grad():
        model(*args)
    hook.remove()
    lowres = heads.keypoint_predictor.kps_score_lowres
    channels, keypoints = lowres.weight.shape[:2]
    level = PEAK_CONTRAST * max(spread + [1e-6])
    corners = ((1, 1), (1, 2), (2, 1), (2, 2))  # the one tap reaching output (0, 0), (0, -1), (-1, 0), (-1, -1)
    with torch.no_grad():
        last.bias.add_(level)
        weight = -torch.ones(keypoints, 4, 4)
        for k in range(keypoints):
            weight[k][corners[k % len(corners)]] = 1.0
        lowres.weight.copy_((weight * PEAK / (channels * level))[None].expand(channels, -1, -1, -1))
        lowres.bias.zero_()


def _build_variant(name: str, kwargs: dict[str, Any]) -> torch.nn.Module:
    """A model of :data:`VARIANTS`, with the keyword arguments of a builder."""
    from torchvision.models import detection

    kwargs = {k: v for k, v in kwargs.items() if k not in ("weights", "weights_backbone")}
    num_classes = kwargs.pop("num_classes")
    if name == "maskrcnn_mobilenet_v3_large_fpn":
        boxes = detection.fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None,
                                                            num_classes=num_classes)
        # the builder's own default, as for fasterrcnn_mobilenet_v3_large_fpn
        return detection.MaskRCNN(boxes.backbone, num_classes, rpn_anchor_generator=boxes.rpn.anchor_generator,
                                  rpn_score_thresh=0.05, **kwargs)
    raise ValueError(f"unknown variant {name!r}: choose one of {VARIANTS}")


def build_torchvision_model(name: str, seed: int = 0) -> TorchvisionCase:
    """The model ``name`` of :data:`DETECTION`, :data:`SEGMENTATION` or :data:`VARIANTS`, calibrated (see
    the module)."""
    from torchvision.models import detection, segmentation

    torch.manual_seed(seed)
    if name in DETECTION or name in VARIANTS:
        kwargs: dict[str, Any] = dict(weights=None, weights_backbone=None, num_classes=5)
        if not name.startswith("ssd"):
            kwargs.update(min_size=160, max_size=224)
        if name.startswith(("fasterrcnn", "maskrcnn", "keypointrcnn")):
            kwargs.update(box_detections_per_img=DETECTIONS)
        else:
            kwargs.update(detections_per_img=DETECTIONS)
        if name.startswith("keypoint"):
            kwargs.update(num_classes=2, num_keypoints=5)
        if name.startswith(("fasterrcnn", "maskrcnn")) and name.endswith("_v2"):
            kwargs.update(rpn_post_nms_top_n_test=V2_PROPOSALS)
        model = (_build_variant(name, kwargs) if name in VARIANTS else getattr(detection, name)(**kwargs)).eval()
        export_args = (_images([(200, 160), (180, 220)], seed),)
        check_args = [(_images([(150, 230), (240, 170)], seed + 1),), (_images([(160, 160), (120, 200)], seed + 2),)]
        dynamic_shapes = ([{1: f"height{i}", 2: f"width{i}"} for i in range(IMAGES)],)
        task = "detection"
    elif name in SEGMENTATION:
        kwargs = dict(weights=None, weights_backbone=None, num_classes=4)
        if not name.startswith("lraspp"):
            kwargs.update(aux_loss=False)
        model = getattr(segmentation, name)(**kwargs).eval()
        g = torch.Generator().manual_seed(seed)
        export_args = (torch.rand(2, 3, 96, 128, generator=g),)
        check_args = [(torch.rand(1, 3, 120, 88, generator=g),)]
        dynamic_shapes = ({0: "batch", 2: "height", 3: "width"},)
        task = "segmentation"
    else:
        raise ValueError(f"unknown torchvision model {name!r}: choose one of {DETECTION + SEGMENTATION + VARIANTS}")
    _calibrate(model, export_args)
    if name.startswith("keypoint"):
        _peak_keypoints(model, export_args)
    return TorchvisionCase(name, task, model, export_args, check_args, dynamic_shapes)


def detecting_nothing(case: TorchvisionCase) -> TorchvisionCase:
    """``case`` whose model's score threshold lies between the best scores of the two images of its
    first check: one of them detects nothing, the other something (the model is changed in place)."""
    if case.task != "detection":
        raise ValueError(f"{case.name} is not a detection model")
    with torch.no_grad():
        best = [float(d["scores"].max()) if d["scores"].numel() else 0.0 for d in case.model(*case.check_args[0])]
    owner = getattr(case.model, "roi_heads", case.model)  # the R-CNNs keep it in their box head
    # an image detecting nothing already keeps nothing at a higher threshold
    owner.score_thresh = max(sum(best) / 2, owner.score_thresh if min(best) == 0 else 0.0)
    return case


#: a suppression decided by an IoU this close to its threshold may go the other way in another
#: runtime: boxes 0.02 pixel apart (1e-4 of an image of 200 pixels, what a random ResNet-50 gives
#: between runtimes) move the IoU of two boxes 20 pixels wide by 1e-3
IOU_TIE = 1e-3


def suppressions(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules holding the IoU threshold of a non-maximum suppression of ``model`` (``nms_thresh``:
    the region proposals' and the detections' of an R-CNN, the detections' of a one-stage model)."""
    return [m for m in (model, getattr(model, "rpn", None), getattr(model, "roi_heads", None))
            if m is not None and isinstance(getattr(m, "nms_thresh", None), float)]


@contextlib.contextmanager
def moved_iou_thresholds(owners: list[torch.nn.Module], shift: float) -> Iterator[None]:
    """The suppressions of ``owners`` (see :func:`suppressions`) keeping boxes overlapping up to an
    IoU moved by ``shift``: eager on the other side of a near-threshold suppression."""
    saved = [m.nms_thresh for m in owners]
    for owner in owners:
        owner.nms_thresh += shift
    try:
        yield
    finally:
        for owner, value in zip(owners, saved):
            owner.nms_thresh = value


#: scores within this of the lowest score kept: a box there may make the cut (the number of
#: detections kept, the score threshold) in one runtime and not in the other; the scores of a deep
#: random network differ by up to ~1e-3 between runtimes and the boxes at the cut by less
CUT_TIE = 2e-3
#: the relative distance under which two boxes are the same detection
SAME_BOX = 1e-2


def _box_map_sizes(boxes: torch.Tensor, resize: tuple[float, float]) -> torch.Tensor:
    """``(K, 2)``: the width and height Keypoint R-CNN resamples each box's heatmaps to
    (``heatmaps_to_keypoints``: ceil of the box's size in the resized image, at least 1)."""
    return ((boxes[:, 2:] - boxes[:, :2]) * torch.tensor(resize, dtype=boxes.dtype)).clamp(min=1).ceil()


def resize_scales(model: torch.nn.Module, images: list[torch.Tensor]) -> list[tuple[float, float]]:
    """The horizontal and vertical scales by which the transform of a detection model resizes each
    image (the boxes it returns are scaled back by their inverse)."""
    with torch.no_grad():
        resized = model.transform(images)[0].image_sizes
    return [(w / image.shape[-1], h / image.shape[-2]) for (h, w), image in zip(resized, images)]


def detection_differences(want: dict[str, torch.Tensor], got: dict[str, Any],
                          tie: float = CUT_TIE, resize: tuple[float, float] = (1.0, 1.0)) -> dict[str, float]:
    """The largest difference per output between two detections of one image (dicts of ``boxes``,
    ``labels``, ``scores``...), rows paired up to their order: a row of ``want`` with the row of ``got`` of the
    same label whose box is the nearest (boxes of scores within rounding of each other may come
    in either order). A row left without a partner (no box of its label within :data:`SAME_BOX`)
    is allowed only at the cut, its score within ``tie`` of the lowest score the other side kept: which
    of near-equal scores makes the cut depends on rounding (Keypoint R-CNN's 20th box, 1e-3 above
    the 21st); anywhere else it gives ``inf`` (key ``rows``), as does a label without a partner. Boxes are
    compared relatively to their largest coordinate (a box of 200 pixels computed by another
    runtime moves by a few hundredths of a pixel through a deep random network). Keypoints and
    their scores are compared on the pairs whose boxes have the same ``ceil`` of width and height:
    Keypoint R-CNN resamples each box's heatmaps to that size in the resized image (``resize``, see
    :func:`resize_scales`), and a box within rounding of an integer size gets another resampling,
    other scores, in the other runtime. Masks are
    compared as the fraction of pixels on a different side of 0.5: Mask R-CNN pastes each mask
    into a box rounded to integers, and a box a thousandth of a pixel away moves a mask's edge
    by one pixel."""
    got = {k: torch.as_tensor(v) for k, v in got.items()}
    count, other = want["boxes"].shape[0], got["boxes"].shape[0]
    if count == 0 and other == 0:
        return {}
    scale = torch.cat([want["boxes"].abs().amax(1), want["boxes"].new_ones(1)]).amax() if count else 1.0
    distance = torch.cdist(want["boxes"].double(), got["boxes"].double(), p=float("inf")) / float(scale)
    distance = distance.masked_fill(want["labels"][:, None] != got["labels"][None, :], float("inf"))
    pairs, free = [], torch.ones(other, dtype=torch.bool)
    for row in range(count):
        candidate = distance[row].masked_fill(~free, float("inf"))
        best = int(candidate.argmin()) if other else -1
        if best >= 0 and float(candidate[best]) < SAME_BOX:
            pairs.append((row, best))
            free[best] = False

    def at_cut(scores: torch.Tensor, unpaired: torch.Tensor, others: torch.Tensor) -> bool:
        """The unpaired rows score within ``tie`` of the lowest score the other side kept."""
        if not bool(unpaired.any()):
            return True
        return others.numel() > 0 and bool((scores[unpaired] <= others.min() + tie).all())

    paired_want = torch.zeros(count, dtype=torch.bool)
    paired_want[[r for r, _ in pairs]] = True
    if not (at_cut(want["scores"], ~paired_want, got["scores"]) and at_cut(got["scores"], free, want["scores"])):
        return {"rows": float("inf")}
    if not pairs:
        return {}
    rows = torch.tensor([r for r, _ in pairs])
    index = torch.tensor([c for _, c in pairs])
    # Keypoint R-CNN reads a box's keypoints from its heatmaps resampled to ceil of its size: a box
    # whose width or height lies within rounding of an integer is resampled to another size by the
    # other runtime (scores moved by 0.01 to 3), its keypoints are not comparable
    same_size = _box_map_sizes(want["boxes"][rows], resize) == _box_map_sizes(got["boxes"][index], resize)
    keypoint_rows = same_size.all(1)

    def difference(key: str, value: torch.Tensor) -> float:
        value, other_value = value[rows], got[key][index]
        if key.startswith("keypoints"):
            value, other_value = value[keypoint_rows], other_value[keypoint_rows]
            if not value.numel():
                return 0.0
        if key == "masks":
            return float(((value > 0.5) != (other_value > 0.5)).double().mean())
        difference = float((value.double() - other_value.double()).abs().max())
        if key in ("boxes", "keypoints"):
            return difference / max(1.0, float(value.abs().max()))
        return difference

    return {k: difference(k, w) if w.numel() else 0.0 for k, w in want.items()}


def match_detections(want: dict[str, torch.Tensor], got: dict[str, Any], tie: float = CUT_TIE,
                     resize: tuple[float, float] = (1.0, 1.0)) -> float:
    """The largest of :func:`detection_differences` (0 when neither side detects anything)."""
    return max(detection_differences(want, got, tie, resize).values(), default=0.0)
