"""CPU kernels of torchvision's operators written in plain torch (vectorized where it is cheap).

:mod:`fx2onnx.torchvision_cpu` registers them beside the schemas it declares when torchvision's
own C++ extension does not load (PyPI's CUDA build beside the CPU torch). Each follows the
semantics of torchvision's CPU kernel, rounding and clipping included:

* :func:`nms`: greedy suppression in decreasing score order, IoU strictly above the threshold;
* :func:`roi_align`: bilinear samples averaged per bin, ``sampling_ratio <= 0`` takes
  ``ceil(roi_size / pooled_size)`` samples per bin for each box, ``aligned`` shifts by half a pixel;
* :func:`roi_pool`: the maximum over integer bins (box corners rounded half away from zero),
  empty bins 0 with argmax -1;
* :func:`ps_roi_align` / :func:`ps_roi_pool`: position-sensitive versions, bin ``(ph, pw)`` of
  output channel ``c`` reads input channel ``(c * PH + ph) * PW + pw``;
* :func:`deform_conv2d`: bilinear samples at the offset positions (zero outside), times the mask,
  then a grouped matrix product with the weights.

``roi_pool``'s backward kernel scatters the gradient through the argmax; the other backward
operators keep no kernel (the models run and export for inference; training them raises).

.. code-block:: python

    import torch
    from fx2onnx.torchvision_kernels import nms

    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]])
    assert nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist() == [0, 2]
"""

from __future__ import annotations

import numpy as np
import torch

Tensor = torch.Tensor


def nms(dets: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Indices of the boxes kept by a greedy non-maximum suppression, best score first."""
    if dets.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=dets.device)
    order = torch.sort(scores, descending=True, stable=True).indices
    boxes = dets[order].detach().cpu().numpy()
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    suppressed = np.zeros(boxes.shape[0], dtype=bool)
    keep = []
    threshold = boxes.dtype.type(iou_threshold) if boxes.dtype == np.float64 else iou_threshold
    for i in range(boxes.shape[0]):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = slice(i + 1, None)
        w = np.maximum(np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]), 0)
        h = np.maximum(np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]), 0)
        inter = w * h
        with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 for empty boxes: NaN, never above
            iou = inter / (areas[i] + areas[rest] - inter)
        suppressed[rest] |= iou > threshold
    return order[torch.tensor(keep, dtype=torch.int64, device=order.device)]


def _axis_samples(start: Tensor, bin_size: Tensor, grid: Tensor, pooled: int, samples: int) -> Tensor:
    """The coordinates of the samples of every bin along one axis: ``(K, pooled, samples)``, in
    torchvision's order of operations (``start + p * bin + (i + 0.5) * bin / grid``)."""
    steps = torch.arange(pooled, dtype=start.dtype, device=start.device)[None, :, None]
    index = torch.arange(samples, dtype=start.dtype, device=start.device)[None, None, :] + 0.5
    bin_size = bin_size[:, None, None]
    return start[:, None, None] + steps * bin_size + index * bin_size / grid[:, None, None]


def _bilinear_axis(coord: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """torchvision's roi_align interpolation along one axis, the coordinate clipped at 0 and at
    ``size - 1``, zero more than a pixel outside: the two neighbours' indices and weights, stacked
    on a last axis of 2."""
    inside = (coord >= -1.0) & (coord <= size)
    coord = coord.clamp_min(0)
    low = coord.floor().to(torch.int64)
    last = low >= size - 1
    low = torch.where(last, size - 1, low)
    high = torch.where(last, low, low + 1)
    coord = torch.where(last, low.to(coord.dtype), coord)
    frac = coord - low.to(coord.dtype)
    weights = torch.stack([1.0 - frac, frac], -1) * inside[..., None].to(coord.dtype)
    return torch.stack([low, high], -1), weights


#: the (bin, sample) pairs :func:`_align` reads in one call of ``embedding_bag`` (bounds its memory)
_CHUNK = 1 << 22


def _align(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
           sampling_ratio: int, offset: float, min_size: float | None, min_count: int) -> Tensor:
    """The averaged bilinear samples of each bin of each box: ``(K, PH, PW, C)``.

    Each bin is a weighted sum of rows of the feature map seen as a table ``(N * H * W, C)``: four
    neighbours per sample, the bilinear weights (zero for a sample beyond the box's grid or more
    than a pixel outside), summed by one ``embedding_bag`` per chunk of boxes, then divided by the
    number of samples as torchvision does."""
    dtype = input.dtype
    batch_size, channels, height, width = input.shape
    k = rois.shape[0]
    if k == 0:
        return input.new_zeros((0, pooled_height, pooled_width, channels))
    scale = torch.tensor(spatial_scale, dtype=dtype)
    rois = rois.to(dtype)
    batch = rois[:, 0].to(torch.int64)
    x1, y1 = rois[:, 1] * scale - offset, rois[:, 2] * scale - offset
    roi_w, roi_h = rois[:, 3] * scale - offset - x1, rois[:, 4] * scale - offset - y1
    if min_size is not None:
        roi_w, roi_h = roi_w.clamp_min(min_size), roi_h.clamp_min(min_size)
    bin_h, bin_w = roi_h / pooled_height, roi_w / pooled_width
    if sampling_ratio > 0:
        grid_h = torch.full_like(roi_h, sampling_ratio, dtype=torch.int64)
        grid_w = torch.full_like(roi_w, sampling_ratio, dtype=torch.int64)
    else:
        grid_h = torch.ceil(roi_h / pooled_height).to(torch.int64)
        grid_w = torch.ceil(roi_w / pooled_width).to(torch.int64)
    count = (grid_h * grid_w).clamp_min(min_count).to(dtype)
    samples_h, samples_w = max(int(grid_h.max()), 1), max(int(grid_w.max()), 1)
    table = input.permute(0, 2, 3, 1).reshape(batch_size * height * width, channels)
    per_box = pooled_height * pooled_width * samples_h * samples_w * 4
    step = max(1, _CHUNK // per_box)
    parts = []
    for first in range(0, k, step):
        part = slice(first, first + step)
        ys = _axis_samples(y1[part], bin_h[part], grid_h[part].to(dtype), pooled_height, samples_h)
        xs = _axis_samples(x1[part], bin_w[part], grid_w[part].to(dtype), pooled_width, samples_w)
        y_at, y_weight = _bilinear_axis(ys, height)  # (k, PH, SH, 2)
        x_at, x_weight = _bilinear_axis(xs, width)  # (k, PW, SW, 2)
        y_weight = y_weight * (torch.arange(samples_h) < grid_h[part][:, None])[:, None, :, None]
        x_weight = x_weight * (torch.arange(samples_w) < grid_w[part][:, None])[:, None, :, None]
        rows = (batch[part][:, None, None, None] * height + y_at) * width  # (k, PH, SH, 2)
        # (k, PH, PW, SH, SW, 2, 2): bins first, then every sample's four neighbours
        index = rows[:, :, None, :, None, :, None] + x_at[:, None, :, None, :, None, :]
        weight = y_weight[:, :, None, :, None, :, None] * x_weight[:, None, :, None, :, None, :]
        bins = index.shape[0] * pooled_height * pooled_width
        summed = torch.nn.functional.embedding_bag(
            index.reshape(bins, -1), table, mode="sum", per_sample_weights=weight.reshape(bins, -1))
        parts.append(summed.reshape(-1, pooled_height, pooled_width, channels))
    total = parts[0] if len(parts) == 1 else torch.cat(parts)
    return total / count[:, None, None, None]


def roi_align(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
              sampling_ratio: int, aligned: bool) -> Tensor:
    """``torchvision::roi_align``: ``(K, C, PH, PW)`` from ``input (N, C, H, W)`` and ``rois (K, 5)``."""
    pooled = _align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                    0.5 if aligned else 0.0, None if aligned else 1.0, 1)
    return pooled.permute(0, 3, 1, 2).contiguous()


def _position_sensitive(pooled: Tensor, pooled_height: int, pooled_width: int) -> tuple[Tensor, Tensor]:
    """Keeps, for bin ``(ph, pw)`` of output channel ``c``, input channel ``(c * PH + ph) * PW + pw``
    of ``pooled (K, PH, PW, C)``: ``(K, C // (PH * PW), PH, PW)`` and the channel mapping."""
    k, channels = pooled.shape[0], pooled.shape[-1]
    per_bin = pooled_height * pooled_width
    if channels % per_bin:
        raise RuntimeError("input channels must be a multiple of pooling height * pooling width")
    out_channels = channels // per_bin
    grouped = pooled.reshape(k, per_bin, out_channels, per_bin)
    bins = torch.arange(per_bin)
    picked = grouped[:, bins, :, bins]  # (PH*PW, K, C_out)
    output = picked.permute(1, 2, 0).reshape(k, out_channels, pooled_height, pooled_width)
    mapping = (torch.arange(out_channels)[:, None] * per_bin + bins[None, :]).to(torch.int32)
    mapping = mapping.reshape(1, out_channels, pooled_height, pooled_width).expand(k, -1, -1, -1)
    return output.contiguous(), mapping.contiguous()


def ps_roi_align(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
                 sampling_ratio: int) -> tuple[Tensor, Tensor]:
    """``torchvision::ps_roi_align``: position-sensitive roi_align (half-pixel shift, no minimum
    box size); returns the output and the channel mapping."""
    pooled = _align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, 0.5, None, 0)
    return _position_sensitive(pooled, pooled_height, pooled_width)


def _round(value: Tensor) -> Tensor:
    """C's ``round``: half away from zero."""
    return torch.sign(value) * torch.floor(value.abs() + 0.5)


def _integer_bins(rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int, extra: int,
                  height: int, width: int, high: int):
    """The integer bins of roi_pool (``extra=1``) and ps_roi_pool (``extra=0``): start and end
    rows ``(K, PH)``, columns ``(K, PW)``, clipped to ``[0, high + size]``."""
    dtype = rois.dtype
    scale = torch.tensor(spatial_scale, dtype=dtype)
    corners = _round(rois[:, 1:] * scale).to(torch.int64)
    x1, y1, x2, y2 = corners.unbind(1)
    roi_w = (x2 - x1 + extra).clamp_min(1).to(dtype)
    roi_h = (y2 - y1 + extra).clamp_min(1).to(dtype)

    def bounds(start, size, pooled, limit):
        bin_size = size / pooled
        steps = torch.arange(pooled, dtype=dtype)
        lo = torch.floor(steps[None, :] * bin_size[:, None]).to(torch.int64) + start[:, None]
        hi = torch.ceil((steps[None, :] + 1) * bin_size[:, None]).to(torch.int64) + start[:, None]
        return lo.clamp(0, limit + high), hi.clamp(0, limit + high)

    hs, he = bounds(y1, roi_h, pooled_height, height)
    ws, we = bounds(x1, roi_w, pooled_width, width)
    return hs, he, ws, we


def roi_pool(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
             pooled_width: int) -> tuple[Tensor, Tensor]:
    """``torchvision::roi_pool``: the maximum of each integer bin, and its flat index (int32, -1
    for an empty bin)."""
    k = rois.shape[0]
    channels, height, width = input.shape[1:]
    output = input.new_zeros((k, channels, pooled_height, pooled_width))
    argmax = torch.full((k, channels, pooled_height, pooled_width), -1, dtype=torch.int32)
    if k == 0:
        return output, argmax
    hs, he, ws, we = _integer_bins(rois, spatial_scale, pooled_height, pooled_width, 1, height, width, 0)
    rows, cols = torch.arange(height), torch.arange(width)
    lowest = torch.tensor(float("-inf"), dtype=input.dtype)
    for n in range(k):
        plane = input[int(rois[n, 0])]  # (C, H, W)
        col_in = (cols[None, :] >= ws[n][:, None]) & (cols[None, :] < we[n][:, None])  # (PW, W)
        row_in = (rows[None, :] >= hs[n][:, None]) & (rows[None, :] < he[n][:, None])  # (PH, H)
        by_col = torch.where(col_in[None, None], plane[:, :, None, :], lowest)  # (C, H, PW, W)
        col_max = by_col.amax(-1)
        col_arg = (by_col == col_max[..., None]).to(torch.int8).argmax(-1)  # first maximum of a row
        by_row = torch.where(row_in[None, :, None, :], col_max.permute(0, 2, 1)[:, None], lowest)  # (C,PH,PW,H)
        best = by_row.amax(-1)
        row_arg = (by_row == best[..., None]).to(torch.int8).argmax(-1)  # (C, PH, PW)
        col_of = col_arg.permute(0, 2, 1)[:, None].expand(-1, pooled_height, -1, -1)
        col_at = torch.gather(col_of, 3, row_arg[..., None])[..., 0]
        empty = (he[n] <= hs[n])[:, None] | (we[n] <= ws[n])[None, :]
        output[n] = torch.where(empty[None], torch.zeros((), dtype=input.dtype), best)
        argmax[n] = torch.where(empty[None], -1, row_arg * width + col_at).to(torch.int32)
    return output, argmax


def ps_roi_pool(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
                pooled_width: int) -> tuple[Tensor, Tensor]:
    """``torchvision::ps_roi_pool``: the position-sensitive average of each integer bin (bins are
    clipped to ``size - 1`` as torchvision's CPU kernel does); returns the output and the mapping."""
    k = rois.shape[0]
    channels, height, width = input.shape[1:]
    if k == 0:
        per_bin = pooled_height * pooled_width
        shape = (0, channels // per_bin, pooled_height, pooled_width)
        return input.new_zeros(shape), torch.zeros(shape, dtype=torch.int32)
    hs, he, ws, we = _integer_bins(rois, spatial_scale, pooled_height, pooled_width, 0, height, width, -1)
    integral = torch.nn.functional.pad(input.to(torch.float64).cumsum(2).cumsum(3), (1, 0, 1, 0))
    planes = integral.permute(0, 2, 3, 1)[rois[:, 0].to(torch.int64)]  # (K, H+1, W+1, C)
    idx = torch.arange(k)[:, None, None]

    def corner(r, c):
        return planes[idx, r[:, :, None], c[:, None, :]]  # (K, PH, PW, C)

    sums = corner(he, we) - corner(hs, we) - corner(he, ws) + corner(hs, ws)
    area = ((he - hs)[:, :, None] * (we - ws)[:, None, :]).to(torch.float64)[..., None]
    empty = area <= 0
    means = torch.where(empty, 0.0, sums / torch.where(empty, 1.0, area)).to(input.dtype)
    return _position_sensitive(means, pooled_height, pooled_width)


def deform_conv2d(input: Tensor, weight: Tensor, offset: Tensor, mask: Tensor, bias: Tensor, stride_h: int,
                  stride_w: int, pad_h: int, pad_w: int, dilation_h: int, dilation_w: int, groups: int,
                  offset_groups: int, use_mask: bool) -> Tensor:
    """``torchvision::deform_conv2d``: a convolution whose kernel taps are moved by ``offset``
    (``(N, 2 * G * KH * KW, Ho, Wo)``, y then x for each tap) and scaled by ``mask`` when ``use_mask``."""
    n, in_channels, height, width = input.shape
    out_channels, _, kh, kw = weight.shape
    out_h, out_w = offset.shape[-2:]
    taps = kh * kw
    dtype = input.dtype
    off = offset.reshape(n, offset_groups, taps, 2, out_h, out_w)
    tap_y = (torch.arange(kh) * dilation_h).repeat_interleave(kw)
    tap_x = (torch.arange(kw) * dilation_w).repeat(kh)
    base_y = (torch.arange(out_h) * stride_h - pad_h)[None, :, None] + tap_y[:, None, None]  # (KK, Ho, 1)
    base_x = (torch.arange(out_w) * stride_w - pad_w)[None, None, :] + tap_x[:, None, None]  # (KK, 1, Wo)
    y = base_y.to(dtype) + off[:, :, :, 0]  # (N, G, KK, Ho, Wo)
    x = base_x.to(dtype) + off[:, :, :, 1]
    inside = (y > -1) & (y < height) & (x > -1) & (x < width)
    y0f, x0f = torch.floor(y), torch.floor(x)
    ly, lx = y - y0f, x - x0f
    y0, x0 = y0f.to(torch.int64), x0f.to(torch.int64)
    per_group = in_channels // offset_groups
    flat = input.reshape(n, offset_groups, per_group, height * width)
    value = torch.zeros((n, offset_groups, per_group) + y.shape[2:], dtype=dtype)
    for dy, dx, w in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx), (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
        yy, xx = y0 + dy, x0 + dx
        ok = inside & (yy >= 0) & (yy <= height - 1) & (xx >= 0) & (xx <= width - 1)
        index = (yy.clamp(0, height - 1) * width + xx.clamp(0, width - 1)).reshape(n, offset_groups, 1, -1)
        picked = torch.gather(flat, 3, index.expand(-1, -1, per_group, -1)).reshape(value.shape)
        value = value + torch.where(ok, w, torch.zeros((), dtype=dtype))[:, :, None] * picked
    if use_mask:
        value = value * mask.reshape(n, offset_groups, 1, taps, out_h, out_w)
    columns = value.reshape(n, groups, (in_channels // groups) * taps, out_h * out_w)
    kernel = weight.reshape(groups, out_channels // groups, -1)
    out = torch.einsum("gok,ngkl->ngol", kernel, columns).reshape(n, out_channels, out_h, out_w)
    return out + bias.reshape(1, -1, 1, 1)


def roi_pool_backward(grad: Tensor, rois: Tensor, argmax: Tensor, spatial_scale: float, pooled_height: int,
                      pooled_width: int, batch_size: int, channels: int, height: int, width: int) -> Tensor:
    """``torchvision::_roi_pool_backward``: each output gradient added at its argmax."""
    out = grad.new_zeros((batch_size, channels, height * width))
    used = argmax >= 0
    k, c = torch.nonzero(used, as_tuple=True)[:2]
    batch = rois[k, 0].to(torch.int64)
    out.index_put_((batch, c, argmax[used].to(torch.int64)), grad[used], accumulate=True)
    return out.reshape(batch_size, channels, height, width)


#: operator name -> CPU kernel
KERNELS = {
    "nms": nms,
    "roi_align": roi_align,
    "roi_pool": roi_pool,
    "_roi_pool_backward": roi_pool_backward,
    "ps_roi_align": ps_roi_align,
    "ps_roi_pool": ps_roi_pool,
    "deform_conv2d": deform_conv2d,
}
