"""Resampling layers: upsampling (Resize), grid sampling, affine grids, pixel and channel shuffles, rot90.

Shares the helpers of :mod:`.vision` (unbatched inputs get a batch dimension
added then removed).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

from ..registry import converter
from ._common import input_rank
from .vision import _add_batch, _remove_batch

aten = torch.ops.aten


# upsampling
def _resize(
    ctx,
    x,
    output_size,
    scale_factors,
    n: int,
    mode: str,
    transform: str,
    nearest_mode: str = "floor",
    antialias: bool = False,
):
    x, unbatched = _add_batch(ctx, x, n)
    dtype = ctx.out_dtype()
    if dtype == torch.float64:
        # onnxruntime's Resize has no float64 kernel: gathers and weights per axis, in float64
        y = _resize_by_gathers(ctx, x, output_size, scale_factors, n, mode, transform, antialias)
        return _remove_batch(ctx, y, unbatched)
    # torch interpolates integer images (uint8) and rounds to the nearest value
    rounded = mode != "nearest" and not dtype.is_floating_point
    if rounded:
        x = ctx.cast(x, torch.float32)
    if scale_factors is not None and output_size is None:
        factors: list[Any] = [float(s) for s in _float_tuple(scale_factors, n)]
    elif output_size is not None:
        factors = [None] * n
    else:
        raise ctx.error("upsample needs an output size or scale factors.")
    # an integer image is resampled one axis at a time, the last first, rounded and clamped in between, as
    # torch's separable uint8 kernels do: a cubic's negative lobes clamped after the first pass change the
    # second (up to 28 levels on a downsampled image); one Resize for every axis otherwise
    passes = [[i] for i in reversed(range(n))] if rounded and n > 1 else [list(range(n))]
    y = x
    for axes in passes:
        if factors[0] is not None:
            scales = ctx.const([1.0, 1.0] + [factors[i] if i in axes else 1.0 for i in range(n)], torch.float32)
            sizes = None
        else:
            scales = None
            dims = [ctx.op.Shape(y, start=0, end=2)]
            for i in range(n):
                dims.append(ctx.shape_value([output_size[i]]) if i in axes else ctx.op.Shape(y, start=2 + i, end=3 + i))
            sizes = ctx.op.Concat(*dims, axis=0)
        y = ctx.op.Resize(
            y,
            None,
            scales,
            sizes,
            mode=mode,
            coordinate_transformation_mode=transform,
            nearest_mode=nearest_mode if mode == "nearest" else None,
            # torch: a = -0.75 for bicubic, a = -0.5 and no weight outside the image with antialiasing
            cubic_coeff_a=(-0.5 if antialias else -0.75) if mode == "cubic" else None,
            antialias=1 if antialias else None,
            exclude_outside=1 if antialias else None,
        )
        if rounded:
            info = torch.iinfo(dtype)
            y = ctx.op.Clip(ctx.op.Round(y), ctx.const(float(info.min), torch.float32), ctx.const(float(info.max), torch.float32))
    y = ctx.cast(y, dtype)
    return _remove_batch(ctx, y, unbatched)


def _resize_by_gathers(ctx, x, output_size, scale_factors, n: int, mode: str, transform: str, antialias: bool = False):
    """Separable resampling of the last ``n`` axes of ``x`` (batched) as torch computes it:
    the source coordinate of every output index, the neighbours gathered, weighted, summed
    (antialiased: a dense ``[out, in]`` matrix of the filter's normalized weights)."""
    factors = _float_tuple(scale_factors, n) if output_size is None else [None] * n
    resize_axis = _antialiased_axis if antialias else _resize_axis
    for i in range(n):
        axis = 2 + i
        if output_size is not None:
            size = ctx.as_value(output_size[i], torch.int64)
        else:  # floor(input size * factor)
            scaled = ctx.op.Mul(ctx.cast(ctx.dim_size(x, axis), torch.float64), ctx.const(factors[i], torch.float64))
            size = ctx.cast(ctx.op.Floor(scaled), torch.int64)
        x = resize_axis(ctx, x, axis, n + 2, size, factors[i], mode, transform)
    return x


def _positions(ctx, n):
    """0, 1, ..., n - 1 in float64."""
    i64 = torch.int64
    return ctx.cast(ctx.op.Range(ctx.const(0, i64), n, ctx.const(1, i64)), torch.float64)


def _input_per_output(ctx, in_f, out_f, factor: float | None):
    """The step in the input per output position: 1 / scale factor when one is given, in / out otherwise."""
    return ctx.const(1.0 / factor, torch.float64) if factor else ctx.op.Div(in_f, out_f)


def _cubic_near(ctx, d, a: float):
    """Cubic convolution weight for 0 <= d <= 1: ((a + 2) d - (a + 3)) d^2 + 1."""
    f64 = torch.float64
    inner = ctx.op.Sub(ctx.op.Mul(ctx.const(a + 2, f64), d), ctx.const(a + 3, f64))
    return ctx.op.Add(ctx.op.Mul(ctx.op.Mul(inner, d), d), ctx.const(1.0, f64))


def _cubic_far(ctx, d, a: float):
    """Cubic convolution weight for 1 < d < 2: ((a d - 5a) d + 8a) d - 4a."""
    f64 = torch.float64
    inner = ctx.op.Add(ctx.op.Mul(ctx.op.Sub(ctx.op.Mul(ctx.const(a, f64), d), ctx.const(5 * a, f64)), d), ctx.const(8 * a, f64))
    return ctx.op.Sub(ctx.op.Mul(inner, d), ctx.const(4 * a, f64))


def _antialiased_axis(ctx, x, axis: int, rank: int, size, factor: float | None, mode: str, transform: str):
    """torch's antialiased resampling along one axis: the filter (triangle, or cubic with a = -0.5)
    stretched by the scale when downsampling, over the inputs within its support, normalized."""
    f64, i64 = torch.float64, torch.int64
    length = ctx.dim_size(x, axis)
    in_f, out_f = ctx.cast(length, f64), ctx.cast(size, f64)
    scale = _input_per_output(ctx, in_f, out_f, factor)
    one = ctx.const(1.0, f64)
    stretched = ctx.op.GreaterOrEqual(scale, one)
    half = 1.0 if mode == "linear" else 2.0  # half the filter's size
    support = ctx.op.Where(stretched, ctx.op.Mul(scale, ctx.const(half, f64)), ctx.const(half, f64))
    invscale = ctx.op.Where(stretched, ctx.op.Div(one, scale), one)
    column = ctx.const([-1, 1], i64)
    center = ctx.op.Reshape(ctx.op.Mul(ctx.op.Add(_positions(ctx, size), ctx.const(0.5, f64)), scale), column)
    first = ctx.op.Max(ctx.op.Floor(ctx.op.Add(ctx.op.Sub(center, support), ctx.const(0.5, f64))), ctx.const(0.0, f64))
    end = ctx.op.Min(ctx.op.Floor(ctx.op.Add(ctx.op.Add(center, support), ctx.const(0.5, f64))), in_f)
    k = ctx.op.Unsqueeze(_positions(ctx, length), ctx.const([0], i64))
    inside = ctx.op.And(ctx.op.GreaterOrEqual(k, first), ctx.op.Less(k, end))
    d = ctx.op.Abs(ctx.op.Mul(ctx.op.Add(ctx.op.Sub(k, center), ctx.const(0.5, f64)), invscale))
    if mode == "linear":
        w = ctx.op.Max(ctx.op.Sub(one, d), ctx.const(0.0, f64))
    else:  # cubic convolution, a = -0.5, zero beyond 2
        near, far = _cubic_near(ctx, d, -0.5), _cubic_far(ctx, d, -0.5)
        w = ctx.op.Where(ctx.op.Less(d, one), near, ctx.op.Where(ctx.op.Less(d, ctx.const(2.0, f64)), far, ctx.const(0.0, f64)))
    w = ctx.op.Where(inside, w, ctx.const(0.0, f64))
    total = ctx.op.ReduceSum(w, ctx.const([1], i64), keepdims=1)
    w = ctx.op.Div(w, ctx.op.Where(ctx.op.Equal(total, ctx.const(0.0, f64)), one, total))  # [out, in]
    letters = "abcdefgh"[:rank]
    source = letters
    target = letters[:axis] + "z" + letters[axis + 1:]
    return ctx.op.Einsum(w, x, equation=f"z{letters[axis]},{source}->{target}")


def _resize_axis(ctx, x, axis: int, rank: int, size, factor: float | None, mode: str, transform: str):
    f64, i64 = torch.float64, torch.int64
    length = ctx.dim_size(x, axis)
    last = ctx.op.Sub(length, ctx.const(1, i64))
    in_f, out_f = ctx.cast(length, f64), ctx.cast(size, f64)
    j = _positions(ctx, size)
    if transform == "align_corners":  # (in - 1) / (out - 1), 0 for one output
        ratio = ctx.op.Div(ctx.op.Sub(in_f, ctx.const(1.0, f64)), ctx.op.Max(ctx.op.Sub(out_f, ctx.const(1.0, f64)), ctx.const(1.0, f64)))
        source = ctx.op.Mul(j, ratio)
    else:
        ratio = _input_per_output(ctx, in_f, out_f, factor)
        if mode == "nearest":  # floor(j * ratio) or, nearest-exact, floor((j + 0.5) * ratio)
            shifted = ctx.op.Add(j, ctx.const(0.5, f64)) if transform == "half_pixel" else j
            index = ctx.op.Min(ctx.cast(ctx.op.Floor(ctx.op.Mul(shifted, ratio)), i64), last)
            return ctx.op.Gather(x, index, axis=axis)
        source = ctx.op.Sub(ctx.op.Mul(ctx.op.Add(j, ctx.const(0.5, f64)), ratio), ctx.const(0.5, f64))
        if mode == "linear":  # torch clamps negative source coordinates of linear modes to 0
            source = ctx.op.Max(source, ctx.const(0.0, f64))
    floor = ctx.op.Floor(source)
    t = ctx.op.Sub(source, floor)
    base = ctx.cast(floor, i64)
    trailing = ctx.const([-1] + [1] * (rank - 1 - axis), i64)

    def tap(offset: int, weight):
        index = ctx.op.Min(ctx.op.Max(ctx.op.Add(base, ctx.const(offset, i64)), ctx.const(0, i64)), last)
        return ctx.op.Mul(ctx.op.Gather(x, index, axis=axis), ctx.op.Reshape(weight, trailing))

    one = ctx.const(1.0, f64)
    if mode == "linear":
        return ctx.op.Add(tap(0, ctx.op.Sub(one, t)), tap(1, t))
    a = -0.75  # cubic convolution of torch's bicubic
    weights = [_cubic_far(ctx, ctx.op.Add(t, one), a), _cubic_near(ctx, t, a), _cubic_near(ctx, ctx.op.Sub(one, t), a),
               _cubic_far(ctx, ctx.op.Sub(ctx.const(2.0, f64), t), a)]
    terms = [tap(offset, w) for offset, w in zip((-1, 0, 1, 2), weights)]
    return ctx.op.Sum(*terms)


def _float_tuple(values: Any, n: int) -> list[float]:
    if isinstance(values, (list, tuple)):
        return [float(v) for v in values] if len(values) == n else [float(values[0])] * n
    return [float(values)] * n


def _scales_from_args(scales: Sequence[Any], n: int) -> list[float] | None:
    """The ``scales_h``, ``scales_w``... arguments of the ``.default`` overloads (None when absent)."""
    values = [s for s in scales[:n] if s is not None]
    return [float(v) for v in values] if len(values) == n else None


def _agreeing_scales(ctx, node, output_size, scales: Sequence[Any], n: int) -> list[float] | None:
    """The scales of a ``.default`` overload, which map the coordinates, when they give ``output_size``
    (``interpolate(scale_factor=...)`` passes both, the size computed from the scales); an ONNX Resize takes
    a size or scales, not both: a size the scales do not give is refused rather than resampled otherwise."""
    factors = _scales_from_args(scales, n)
    if factors is None or output_size is None:
        return factors
    sizes = list(node.args[0].meta["val"].shape[-n:])
    # a fixed output size from a dynamic input is no floor(input * scale) for every input
    if any(isinstance(o, int) and (not isinstance(i, int) or math.floor(i * f) != o) for i, f, o in zip(sizes, factors, output_size)):
        raise ctx.error(
            f"output size {list(output_size)} and scales {factors} disagree for an input of size {sizes}: "
            f"ONNX's Resize takes one of them (call interpolate with a size or with scale_factor)."
        )
    return factors


def _make_upsample_nearest(n: int, exact: bool):
    transform, nearest_mode = ("half_pixel", "round_prefer_ceil") if exact else ("asymmetric", "floor")

    def convert_upsample_nearest_vec(ctx, node, x, output_size, scale_factors):
        return _resize(ctx, x, output_size, scale_factors, n, "nearest", transform, nearest_mode)

    def convert_upsample_nearest(ctx, node, x, output_size, *scales):
        # torch maps coordinates with the given scales when there are some, as Resize does
        factors = _scales_from_args(scales, n)
        return _resize(ctx, x, None if factors else output_size, factors, n, "nearest", transform, nearest_mode)

    return convert_upsample_nearest_vec, convert_upsample_nearest


for _n, _name in ((1, "1d"), (2, "2d"), (3, "3d")):
    for _exact, _prefix in ((False, "upsample_nearest"), (True, "_upsample_nearest_exact")):
        _packet = getattr(aten, f"{_prefix}{_name}")
        _vec, _default = _make_upsample_nearest(_n, _exact)
        converter(_packet.vec)(_vec)
        converter(_packet.default)(_default)


def _make_upsample_interp(n: int, mode: str):
    # torch maps an output of size 1 on the center of the input: half_pixel does,
    # pytorch_half_pixel maps it on 0 (older torch versions)
    def convert_upsample_vec(ctx, node, x, output_size, align_corners, scale_factors):
        transform = "align_corners" if align_corners else "half_pixel"
        return _resize(ctx, x, output_size, scale_factors, n, mode, transform)

    def convert_upsample(ctx, node, x, output_size, align_corners, *scales):
        transform = "align_corners" if align_corners else "half_pixel"
        factors = None if align_corners else _agreeing_scales(ctx, node, output_size, scales, n)
        return _resize(ctx, x, None if factors else output_size, factors, n, mode, transform)

    return convert_upsample_vec, convert_upsample


for _n, _op_name, _mode in (
    (1, "upsample_linear1d", "linear"),
    (2, "upsample_bilinear2d", "linear"),
    (3, "upsample_trilinear3d", "linear"),
    (2, "upsample_bicubic2d", "cubic"),
):
    _packet = getattr(aten, _op_name)
    _vec, _default = _make_upsample_interp(_n, _mode)
    converter(_packet.vec)(_vec)
    converter(_packet.default)(_default)


def _make_upsample_antialias(mode: str):
    def convert_upsample_antialias(ctx, node, x, output_size, align_corners, scale_factors):
        # torch's antialiased resampling uses half-pixel centers (align_corners=False)
        if align_corners:
            raise ctx.error("antialias=True with align_corners=True is not supported.")
        return _resize(ctx, x, output_size, scale_factors, 2, mode, "half_pixel", antialias=True)

    def convert_upsample_antialias_default(ctx, node, x, output_size, align_corners, *scales):
        factors = None if align_corners else _agreeing_scales(ctx, node, output_size, scales, 2)
        return convert_upsample_antialias(ctx, node, x, None if factors else output_size, align_corners, factors)

    return convert_upsample_antialias, convert_upsample_antialias_default


for _packet, _mode in ((aten._upsample_bilinear2d_aa, "linear"), (aten._upsample_bicubic2d_aa, "cubic")):
    _vec, _default = _make_upsample_antialias(_mode)
    converter(_packet.vec)(_vec)
    converter(_packet.default)(_default)


_GRID_MODES = {0: ("bilinear", "linear"), 1: ("nearest", "nearest"), 2: ("bicubic", "cubic")}
_GRID_PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}


@converter(aten.grid_sampler.default, aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def convert_grid_sampler(ctx, node, x, grid, interpolation_mode, padding_mode, align_corners):
    rank = input_rank(ctx)
    if rank == 5 and ctx.opset < 20:
        raise ctx.error("grid_sample of a volume (N, C, D, H, W) needs GridSample-20: export with target_opset >= 20.")
    if rank not in (4, 5):
        raise ctx.error("grid_sample is supported on 4D (N, C, H, W) and 5D (N, C, D, H, W) inputs.")
    mode = _GRID_MODES[int(interpolation_mode)][0 if ctx.opset < 20 else 1]
    return ctx.op.GridSample(
        x, grid, mode=mode, padding_mode=_GRID_PADDINGS[int(padding_mode)], align_corners=int(bool(align_corners))
    )


def _normalized_coordinates(size: int, align_corners: bool) -> np.ndarray:
    if size <= 1:
        return np.zeros((max(size, 1),), dtype=np.float64)
    steps = np.linspace(-1.0, 1.0, size)
    return steps if align_corners else steps * (size - 1) / size


@converter(aten.affine_grid_generator.default)
def convert_affine_grid_generator(ctx, node, theta, size, align_corners):
    # grid[n, h, w] = theta[n] @ (x_w, y_h, 1): a constant base grid times theta^T
    if len(size) != 4 or not all(isinstance(s, int) for s in size[2:]):
        raise ctx.error("affine_grid is supported for 2D grids (size N, C, H, W) with a static H and W.")
    height, width = int(size[2]), int(size[3])
    xs = _normalized_coordinates(width, bool(align_corners))
    ys = _normalized_coordinates(height, bool(align_corners))
    base = np.stack([np.tile(xs, height), np.repeat(ys, width), np.ones(height * width)], axis=1)  # [H * W, 3]
    dtype = ctx.out_dtype()
    grid = ctx.op.MatMul(ctx.const(base, dtype), ctx.op.Transpose(theta, perm=[0, 2, 1]))  # [N, H * W, 2]
    return ctx.op.Reshape(grid, ctx.const([0, height, width, 2], torch.int64))


# pixel shuffle
@converter(aten.pixel_shuffle.default)
def convert_pixel_shuffle(ctx, node, x, upscale_factor):
    if input_rank(ctx) not in (3, 4):
        raise ctx.error("pixel_shuffle is supported on 3D and 4D inputs.")
    x, unbatched = _add_batch(ctx, x, 2)
    y = ctx.op.DepthToSpace(x, blocksize=int(upscale_factor), mode="CRD")
    return _remove_batch(ctx, y, unbatched)


@converter(aten.pixel_unshuffle.default)
def convert_pixel_unshuffle(ctx, node, x, downscale_factor):
    # SpaceToDepth orders the channels (block, channel); torch orders them (channel, block)
    if input_rank(ctx) not in (3, 4):
        raise ctx.error("pixel_unshuffle is supported on 3D and 4D inputs.")
    x, unbatched = _add_batch(ctx, x, 2)
    r = int(downscale_factor)
    n_c = ctx.op.Shape(x, start=0, end=2)
    h = ctx.op.Div(ctx.op.Shape(x, start=2, end=3), ctx.const([r], torch.int64))
    w = ctx.op.Div(ctx.op.Shape(x, start=3, end=4), ctx.const([r], torch.int64))
    r1 = ctx.const([r], torch.int64)
    split = ctx.op.Reshape(x, ctx.op.Concat(n_c, h, r1, w, r1, axis=0))
    moved = ctx.op.Transpose(split, perm=[0, 1, 3, 5, 2, 4])
    out_shape = ctx.op.Concat(ctx.op.Shape(x, start=0, end=1), ctx.const([-1], torch.int64), h, w, axis=0)
    y = ctx.op.Reshape(moved, out_shape)
    return _remove_batch(ctx, y, unbatched)


@converter(aten.channel_shuffle.default, aten.native_channel_shuffle.default)
def convert_channel_shuffle(ctx, node, x, groups):
    # [N, C, *] -> [N, g, C / g, *] -> swap the two channel axes -> [N, C, *]
    rank = input_rank(ctx)
    g = int(groups)
    shape = ctx.op.Concat(
        ctx.op.Shape(x, start=0, end=1), ctx.const([g, -1], torch.int64), ctx.op.Shape(x, start=2), axis=0
    )
    split = ctx.op.Reshape(x, shape)
    perm = [0, 2, 1] + list(range(3, rank + 1))
    return ctx.op.Reshape(ctx.op.Transpose(split, perm=perm), ctx.op.Shape(x))


@converter(aten.rot90.default)
def convert_rot90(ctx, node, x, k=1, dims=(0, 1)):
    # k = 1: flip dims[1] then swap; k = 2: flip both; k = 3: swap then flip dims[1]
    rank = input_rank(ctx)
    d0, d1 = (d + rank if d < 0 else d for d in dims)
    k = int(k) % 4
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]

    def flip(v, axes):
        n = len(axes)
        return ctx.op.Slice(
            v,
            ctx.const([-1] * n, torch.int64),
            ctx.const([-(2**62)] * n, torch.int64),
            ctx.const(list(axes), torch.int64),
            ctx.const([-1] * n, torch.int64),
        )

    if k == 0:
        return ctx.op.Identity(x)
    if k == 1:
        return ctx.op.Transpose(flip(x, [d1]), perm=perm)
    if k == 2:
        return flip(x, [d0, d1])
    return flip(ctx.op.Transpose(x, perm=perm), [d1])
