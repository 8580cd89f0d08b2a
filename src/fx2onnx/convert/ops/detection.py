"""torchvision's detection operators: ``nms``, ``roi_align``, ``roi_pool``, ``ps_roi_align`` and
``deform_conv2d`` to ONNX's ``NonMaxSuppression``, ``RoiAlign``, ``MaxRoiPool`` and ``DeformConv``.

* ``nms(boxes (N, 4), scores (N,), iou)``: one batch, one class of ``NonMaxSuppression`` keeping
  up to N boxes, whose third column (the box index) is the result: boxes in decreasing score
  order, a box removed when its IoU with a kept one is above the threshold, as torchvision.
* ``roi_align``: ``RoiAlign`` (``mode="avg"``) with the boxes' first column as batch indices;
  ``aligned=True`` is ``coordinate_transformation_mode="half_pixel"``, False ``output_half_pixel``
  (which also makes a box at least one pixel wide, as torchvision); ``sampling_ratio <= 0`` is
  ONNX's adaptive 0.
* ``roi_pool``: ``MaxRoiPool`` (the argmax output has no ONNX counterpart: refused when used).
* ``ps_roi_align``: ``RoiAlign`` of every channel (half-pixel, as torchvision's kernel) whose bin
  ``(ph, pw)`` of output channel ``c`` keeps channel ``(c * PH + ph) * PW + pw`` (a mask and a sum).
* ``deform_conv2d``: ``DeformConv`` (opset 19), offsets in the same layout (y then x per tap).

``ps_roi_pool`` (an average over integer bins) has no converter: its export is refused by
the interpreter naming the operator.

The operators exist once torchvision's schemas do (:func:`fx2onnx.torchvision_cpu.ensure_torchvision`);
without torchvision nothing is registered.
"""

from __future__ import annotations

import numpy as np
import torch

from ...torchvision_cpu import ensure_torchvision
from ..registry import converter
from ._common import fake_of

i64 = torch.int64


def _batch_and_boxes(ctx, rois):
    """``rois (K, 5)`` -> batch indices (K,) int64 and boxes (K, 4)."""
    first = ctx.op.Slice(rois, ctx.const([0], i64), ctx.const([1], i64), ctx.const([1], i64))
    batch = ctx.cast(ctx.op.Squeeze(first, ctx.const([1], i64)), i64)
    boxes = ctx.op.Slice(rois, ctx.const([1], i64), ctx.const([5], i64), ctx.const([1], i64))
    return batch, boxes


def convert_nms(ctx, node, boxes, scores, iou_threshold):
    batched = ctx.op.Unsqueeze(boxes, ctx.const([0], i64))  # (1, N, 4)
    one_class = ctx.op.Unsqueeze(scores, ctx.const([0, 1], i64))  # (1, 1, N)
    most = ctx.op.Shape(boxes, start=0, end=1)  # every box may be kept
    selected = ctx.op.NonMaxSuppression(batched, one_class, most, ctx.const([float(iou_threshold)], torch.float32))
    column = ctx.op.Slice(selected, ctx.const([2], i64), ctx.const([3], i64), ctx.const([1], i64))
    return ctx.op.Squeeze(column, ctx.const([1], i64))


def _roi_align(ctx, x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, half_pixel: bool):
    batch, boxes = _batch_and_boxes(ctx, rois)
    return ctx.op.RoiAlign(
        x, boxes, batch, mode="avg", output_height=int(pooled_height), output_width=int(pooled_width),
        sampling_ratio=max(int(sampling_ratio), 0), spatial_scale=float(spatial_scale),
        coordinate_transformation_mode="half_pixel" if half_pixel else "output_half_pixel")


def convert_roi_align(ctx, node, x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    return _roi_align(ctx, x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, bool(aligned))


def _unused_second_output(ctx, node, what: str) -> None:
    """Refuses a node whose second output (no ONNX counterpart) is read."""
    for user in node.users:
        if user.op == "call_function" and user.args[1:2] != (0,) and user.users:
            raise ctx.error(f"the {what} output of {node.target} has no ONNX counterpart; only the pooled "
                            "output can be exported (inference)")


def convert_roi_pool(ctx, node, x, rois, spatial_scale, pooled_height, pooled_width):
    _unused_second_output(ctx, node, "argmax")
    pooled = ctx.op.MaxRoiPool(x, ctx.cast(rois, ctx.dtype(x) or torch.float32),
                               pooled_shape=[int(pooled_height), int(pooled_width)],
                               spatial_scale=float(spatial_scale))
    return pooled, None


def convert_ps_roi_align(ctx, node, x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio):
    _unused_second_output(ctx, node, "channel mapping")
    channels = fake_of(node.args[0]).shape[1]
    bins = int(pooled_height) * int(pooled_width)
    if not isinstance(channels, int) or channels % bins:
        raise ctx.error(f"ps_roi_align needs a static number of channels, a multiple of {bins}, got {channels}")
    pooled = _roi_align(ctx, x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, True)
    dtype = ctx.out_dtype(0)
    # (K, C_out, bins, bins): the channel's bin index, then the spatial bin; keep the diagonal
    grouped = ctx.op.Reshape(pooled, ctx.const([0, channels // bins, bins, bins], i64))
    diagonal = ctx.op.ReduceSum(ctx.op.Mul(grouped, ctx.const(np.eye(bins), dtype)), ctx.const([2], i64),
                                keepdims=0)
    return ctx.op.Reshape(diagonal, ctx.const([0, channels // bins, int(pooled_height), int(pooled_width)], i64)), None


def convert_deform_conv2d(ctx, node, x, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h,
                          dilation_w, groups, offset_groups, use_mask):
    if ctx.opset < 19:
        raise ctx.error(f"deform_conv2d needs ONNX's DeformConv (opset 19), the model is built for opset {ctx.opset}")
    kernel = list(fake_of(node.args[1]).shape[2:])
    inputs = [x, weight, offset, bias] + ([mask] if use_mask else [])
    return ctx.op.DeformConv(*inputs, dilations=[int(dilation_h), int(dilation_w)], group=int(groups),
                             offset_group=int(offset_groups), pads=[int(pad_h), int(pad_w)] * 2,
                             strides=[int(stride_h), int(stride_w)], kernel_shape=[int(k) for k in kernel])


def register() -> bool:
    """Registers the converters when torchvision's operators exist; returns whether they do."""
    if ensure_torchvision() == "absent" or not hasattr(torch.ops, "torchvision"):
        return False
    ops = torch.ops.torchvision
    for name, function in (("nms", convert_nms), ("roi_align", convert_roi_align), ("roi_pool", convert_roi_pool),
                           ("ps_roi_align", convert_ps_roi_align), ("deform_conv2d", convert_deform_conv2d)):
        try:
            target = getattr(ops, name).default
        except (AttributeError, RuntimeError):
            continue
        converter(target)(function)
    return True


register()
