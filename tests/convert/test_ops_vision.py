"""Converters of vision layers: convolutions, norms, pooling, upsampling, padding, pixel shuffle."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import Fn, check_export
from torch import nn

import fx2onnx


def _randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape) * 7 + shape[-1]))


def _check_dynamic_batch(model, shape, batch2=3, **kwargs):
    """Exports with a dynamic batch (first) dimension and checks a second batch size."""
    torch.manual_seed(0)
    x = _randn(*shape)
    x2 = _randn(batch2, *shape[1:])
    return check_export(model, (x,), dynamic_shapes=({0: "batch"},), inputs2=((x2,), None), **kwargs)


CONVS = {
    "conv1d": (nn.Conv1d(3, 4, 3), (2, 3, 10)),
    "conv1d_stride_pad_dil": (nn.Conv1d(3, 4, 3, stride=2, padding=2, dilation=2), (2, 3, 11)),
    "conv1d_same": (nn.Conv1d(3, 4, 4, padding="same"), (2, 3, 10)),
    "conv2d": (nn.Conv2d(3, 4, 3, padding=1), (2, 3, 8, 8)),
    "conv2d_same_dil": (nn.Conv2d(3, 4, (3, 4), padding="same", dilation=(1, 2)), (2, 3, 8, 9)),
    "conv2d_valid": (nn.Conv2d(3, 4, 3, padding="valid"), (2, 3, 8, 8)),
    "conv2d_groups_nobias": (nn.Conv2d(4, 8, 3, groups=2, stride=(2, 1), bias=False), (2, 4, 9, 8)),
    "conv2d_depthwise": (nn.Conv2d(4, 4, 3, groups=4, padding=(1, 2)), (2, 4, 7, 7)),
    "conv3d": (nn.Conv3d(2, 3, 3, padding=1), (2, 2, 5, 5, 5)),
    "convt1d": (nn.ConvTranspose1d(3, 4, 3, stride=2), (2, 3, 6)),
    "convt2d": (nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1), (2, 3, 5, 5)),
    "convt2d_groups_dil": (nn.ConvTranspose2d(4, 6, 3, groups=2, dilation=2, bias=False), (2, 4, 5, 5)),
    "convt3d": (nn.ConvTranspose3d(2, 3, 2, stride=2), (2, 2, 3, 3, 3)),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_convolutions(name):
    model, shape = CONVS[name]
    _check_dynamic_batch(model, shape)


def test_conv2d_unbatched_and_dynamic_spatial():
    model = nn.Conv2d(3, 4, 3, padding=1)
    check_export(model, (_randn(3, 8, 8),))
    x, x2 = _randn(2, 3, 8, 9), _randn(1, 3, 5, 12)
    check_export(model, (x,), dynamic_shapes=({0: "batch", 2: "h", 3: "w"},), inputs2=((x2,), None))


NORMS = {
    "batchnorm2d": (nn.BatchNorm2d(3), (4, 3, 5, 5)),
    "batchnorm1d_2d_input": (nn.BatchNorm1d(3), (4, 3)),
    "batchnorm1d_3d_input": (nn.BatchNorm1d(3), (4, 3, 6)),
    "batchnorm3d_no_affine": (nn.BatchNorm3d(3, affine=False), (2, 3, 3, 3, 3)),
    "batchnorm_no_running_stats": (nn.BatchNorm2d(3, track_running_stats=False), (4, 3, 5, 5)),
    "groupnorm": (nn.GroupNorm(2, 4), (3, 4, 5, 5)),
    "groupnorm_no_affine_1d": (nn.GroupNorm(3, 6, affine=False), (3, 6, 7)),
    "instancenorm2d": (nn.InstanceNorm2d(3), (2, 3, 5, 5)),
    "instancenorm1d_affine": (nn.InstanceNorm1d(3, affine=True), (2, 3, 8)),
    "instancenorm_running_stats": (nn.InstanceNorm2d(3, affine=True, track_running_stats=True), (2, 3, 5, 5)),
}


def _randomize(model: nn.Module) -> nn.Module:
    """Non-trivial weights and running statistics so that every term is tested."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
        for name, b in model.named_buffers():
            if "running" in name:
                b.copy_(torch.rand(b.shape, generator=gen) + (0.5 if "var" in name else -0.5))
    return model.eval()


@pytest.mark.parametrize("name", list(NORMS))
def test_normalizations(name):
    model, shape = NORMS[name]
    _check_dynamic_batch(_randomize(model), shape)


POOLS = {
    "maxpool1d": (nn.MaxPool1d(3, stride=2, padding=1), (2, 3, 9)),
    "maxpool2d": (nn.MaxPool2d(2), (2, 3, 8, 8)),
    "maxpool2d_pad_dil_ceil": (nn.MaxPool2d(3, stride=2, padding=1, dilation=2, ceil_mode=True), (2, 3, 10, 9)),
    "maxpool3d": (nn.MaxPool3d(2, stride=1), (2, 2, 4, 4, 4)),
    "maxpool1d_ceil": (nn.MaxPool1d(3, stride=2, padding=1, ceil_mode=True), (2, 3, 10)),
    "maxpool3d_ceil_pad": (nn.MaxPool3d(3, stride=2, padding=1, ceil_mode=True), (2, 2, 6, 5, 4)),
    "avgpool1d_ceil_count_pad": (nn.AvgPool1d(3, stride=2, padding=1, ceil_mode=True), (2, 3, 10)),
    "avgpool3d_ceil_no_count": (
        nn.AvgPool3d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        (2, 2, 6, 5, 4),
    ),
    "avgpool1d": (nn.AvgPool1d(3, stride=2, padding=1), (2, 3, 9)),
    "avgpool2d": (nn.AvgPool2d(2), (2, 3, 8, 8)),
    "avgpool2d_no_pad_count": (nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), (2, 3, 8, 8)),
    "avgpool2d_ceil": (nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), (2, 3, 8, 8)),
    "avgpool2d_ceil_count_pad": (nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True), (2, 3, 8, 8)),
    "avgpool2d_divisor": (nn.AvgPool2d(2, padding=1, divisor_override=3), (2, 3, 6, 6)),
    "avgpool3d": (nn.AvgPool3d(2), (2, 2, 4, 4, 4)),
    "adaptive_avg_global": (nn.AdaptiveAvgPool2d(1), (2, 3, 7, 5)),
    "adaptive_avg_divisible": (nn.AdaptiveAvgPool2d((2, 4)), (2, 3, 8, 8)),
    "adaptive_avg_uneven": (nn.AdaptiveAvgPool2d((3, 5)), (2, 3, 8, 7)),
    "adaptive_avg1d_uneven": (nn.AdaptiveAvgPool1d(3), (2, 3, 8)),
    "adaptive_avg3d": (nn.AdaptiveAvgPool3d((1, 2, 3)), (2, 2, 4, 4, 5)),
    "adaptive_max2d": (nn.AdaptiveMaxPool2d((2, 4)), (2, 3, 8, 8)),
    "adaptive_max1d": (nn.AdaptiveMaxPool1d(1), (2, 3, 8)),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pooling(name):
    model, shape = POOLS[name]
    _check_dynamic_batch(model, shape)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_max_pool_with_indices(n):
    pool = [nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d][n - 1](2, stride=2, padding=1, return_indices=True)
    _check_dynamic_batch(pool, (2, 3) + (5,) * n)


def test_global_pools_dynamic_spatial():
    model = Fn(lambda x: F.adaptive_avg_pool2d(x, 1) + F.adaptive_max_pool2d(x, 1))
    x, x2 = _randn(2, 3, 8, 9), _randn(1, 3, 5, 4)
    check_export(model, (x,), dynamic_shapes=({0: "b", 2: "h", 3: "w"},), inputs2=((x2,), None))


@pytest.mark.parametrize("n,size,out", [(1, (7,), (3,)), (2, (5, 7), (3, 4)), (2, (4, 4), (3, 1)), (3, (5, 3, 4), (2, 2, 3))])
def test_adaptive_max_pool_uneven_windows_with_indices(n, size, out):
    # windows of different (overlapping) sizes; integer values repeat: the index is the first maximum
    pool = [nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d][n - 1](out, return_indices=True)
    x = torch.randint(0, 4, (2, 3, *size), generator=torch.Generator().manual_seed(n)).float()
    check_export(pool, (x,))
    check_export(pool, (x[0],))  # unbatched


def test_adaptive_max_pool_dynamic_spatial():
    pool = nn.AdaptiveMaxPool2d((3, 2), return_indices=True)
    check_export(pool, (_randn(2, 3, 8, 9),), dynamic_shapes=({0: "b", 2: "h", 3: "w"},), inputs2=((_randn(1, 3, 5, 4),), None))


@pytest.mark.parametrize("n,size", [(1, (7,)), (2, (6, 7)), (2, (8, 5)), (3, (5, 6, 7))])
def test_avg_pool_divisor_override_with_ceil_mode(n, size):
    # the last window hangs over the input: the sum of what it covers, divided by the override
    pool_fn = [F.avg_pool1d, F.avg_pool2d, F.avg_pool3d][n - 1]
    if n == 1:  # avg_pool1d has no divisor_override: the 2-D pool of a height-1 image
        model = Fn(lambda x: F.avg_pool2d(x.unsqueeze(2), (1, 3), (1, 2), (0, 1), ceil_mode=True, divisor_override=5))
    else:
        model = Fn(lambda x: pool_fn(x, 3, 2, 1, ceil_mode=True, divisor_override=5))
    check_export(model, (_randn(2, 3, *size),))
    spatial = {a: f"s{a}" for a in range(2, 2 + max(n, 2))} if n > 1 else {2: "s"}
    bigger = tuple(s + 3 for s in size)
    check_export(model, (_randn(2, 3, *size),), dynamic_shapes=({0: "b", **spatial},), inputs2=((_randn(1, 3, *bigger),), None))


UPSAMPLES = {
    "nearest2d_scale": (nn.Upsample(scale_factor=2), (2, 3, 4, 5)),
    "nearest2d_size": (nn.Upsample(size=(7, 9)), (2, 3, 4, 5)),
    "nearest2d_float_scale": (nn.Upsample(scale_factor=(1.5, 2.5)), (2, 3, 4, 5)),
    "nearest1d": (nn.Upsample(scale_factor=3), (2, 3, 4)),
    "nearest3d": (nn.Upsample(size=(3, 5, 6)), (2, 2, 2, 3, 4)),
    "nearest_exact": (Fn(lambda x: F.interpolate(x, size=(7, 9), mode="nearest-exact")), (2, 3, 4, 5)),
    "linear1d": (nn.Upsample(scale_factor=2, mode="linear"), (2, 3, 5)),
    "linear1d_align": (nn.Upsample(size=9, mode="linear", align_corners=True), (2, 3, 5)),
    "bilinear": (nn.Upsample(scale_factor=2, mode="bilinear"), (2, 3, 4, 5)),
    "bilinear_size": (nn.Upsample(size=(7, 3), mode="bilinear"), (2, 3, 4, 5)),
    "bilinear_align": (nn.Upsample(size=(7, 9), mode="bilinear", align_corners=True), (2, 3, 4, 5)),
    "bilinear_down": (Fn(lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear")), (2, 3, 8, 6)),
    "trilinear": (nn.Upsample(scale_factor=2, mode="trilinear"), (2, 2, 3, 3, 4)),
    "bicubic": (nn.Upsample(scale_factor=2, mode="bicubic"), (2, 3, 4, 5)),
    "bicubic_align": (nn.Upsample(size=(6, 7), mode="bicubic", align_corners=True), (2, 3, 4, 5)),
    "bicubic_down": (Fn(lambda x: F.interpolate(x, size=(5, 3), mode="bicubic")), (2, 3, 8, 7)),
    "nearest_down": (Fn(lambda x: F.interpolate(x, scale_factor=0.6)), (2, 3, 8, 7)),
    "nearest_exact_down": (Fn(lambda x: F.interpolate(x, size=(3, 5), mode="nearest-exact")), (2, 3, 8, 7)),
    "bilinear_align_down": (
        Fn(lambda x: F.interpolate(x, size=(3, 5), mode="bilinear", align_corners=True)),
        (2, 3, 8, 7),
    ),
    "bilinear_size_one": (Fn(lambda x: F.interpolate(x, size=(1, 4), mode="bilinear")), (2, 3, 8, 7)),
    "bicubic_size_one": (Fn(lambda x: F.interpolate(x, size=(3, 1), mode="bicubic")), (2, 3, 8, 7)),
    "linear_size_one": (Fn(lambda x: F.interpolate(x, size=1, mode="linear")), (2, 3, 8)),
}


@pytest.mark.parametrize("name", list(UPSAMPLES))
def test_upsampling(name):
    model, shape = UPSAMPLES[name]
    _check_dynamic_batch(model, shape)


def test_upsample_dynamic_spatial():
    model = Fn(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"))
    x, x2 = _randn(2, 3, 4, 5), _randn(1, 3, 6, 3)
    check_export(model, (x,), dynamic_shapes=({0: "batch", 2: "h", 3: "w"},), inputs2=((x2,), None))


PADS = {
    "constant2d": (nn.ConstantPad2d((1, 2, 3, 0), 0.5), (2, 3, 4, 5)),
    "constant_negative": (Fn(lambda x: F.pad(x, (-1, 2, 1, -2))), (2, 3, 4, 5)),
    "constant1d_last_only": (Fn(lambda x: F.pad(x, (2, 1), value=-3.0)), (2, 3, 4, 5)),
    "zero3d": (nn.ZeroPad3d(1), (2, 2, 3, 3, 3)),
    "reflect1d": (nn.ReflectionPad1d((2, 1)), (2, 3, 5)),
    "reflect2d": (nn.ReflectionPad2d((1, 2, 2, 1)), (2, 3, 4, 5)),
    "reflect3d": (nn.ReflectionPad3d(1), (2, 2, 3, 3, 3)),
    "replicate1d": (nn.ReplicationPad1d(2), (2, 3, 5)),
    "replicate2d": (nn.ReplicationPad2d((0, 1, 2, 3)), (2, 3, 4, 5)),
    "replicate3d": (nn.ReplicationPad3d(1), (2, 2, 3, 3, 3)),
    "circular2d": (nn.CircularPad2d((1, 2, 0, 1)), (2, 3, 4, 5)),
    "circular1d": (nn.CircularPad1d(2), (2, 3, 5)),
}


@pytest.mark.parametrize("name", list(PADS))
def test_padding(name):
    model, shape = PADS[name]
    _check_dynamic_batch(model, shape)


def test_pad_int_tensor():
    x = torch.arange(24, dtype=torch.int64).reshape(2, 3, 4)
    check_export(Fn(lambda x: F.pad(x, (1, 1), value=7)), (x,))


@pytest.mark.parametrize("name", ["shuffle", "unshuffle", "shuffle_unbatched"])
def test_pixel_shuffle(name):
    if name == "shuffle":
        _check_dynamic_batch(nn.PixelShuffle(2), (2, 8, 3, 4))
    elif name == "unshuffle":
        x, x2 = _randn(2, 3, 4, 6), _randn(1, 3, 6, 2)
        check_export(nn.PixelUnshuffle(2), (x,), dynamic_shapes=({0: "b", 2: "h", 3: "w"},), inputs2=((x2,), None))
    else:
        check_export(nn.PixelShuffle(3), (_randn(9, 2, 3),))


class SmallCNN(nn.Module):
    """conv + batch norm + relu + pooling, twice, then a linear classifier."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU6(),
            nn.AvgPool2d(2),
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(16, 10))

    def forward(self, x):
        return self.head(self.features(x))


class UNetLike(nn.Module):
    """Two levels of a UNet: down with max pooling, up with upsampling, padding to the skip's size."""

    def __init__(self):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(2, cout), nn.SiLU())

        self.down1, self.down2 = block(3, 8), block(8, 16)
        self.bottom = block(16, 16)
        self.up2 = nn.ConvTranspose2d(16, 16, 2, stride=2)
        self.dec2, self.dec1 = block(32, 8), block(16, 8)
        self.out = nn.Conv2d(8, 2, 1)

    @staticmethod
    def _match(x, skip):
        dh, dw = skip.shape[2] - x.shape[2], skip.shape[3] - x.shape[3]
        return F.pad(x, [dw // 2, dw - dw // 2, dh // 2, dh - dh // 2], mode="replicate")

    def forward(self, x):
        s1 = self.down1(x)
        s2 = self.down2(F.max_pool2d(s1, 2))
        b = self.bottom(F.max_pool2d(s2, 2))
        d2 = self.dec2(torch.cat([self._match(self.up2(b), s2), s2], dim=1))
        up = F.interpolate(d2, scale_factor=2.0, mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([self._match(up, s1), s1], dim=1))
        return self.out(d1)


def test_small_cnn():
    model = _randomize(SmallCNN())
    _check_dynamic_batch(model, (2, 3, 16, 16), batch2=5)


@pytest.mark.slow
def test_unet_like_static_and_dynamic():
    model = _randomize(UNetLike())
    x = _randn(2, 3, 16, 16)
    check_export(model, (x,))
    x2, x3 = _randn(2, 3, 16, 20), _randn(1, 3, 24, 12)
    check_export(model, (x2,), dynamic_shapes=({0: "batch", 2: "height", 3: "width"},), inputs2=((x3,), None))


def test_unet_uneven_input_needs_padding():
    # odd sizes: the decoder pads the upsampled maps to the skip connection's size
    model = _randomize(UNetLike())
    check_export(model, (_randn(1, 3, 18, 22),))


FOLDS = {
    "unfold": (nn.Unfold(2), (2, 3, 4, 5)),
    "unfold_stride_pad_dil": (nn.Unfold((2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), (2, 3, 6, 7)),
    "fold": (nn.Fold((4, 5), 2), (2, 12, 12)),
    "fold_stride_pad": (nn.Fold((6, 7), (2, 3), padding=1, stride=2), (2, 18, 16)),
}


@pytest.mark.parametrize("name", list(FOLDS))
def test_unfold_fold(name):
    model, shape = FOLDS[name]
    _check_dynamic_batch(model, shape)


def test_unfold_fold_round_trip_dynamic_spatial():
    model = Fn(lambda x: F.unfold(x, 3, padding=1).sum(1))
    x, x2 = _randn(2, 3, 5, 6), _randn(1, 3, 4, 9)
    check_export(model, (x,), dynamic_shapes=({0: "b", 2: "h", 3: "w"},), inputs2=((x2,), None))


@pytest.mark.parametrize("unbatched", [False, True])
def test_unfold_dynamic_channels(unbatched):
    """Every dimension dynamic, channels included: each channel is unfolded as an image of its own."""
    model = Fn(lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)))
    x, x2 = _randn(2, 3, 6, 7), _randn(3, 5, 5, 8)
    dims = {0: "b", 1: "c", 2: "h", 3: "w"}
    if unbatched:
        x, x2, dims = x[0], x2[0], {0: "c", 1: "h", 2: "w"}
    check_export(model, (x,), dynamic_shapes=(dims,), inputs2=((x2,), None))


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_upsample_default_overloads_with_scales(mode):
    # the .default overloads carry both the output size and the scales torch maps coordinates with
    if mode == "nearest":
        fn = lambda x: torch.ops.aten.upsample_nearest2d.default(x, [7, 12], 1.5, 2.5)  # noqa: E731
    elif mode == "bilinear":
        fn = lambda x: torch.ops.aten.upsample_bilinear2d.default(x, [7, 12], False, 1.5, 2.5)  # noqa: E731
    else:
        fn = lambda x: torch.ops.aten.upsample_bicubic2d.default(x, [7, 12], False, 1.5, 2.5)  # noqa: E731
    _check_dynamic_batch(Fn(fn), (2, 3, 5, 5))


EXTRA_SAMPLING = {
    "antialias_bilinear": (lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True), (2, 3, 8, 8)),
    "antialias_bicubic": (lambda x: F.interpolate(x, size=(5, 3), mode="bicubic", antialias=True), (2, 3, 8, 8)),
    "antialias_up_and_down": (lambda x: F.interpolate(x, size=(12, 5), mode="bilinear", antialias=True), (2, 3, 8, 8)),
    "area": (lambda x: F.interpolate(x, size=(3, 5), mode="area"), (2, 3, 8, 8)),
    "recompute_scale": (
        lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
        (2, 3, 8, 8),
    ),
    "local_response_norm": (nn.LocalResponseNorm(3), (2, 5, 6, 6)),
    "lp_pool": (nn.LPPool2d(2, 2), (2, 3, 8, 8)),
    "max_unpool": (lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2), (2, 3, 8, 8)),
    "max_unpool_output_size": (
        lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=(9, 9)),
        (2, 3, 9, 9),
    ),
}


@pytest.mark.parametrize("name", list(EXTRA_SAMPLING))
def test_extra_sampling(name):
    fn, shape = EXTRA_SAMPLING[name]
    _check_dynamic_batch(fn if isinstance(fn, nn.Module) else Fn(fn), shape)


class GridSample(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x, grid):
        return F.grid_sample(x, grid, **self.kwargs)


@pytest.mark.parametrize("opset", [18, 20])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample(mode, padding_mode, align_corners, opset):
    gen = torch.Generator().manual_seed(0)
    x, grid = torch.randn(2, 3, 6, 7, generator=gen), torch.rand(2, 5, 4, 2, generator=gen) * 2.4 - 1.2
    model = GridSample(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    check_export(model, (x, grid), target_opset=opset)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_volume(mode, padding_mode):
    # grid_sampler_3d: ONNX GridSample-20 samples N-D inputs
    gen = torch.Generator().manual_seed(0)
    x, grid = torch.randn(2, 3, 4, 6, 5, generator=gen), torch.rand(2, 3, 5, 4, 3, generator=gen) * 2.4 - 1.2
    model = GridSample(mode=mode, padding_mode=padding_mode, align_corners=False)
    x2, grid2 = torch.randn(1, 3, 5, 3, 4, generator=gen), torch.rand(1, 2, 2, 6, 3, generator=gen) * 2 - 1
    dyn = ({0: "n", 2: "d", 3: "h", 4: "w"}, {0: "n", 1: "od", 2: "oh", 3: "ow"})
    check_export(model, (x, grid), dynamic_shapes=dyn, inputs2=((x2, grid2), None), target_opset=20)
    with pytest.raises(fx2onnx.ConversionError, match="target_opset >= 20"):
        fx2onnx.to_onnx(model, (x, grid), target_opset=18)


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_then_sample(align_corners):
    class Warp(nn.Module):
        def forward(self, x, theta):
            grid = F.affine_grid(theta, [x.shape[0], 3, 5, 6], align_corners=align_corners)
            return grid, F.grid_sample(x, grid, align_corners=align_corners)

    gen = torch.Generator().manual_seed(0)
    x, theta = torch.randn(2, 3, 8, 8, generator=gen), torch.randn(2, 2, 3, generator=gen) * 0.5
    check_export(Warp(), (x, theta))


class ResidualSE(nn.Module):
    """A ResNet basic block followed by a MobileNetV3-like depthwise block with squeeze-excitation."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect", bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, padding_mode="circular", bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.depthwise = nn.Conv2d(8, 8, 5, stride=2, padding=2, groups=8)
        self.se_reduce, self.se_expand = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1)
        self.project = nn.Conv2d(8, 12, 1)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(x + self.bn2(self.conv2(h)))
        h = F.hardswish(self.depthwise(x))
        scale = F.hardsigmoid(self.se_expand(F.relu(self.se_reduce(F.adaptive_avg_pool2d(h, 1)))))
        return nn.Softmax2d()(self.project(h * scale))


@pytest.mark.slow
def test_residual_and_squeeze_excitation_blocks():
    model = _randomize(ResidualSE())
    x, x2 = _randn(2, 8, 10, 12), _randn(3, 8, 6, 8)
    check_export(model, (x,), dynamic_shapes=({0: "batch", 2: "h", 3: "w"},), inputs2=((x2,), None))


DECOMPOSED = {
    "small_cnn": (lambda: _randomize(SmallCNN()), (2, 3, 16, 16)),
    "unet_like": (lambda: _randomize(UNetLike()), (2, 3, 16, 16)),
    "residual_se": (lambda: _randomize(ResidualSE()), (2, 8, 10, 12)),
    "norms": (
        lambda: _randomize(nn.Sequential(nn.BatchNorm2d(3), nn.InstanceNorm2d(3, affine=True), nn.GroupNorm(1, 3))),
        (2, 3, 5, 5),
    ),
    "bn_no_stats": (lambda: _randomize(nn.BatchNorm2d(3, track_running_stats=False)), (2, 3, 5, 5)),
    "pads": (
        lambda: nn.Sequential(
            nn.ReflectionPad2d(1), nn.ReplicationPad2d((1, 0, 2, 1)), nn.CircularPad2d(1), nn.ConstantPad2d(1, 2.0)
        ),
        (2, 3, 4, 5),
    ),
    "pads_1d_3d": (lambda: nn.Sequential(nn.ReflectionPad1d(2), nn.ReplicationPad1d(1)), (2, 3, 5)),
    "pads_3d": (lambda: nn.Sequential(nn.ReflectionPad3d(1), nn.ReplicationPad3d(1)), (2, 2, 3, 3, 3)),
    "upsample_1d": (
        lambda: nn.Sequential(nn.Upsample(scale_factor=2), nn.Upsample(scale_factor=1.5, mode="linear")),
        (2, 3, 5),
    ),
    "upsample_3d": (
        lambda: nn.Sequential(nn.Upsample(scale_factor=2), nn.Upsample(size=(5, 7, 9), mode="trilinear")),
        (2, 2, 2, 3, 4),
    ),
    "nearest_exact": (lambda: Fn(lambda x: F.interpolate(x, scale_factor=1.7, mode="nearest-exact")), (2, 3, 4, 5)),
    "pools_3d": (lambda: nn.Sequential(nn.AdaptiveAvgPool3d((2, 3, 1)), nn.AdaptiveMaxPool3d(1)), (2, 2, 4, 6, 4)),
    "conv3d_same": (lambda: nn.Conv3d(2, 3, 3, padding="same"), (2, 2, 4, 4, 4)),
    "pixel_channel_shuffle": (lambda: nn.Sequential(nn.ChannelShuffle(2), nn.PixelShuffle(2)), (2, 8, 3, 3)),
}


#: the whole models of DECOMPOSED (seconds each): in the fast tier, small_cnn in core ATen only
MODELS = {"small_cnn", "unet_like", "residual_se"}


@pytest.mark.parametrize(
    "name,decompositions",
    [
        pytest.param(name, decompositions, marks=pytest.mark.slow)
        if name in MODELS and (name, decompositions) != ("small_cnn", "core")
        else (name, decompositions)
        for name in DECOMPOSED
        for decompositions in ["functional", "core"]
    ],
)
def test_lower_level_ops(name, decompositions):
    # an ExportedProgram given by the user may hold lower-level ops (functionalized or core ATen)
    torch.manual_seed(0)
    make, shape = DECOMPOSED[name]
    _check_dynamic_batch(make(), shape, decompositions={} if decompositions == "functional" else "core")


class TinyViT(nn.Module):
    """Patch embedding (strided conv), class token, position embedding, two encoder layers, head."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, 16))
        self.pos = nn.Parameter(torch.randn(1, 17, 16) * 0.1)
        layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, norm_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(16), nn.Linear(16, 10)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1) + self.pos
        return self.head(self.norm(self.encoder(tokens))[:, 0])


def test_tiny_vit():
    torch.manual_seed(0)
    _check_dynamic_batch(TinyViT().eval(), (2, 3, 16, 16), batch2=3)


@pytest.mark.parametrize("k,dims", [(1, (2, 3)), (2, (2, 3)), (3, (2, 3)), (-1, (3, 2)), (5, (1, 2)), (0, (2, 3))])
def test_rot90(k, dims):
    _check_dynamic_batch(Fn(lambda x: torch.rot90(x, k, dims)), (2, 3, 4, 5))


@pytest.mark.parametrize("opset", [20, 21, 23])
@pytest.mark.parametrize(
    "name",
    ["small_cnn", pytest.param("unet_like", marks=pytest.mark.slow), pytest.param("residual_se", marks=pytest.mark.slow)],
)
def test_models_other_opsets(name, opset):
    make, shape = DECOMPOSED[name]
    _check_dynamic_batch(make(), shape, target_opset=opset)


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_opsets(opset, affine):
    model = _randomize(nn.GroupNorm(3, 6, affine=affine, eps=1e-3))
    _check_dynamic_batch(model, (2, 6, 4, 5), target_opset=opset)


@pytest.mark.parametrize("kernel, stride, padding, dilation", [(2, 2, 0, 1), ((2, 3), (1, 2), 1, 1), (3, 2, 1, 2)])
def test_fold_of_a_dynamic_output_size(kernel, stride, padding, dilation):
    """unfold then fold back to the input's (dynamic) size, as MobileViT-v2 does; sizes where the
    blocks do not cover the image (the end padded with zeros) included."""

    def fold_back(x):
        patches = F.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)
        return F.fold(patches * 2, x.shape[-2:], kernel, dilation=dilation, padding=padding, stride=stride)

    x, x2 = _randn(2, 3, 8, 9), _randn(1, 3, 11, 7)
    check_export(Fn(fold_back), (x,), dynamic_shapes=({0: "b", 2: "h", 3: "w"},), inputs2=((x2,), None))


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_uint8_image_resampled_one_axis_at_a_time(mode):
    """torch resamples a uint8 image one axis at a time, the last first, rounding and clamping in between:
    a bicubic's negative lobes clamped after the first pass change the second (28 levels off before)."""
    from fx2onnx.validation import make_session, run_onnx

    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (1, 3, 90, 90), dtype=torch.uint8, generator=gen)
    x[..., ::7] = 255  # sharp edges: the cubic overshoots below 0 and above 255
    model = Fn(lambda t: F.interpolate(t, size=(40, 40), mode=mode, align_corners=False))
    onx = fx2onnx.to_onnx(model, (x,))
    got = torch.from_numpy(run_onnx(make_session(onx), (x,))[0]).int()
    diff = (got - model(x).int()).abs().max().item()
    assert diff <= 2, diff  # torch's fixed-point weights round a level or two apart


def test_resize_with_disagreeing_size_and_scales_is_refused():
    """An output size the scales do not give: ONNX's Resize takes one of them, the export says so."""
    model = Fn(lambda t: torch.ops.aten._upsample_bilinear2d_aa.default(t, [3, 3], False, 1.7, 0.9))
    with pytest.raises(Exception, match=r"output size \[3, 3\] and scales \[1.7, 0.9\] disagree"):
        fx2onnx.to_onnx(model, (torch.randn(1, 2, 10, 20),))
    agreeing = Fn(lambda t: torch.ops.aten._upsample_bilinear2d_aa.default(t, [5, 10], False, 0.5, 0.5))
    check_export(agreeing, (torch.randn(1, 2, 10, 20),))


@pytest.mark.parametrize("size", [1, 4, (2, 1)])
def test_adaptive_avg_pool_float64(size):
    """onnxruntime's pooling kernels are float32 only: float64 averages with ReduceMean / MatMul."""
    model = nn.AdaptiveAvgPool2d(size)
    x, x2 = torch.randn(2, 3, 8, 8, dtype=torch.float64), torch.randn(1, 3, 12, 8, dtype=torch.float64)
    check_export(model, (x,), dynamic_shapes=({0: "b", 2: "h"},), inputs2=((x2,), None), atol=1e-12)


def test_float32_and_uint8_resampling_has_no_float64():
    # onnxruntime-web has no float64 kernels: only a float64 image is resampled in float64 (its own dtype)
    antialiased = Fn(lambda x: F.interpolate(x, size=(3, 5), mode="bilinear", antialias=True))
    models = [UPSAMPLES["bicubic_down"][0], antialiased]
    images = [_randn(2, 3, 8, 7)] * 2
    models.append(Fn(lambda x: F.interpolate(x, size=(5, 3), mode="bicubic")))
    images.append(torch.randint(0, 255, (2, 3, 8, 7), dtype=torch.uint8))
    for model, x in zip(models, images):
        graph = fx2onnx.to_onnx(model, (x,)).graph
        assert not [n.op_type for n in graph.node for a in n.attribute if a.name == "to" and a.i == 11]
        assert all(i.data_type != 11 for i in graph.initializer)  # onnx.TensorProto.DOUBLE
    graph = fx2onnx.to_onnx(models[0], (images[0].double(),)).graph
    assert any(a.i == 11 for n in graph.node for a in n.attribute if a.name == "to")  # its own dtype
