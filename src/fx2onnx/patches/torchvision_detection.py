"""torchvision's detection models captured by :func:`torch.export` with dynamic image sizes.

A detection model of ``torchvision.models.detection`` takes a list of images of any sizes,
resizes each, pads them into one batch, proposes boxes, keeps some with non-maximum
suppressions and pools features in each kept box. Its Python reads sizes and counts where
torch.export cannot follow them; each patch below changes one function while exporting only
(``torch.compiler.is_exporting()``), eager calls go to the original:

* ``_resize_image_and_masks``: the scale ``min(min_size / short side, max_size / long side)``
  chose one ratio with Python's ``min`` (a guard on the sizes): :func:`torch.sym_min` keeps both,
  the resized size is ``floor(size * scale)`` as torchvision computes it;
* ``GeneralizedRCNNTransform.batch_images``: the padded size is the :func:`torch.sym_max` of the
  images' sizes rounded up to the stride (Python's ``max`` chose one image);
* ``_setup_scales`` (``MultiScaleRoIAlign``): the scale of each feature map, the backbone's stride
  at that level (a constant of the architecture), read from the example's sizes without a guard
  (``torch.tensor(float(size))`` specialized the image size);
* ``batched_nms``: one ``nms`` over boxes moved apart by class (torchvision's own trick), instead
  of a branch on the number of boxes and a loop over the classes present;
* ``BoxCoder.decode``: no ``if box_sum > 0`` (the number of boxes is unknown after a
  suppression), the decoded rows reshaped with explicit sizes;
* ``paste_masks_in_image`` (Mask R-CNN): each mask stretched over its box and written into the
  image by two batched products with bilinear weights (a Python loop over the boxes otherwise);
* ``_multiscale_roi_align``: the boxes counted with ``rois.shape[0]`` (``len`` froze it), each
  level's pooled boxes written with a functional ``index_put``.
* ``heatmaps_to_keypoints`` (Keypoint R-CNN): each box's heatmaps stretched to the box's size
  (bicubic, as ``F.interpolate``) by two batched products padded to the largest box, the argmax
  taken inside each box; the original loops over the boxes, each its own size.
* ``FastRCNNConvFCHead`` / ``MaskRCNNHeads`` (the v2 R-CNNs): the convolutional heads over the
  pooled boxes run their batch norms as affine maps; aten's ``batch_norm`` branches on an empty
  input, a guard on the number of boxes (zero after a suppression keeping nothing).

The one-stage detectors (RetinaNet, FCOS, SSD, SSDlite) need the resize, batching and
``batched_nms`` patches only: their ``topk`` over the boxes above a score threshold takes
``min(k, count)`` of an unbacked count, which torch.export follows. Every builder of
``torchvision.models.detection`` and ``torchvision.models.segmentation`` is exported and checked
by ``bench/bench_torchvision_detection.py`` (the rows of the supported-models page).

The number of kept boxes of each ``nms`` is an unbacked size (between 0 and the number of
boxes: :func:`fx2onnx.torchvision_cpu._fake_nms` replaces torchvision's fake kernel, which
claimed at least 2). What the export fixes: the number of images in the list (the model is
exported for that many), the model's ``min_size`` / ``max_size`` and thresholds.

.. code-block:: python

    import fx2onnx
    from fx2onnx.zoo.torchvision_models import build_torchvision_model

    case = build_torchvision_model("fasterrcnn_mobilenet_v3_large_fpn")
    # to_onnx(patches="auto") applies these patches to a detection model of torchvision
    onx = fx2onnx.to_onnx(case.model, case.export_args, dynamic_shapes=case.dynamic_shapes)
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import optimization_hint

from .registry import Patch


def _exporting() -> bool:
    return torch.compiler.is_exporting()


def make_batched_nms(original: Any) -> Any:
    """``batched_nms`` through one ``nms`` over boxes moved apart by class while exporting."""

    def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float):
        if not _exporting():
            return original(boxes, scores, idxs, iou_threshold)
        # the largest coordinate, 0 without boxes (max of an empty tensor is an error)
        top = torch.cat([boxes.reshape(-1), boxes.new_zeros(1)]).max()
        moved = boxes + (idxs.to(boxes) * (top + 1))[:, None]
        return torch.ops.torchvision.nms(moved, scores, iou_threshold)

    return batched_nms


def make_multiscale_roi_align(original: Any) -> Any:
    """``_multiscale_roi_align`` counting the boxes with ``rois.shape[0]`` (``len`` froze it) and
    writing each level's pooled boxes with a functional ``index_put`` while exporting."""
    namespace = original.__globals__
    to_rois, roi_align = namespace["_convert_to_roi_format"], namespace["roi_align"]

    def multiscale_roi_align(x_filtered, boxes, output_size, sampling_ratio, scales, mapper):
        if not _exporting() or len(x_filtered) == 1 or scales is None or mapper is None:
            return original(x_filtered, boxes, output_size, sampling_ratio, scales, mapper)
        rois = to_rois(boxes)
        levels = mapper(boxes)
        first = x_filtered[0]
        result = first.new_zeros((rois.shape[0], first.shape[1], *output_size))
        for level, (feature, scale) in enumerate(zip(x_filtered, scales)):
            index = torch.where(levels == level)[0]
            pooled = roi_align(feature, rois[index], output_size=output_size, spatial_scale=scale,
                               sampling_ratio=sampling_ratio)
            result = result.index_put((index,), pooled.to(result.dtype))
        return result

    return multiscale_roi_align


def make_resize_image(original: Any) -> Any:
    """``_resize_image_and_masks`` whose scale is ``sym_min(min_size / short side, max_size / long
    side)`` while exporting: Python's ``min`` of two symbolic ratios chose one (a guard on the sizes)."""

    def resize_image_and_masks(image, self_min_size, self_max_size, target=None, fixed_size=None):
        if not _exporting() or target is not None or fixed_size is not None:
            return original(image, self_min_size, self_max_size, target, fixed_size)
        height, width = image.shape[-2:]
        scale = torch.sym_min(float(self_min_size) / torch.sym_min(height, width),
                              float(self_max_size) / torch.sym_max(height, width))
        size = [torch.sym_int(math.floor(height * scale)), torch.sym_int(math.floor(width * scale))]
        resized = torch.nn.functional.interpolate(image[None], size=size, mode="bilinear", align_corners=False)
        return resized[0], target

    return resize_image_and_masks


def make_batch_images(original: Any) -> Any:
    """``GeneralizedRCNNTransform.batch_images`` padding every image to the largest height and width
    (``sym_max``, rounded up to the stride) while exporting; Python's ``max`` chose one image."""

    def batch_images(self, images, size_divisible: int = 32):
        if not _exporting():
            return original(self, images, size_divisible)
        height, width = images[0].shape[-2:]
        for image in images[1:]:
            height, width = torch.sym_max(height, image.shape[-2]), torch.sym_max(width, image.shape[-1])
        height = (height + size_divisible - 1) // size_divisible * size_divisible
        width = (width + size_divisible - 1) // size_divisible * size_divisible
        padded = [torch.nn.functional.pad(image, (0, width - image.shape[-1], 0, height - image.shape[-2]))
                  for image in images]
        return torch.stack(padded)

    return batch_images


def _example_value(size: Any) -> int:
    """The example's value of a size, without a guard (an int stays an int)."""
    return int(optimization_hint(size)) if isinstance(size, torch.SymInt) else int(size)


def make_setup_scales(original: Any) -> Any:
    """``_setup_scales`` reading the example's sizes while exporting: each feature map's scale is
    ``2 ** round(log2(feature size / image size))``, the stride of the backbone at that level, a
    constant of the architecture; torch.tensor(float(size)) specialized the image size on it."""

    def setup_scales(features, image_shapes, canonical_scale, canonical_level):
        if not _exporting():
            return original(features, image_shapes, canonical_scale, canonical_level)
        height = max(_example_value(shape[0]) for shape in image_shapes)
        scales = [2.0 ** round(math.log2(_example_value(f.shape[-2]) / height)) for f in features]
        mapper = original.__globals__["initLevelMapper"](
            int(-math.log2(scales[0])), int(-math.log2(scales[-1])), canonical_scale=canonical_scale,
            canonical_level=canonical_level)
        return scales, mapper

    return setup_scales


def make_box_decode(original: Any) -> Any:
    """``BoxCoder.decode`` without its ``if box_sum > 0`` while exporting (a guard on the number of
    boxes, unknown after a non-maximum suppression): the codes come as one row per box, and
    the rows are split by 4 with explicit sizes (valid for no box too)."""

    def decode(self, rel_codes: torch.Tensor, boxes: list[torch.Tensor]) -> torch.Tensor:
        if not _exporting() or rel_codes.dim() != 2:
            return original(self, rel_codes, boxes)
        reference = torch.cat(boxes, dim=0)
        torch._check(rel_codes.shape[0] == reference.shape[0])
        decoded = self.decode_single(rel_codes, reference)
        return decoded.reshape(decoded.shape[0], decoded.shape[1] // 4, 4)

    return decode


def _paste_weights(positions: torch.Tensor, start: torch.Tensor, end: torch.Tensor, size: int) -> torch.Tensor:
    """``(K, P, size)``: the bilinear weights (``align_corners=False``) of pixel ``p`` of the image
    on the ``size`` rows of a mask stretched over ``[start, end]`` (integers), zero outside it."""
    length = (end - start + 1).clamp_min(1).to(torch.float32)
    offset = positions[None, :] - start[:, None]
    source = ((offset.to(torch.float32) + 0.5) * (size / length)[:, None] - 0.5).clamp_min(0)
    low = source.floor().clamp_max(size - 1).to(torch.int64)  # beyond the box: masked below
    high = torch.where(low < size - 1, low + 1, low)
    frac = (source - low.to(torch.float32))[..., None]
    weights = (1 - frac) * torch.nn.functional.one_hot(low, size) + frac * torch.nn.functional.one_hot(high, size)
    inside = (offset >= 0) & (offset <= (end - start)[:, None])
    return weights * inside[..., None]


def make_paste_masks(original: Any) -> Any:
    """``paste_masks_in_image`` as two batched products while exporting: each mask stretched over
    its box (bilinear, as ``F.interpolate``) and written into a blank image; the original loops
    over the boxes in Python (their number is unknown after a suppression)."""
    namespace = original.__globals__
    expand_masks, expand_boxes = namespace["expand_masks"], namespace["expand_boxes"]

    def paste_masks_in_image(masks, boxes, img_shape, padding=1):
        if not _exporting():
            return original(masks, boxes, img_shape, padding)
        masks, scale = expand_masks(masks, padding=padding)
        boxes = expand_boxes(boxes, scale).to(dtype=torch.int64)
        height, width = img_shape
        size = masks.shape[-1]
        x0, y0, x1, y1 = boxes.unbind(1)
        rows = _paste_weights(torch.arange(height, device=masks.device), y0, y1, size).to(masks.dtype)
        cols = _paste_weights(torch.arange(width, device=masks.device), x0, x1, size).to(masks.dtype)
        return torch.bmm(torch.bmm(rows, masks[:, 0]), cols.transpose(1, 2))[:, None]

    return paste_masks_in_image


def _sequential_without_batch_norm(sequence: torch.nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``sequence(x)`` with every batch norm in evaluation mode written as its affine map: aten's
    ``batch_norm`` branches on ``input.numel() == 0`` (a guard on the number of boxes)."""
    for layer in sequence:
        if isinstance(layer, torch.nn.Sequential):
            x = _sequential_without_batch_norm(layer, x)
        elif (isinstance(layer, torch.nn.modules.batchnorm._BatchNorm) and not layer.training
              and layer.running_mean is not None):
            scale = torch.rsqrt(layer.running_var + layer.eps)
            if layer.weight is not None:
                scale = scale * layer.weight
            shift = -layer.running_mean * scale
            if layer.bias is not None:
                shift = shift + layer.bias
            shape = (1, -1) + (1,) * (x.dim() - 2)
            x = x * scale.reshape(shape) + shift.reshape(shape)
        else:
            x = layer(x)
    return x


def make_box_head_forward(original: Any) -> Any:
    """The forward of a convolutional head over the pooled boxes (``FastRCNNConvFCHead``,
    ``MaskRCNNHeads``: the v2 R-CNNs) with its batch norms as affine maps while exporting: aten's
    ``batch_norm`` guards on the number of boxes being zero, unknown after a suppression."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _exporting():
            return original(self, x)
        return _sequential_without_batch_norm(self, x)

    return forward


#: torch's bicubic kernel parameter (``upsample_bicubic2d``)
_CUBIC = -0.75


def _cubic_weights(size: Any, lengths: torch.Tensor, source: int) -> torch.Tensor:
    """``(K, size, source)``: the bicubic weights (``align_corners=False``, as ``F.interpolate``)
    of a map of ``source`` rows stretched to ``lengths[k]`` rows; rows from ``lengths[k]`` on are 0."""
    rows = torch.arange(size, device=lengths.device)
    real = (source / lengths.to(torch.float32))[:, None] * (rows.to(torch.float32)[None, :] + 0.5) - 0.5
    low = real.floor()
    t = real - low

    def near(x):  # |x| <= 1
        return ((_CUBIC + 2) * x - (_CUBIC + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((_CUBIC * x - 5 * _CUBIC) * x + 8 * _CUBIC) * x - 4 * _CUBIC

    weights = torch.zeros((), dtype=torch.float32, device=lengths.device)
    for tap, coefficient in enumerate((far(t + 1), near(t), near(1 - t), far(2 - t))):
        index = (low.to(torch.int64) + tap - 1).clamp(0, source - 1)
        weights = weights + coefficient[..., None] * torch.nn.functional.one_hot(index, source).to(torch.float32)
    return weights * (rows[None, :] < lengths[:, None])[..., None]


def make_heatmaps_to_keypoints(original: Any) -> Any:
    """``heatmaps_to_keypoints`` as batched products while exporting: each box's heatmaps
    stretched to the box's size (``ceil`` of its width and height, bicubic) inside a map as large
    as the largest box, the argmax taken inside the box; the original loops over the boxes in
    Python, reading each size with ``.item()``."""

    def heatmaps_to_keypoints(maps: torch.Tensor, rois: torch.Tensor):
        if not _exporting():
            return original(maps, rois)
        widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)
        heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)
        wide, high = widths.ceil().to(torch.int64), heights.ceil().to(torch.int64)
        count, keypoints, source_h, source_w = maps.shape
        # the largest box's size (1 without boxes): an unbacked size of the padded map
        width = torch.cat([wide, wide.new_ones(1)]).max().item()
        height = torch.cat([high, high.new_ones(1)]).max().item()
        torch._check(width >= 1)
        torch._check(height >= 1)
        rows = _cubic_weights(height, high, source_h).to(maps.dtype)
        cols = _cubic_weights(width, wide, source_w).to(maps.dtype)
        stretched = rows[:, None] @ maps @ cols[:, None].transpose(-1, -2)
        inside = ((torch.arange(height, device=maps.device)[None, :, None] < high[:, None, None])
                  & (torch.arange(width, device=maps.device)[None, None, :] < wide[:, None, None]))
        flat = stretched.masked_fill(~inside[:, None], float("-inf")).reshape(count, keypoints, height * width)
        position = flat.argmax(dim=2)
        x_int = position % width
        y_int = torch.div(position - x_int, width, rounding_mode="floor")
        x = (x_int.to(torch.float32) + 0.5) * (widths / wide.to(widths.dtype))[:, None] + rois[:, 0, None]
        y = (y_int.to(torch.float32) + 0.5) * (heights / high.to(heights.dtype))[:, None] + rois[:, 1, None]
        scores = flat.gather(2, position[..., None])[..., 0]
        return torch.stack([x, y, torch.ones_like(x)], dim=2), scores

    return heatmaps_to_keypoints


def torchvision_patches() -> list[Patch]:
    """The patches of this module (targets missing from the installed torchvision are skipped)."""
    return [
        *(Patch(name=f"torchvision_batched_nms{suffix}", kind="torchvision", target=target, make=make_batched_nms,
                expected_args=("boxes", "scores", "idxs", "iou_threshold"),
                doc="one nms over boxes moved apart by class (no branch on the number of boxes)")
          for suffix, target in (("", "torchvision.ops.boxes.batched_nms"), ("_ops", "torchvision.ops.batched_nms"))),
        Patch(name="torchvision_resize_image", kind="torchvision",
              target="torchvision.models.detection.transform._resize_image_and_masks", make=make_resize_image,
              expected_args=("image", "self_min_size", "self_max_size", "target", "fixed_size"),
              doc="the resize scale as sym_min of the two ratios (min() guarded on the image size)"),
        Patch(name="torchvision_batch_images", kind="torchvision",
              target="torchvision.models.detection.transform.GeneralizedRCNNTransform.batch_images",
              make=make_batch_images, expected_args=("self", "images", "size_divisible"),
              doc="the batch padded to sym_max of the sizes (max() guarded on the image sizes)"),
        Patch(name="torchvision_setup_scales", kind="torchvision", target="torchvision.ops.poolers._setup_scales",
              make=make_setup_scales,
              expected_args=("features", "image_shapes", "canonical_scale", "canonical_level"),
              doc="the feature maps' scales (the backbone's strides) read without specializing the image size"),
        Patch(name="torchvision_box_decode", kind="torchvision",
              target="torchvision.models.detection._utils.BoxCoder.decode", make=make_box_decode,
              expected_args=("self", "rel_codes", "boxes"),
              doc="no branch on the number of boxes (unknown after a non-maximum suppression)"),
        Patch(name="torchvision_paste_masks", kind="torchvision",
              target="torchvision.models.detection.transform.paste_masks_in_image", make=make_paste_masks,
              expected_args=("masks", "boxes", "img_shape", "padding"),
              doc="the masks pasted by two batched products instead of a loop over the boxes (Mask R-CNN)"),
        Patch(name="torchvision_heatmaps_to_keypoints", kind="torchvision",
              target="torchvision.models.detection.roi_heads.heatmaps_to_keypoints",
              make=make_heatmaps_to_keypoints, expected_args=("maps", "rois"),
              doc="the keypoints read from heatmaps stretched by batched products, not a loop over the boxes"),
        *(Patch(name=f"torchvision_{name}_forward", kind="torchvision", target=target,
                make=make_box_head_forward, expected_args=("self", "input"),
                doc="the box head's batch norms as affine maps (batch_norm guarded on the number of boxes)")
          for name, target in (("box_head", "torchvision.models.detection.faster_rcnn.FastRCNNConvFCHead.forward"),
                               ("mask_head", "torchvision.models.detection.mask_rcnn.MaskRCNNHeads.forward"))),
        Patch(name="torchvision_multiscale_roi_align", kind="torchvision",
              target="torchvision.ops.poolers._multiscale_roi_align", make=make_multiscale_roi_align,
              expected_args=("x_filtered", "boxes", "output_size", "sampling_ratio", "scales", "mapper"),
              doc="the boxes counted as a size, not with len(); each level written with a functional index_put"),
    ]
