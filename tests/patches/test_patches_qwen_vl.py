"""Qwen2-VL's vision attention over all images with a block-diagonal mask (fx2onnx.patches.qwen_vl) against the
original's attention per image, and the patches' positions and Qwen2.5-VL's windows computed from the grid as
tensors (fx2onnx.deploy.qwen_vl) against transformers' functions, on eager."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import fx2onnx  # noqa: E402
from fx2onnx.deploy.qwen_vl import grid_positions, interpolation_positions, window_positions  # noqa: E402
from fx2onnx.testing import vlm_folder  # noqa: E402
from fx2onnx.patches.qwen_vl import block_diagonal_bias, segment_ids  # noqa: E402

#: images of different sizes (rows, columns of patches, even: 2x2 patches merge into one feature)
GRIDS = [[1, 4, 6], [1, 2, 2], [1, 6, 4]]


def _vision(family, seed=0):
    config = getattr(vlm_folder, f"tiny_{family}_config")()
    torch.manual_seed(seed)
    return getattr(transformers, config.architectures[0])(config).eval().model.visual, config


def test_segments_and_mask():
    cu = torch.tensor([0, 2, 5, 6], dtype=torch.int32)
    assert segment_ids(cu, 6).tolist() == [0, 0, 1, 1, 1, 2]
    bias = block_diagonal_bias(cu, 6, torch.float32)
    assert (bias == 0).sum() == 4 + 9 + 1 and bias.min() == torch.finfo(torch.float32).min


@pytest.mark.parametrize("family,implementation", [("qwen2_vl", "sdpa"), ("qwen2_vl", "eager"),
                                                   ("qwen2_5_vl", "sdpa"), ("qwen3_vl", "sdpa")])
def test_patched_attention_is_one_attention_per_image(family, implementation):
    """Qwen2.5-VL: its first block attends within windows (of 2x2 merged features), the second per image."""
    visual, config = _vision(family)
    visual.config._attn_implementation = implementation
    grid = torch.tensor(GRIDS)
    vision = config.vision_config
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    pixels = torch.randn(int(grid.prod(-1).sum()), width, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = visual(pixels, grid_thw=grid).pooler_output
        with fx2onnx.torch_export_patches(patch_transformers=True) as patched:
            assert patched is not None
            got = visual(pixels, grid_thw=grid).pooler_output
        assert type(visual.blocks[0].attn).forward.__name__ == "forward"  # restored
    assert got.shape == (sum(t * h * w for t, h, w in GRIDS) // 4, config.text_config.hidden_size)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # the mask matters: one attention over every patch, the images' boundaries dropped, gives other features
    with torch.no_grad():
        whole = torch.tensor([0, pixels.shape[0]], dtype=torch.int32)
        one = visual(pixels, grid_thw=grid, cu_seqlens=whole).pooler_output
    assert (one - expected).abs().max() > 1e-3


def test_grid_positions_are_transformers_ones():
    from transformers.vision_utils import get_vision_cu_seqlens, get_vision_position_ids

    grid = torch.tensor(GRIDS)
    positions, cu = grid_positions(grid, int(grid.prod(-1).sum()), 2)
    assert torch.equal(positions, get_vision_position_ids(grid, 2))
    assert torch.equal(cu, get_vision_cu_seqlens(grid)) and cu.dtype == torch.int32


@pytest.mark.parametrize("window", [2, 3])
def test_window_positions_are_transformers_ones(window):
    from transformers.vision_utils import get_vision_window_index

    grid = torch.tensor(GRIDS + [[1, 10, 8]])
    patch = 4
    expected_index, expected_cu = get_vision_window_index(grid, 2, window * 2 * patch, patch)
    index, cu = window_positions(grid, int(grid.prod(-1).sum()), 2, window)
    assert torch.equal(index, expected_index)
    assert torch.equal(cu, expected_cu) and cu.dtype == torch.int32


def test_interpolation_positions_are_transformers_ones():
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights

    grid = torch.tensor(GRIDS + [[1, 10, 8]])
    expected_indices, expected_weights = get_vision_interpolation_indices_and_weights(
        grid, num_grid_per_side=4, mode="bilinear", align_corners=True, spatial_merge_size=2)
    indices, weights = interpolation_positions(grid, int(grid.prod(-1).sum()), 2, 4)
    assert torch.equal(indices, expected_indices)
    torch.testing.assert_close(weights, expected_weights, atol=0, rtol=0)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_patched_image_features_are_the_original_ones_in_one_entry(family):
    """``get_image_features`` patched: one entry holding every image's features (and each deepstack level's),
    equal to the concatenation of the original's per-image split, the tower's positions computed from the grid."""
    config = getattr(vlm_folder, f"tiny_{family}_config")()
    torch.manual_seed(0)
    model = getattr(transformers, config.architectures[0])(config).eval().model
    grid = torch.tensor(GRIDS)
    vision = config.vision_config
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    pixels = torch.randn(int(grid.prod(-1).sum()), width, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model.get_image_features(pixels, grid, return_dict=True)
        with fx2onnx.torch_export_patches(patch_transformers=True):
            got = model.get_image_features(pixels, grid, return_dict=True)
    assert len(expected.pooler_output) == len(GRIDS) and len(got.pooler_output) == 1
    torch.testing.assert_close(got.pooler_output[0], torch.cat(expected.pooler_output), atol=1e-5, rtol=1e-5)
    for level, level_expected in zip(getattr(got, "deepstack_features", None) or [],
                                     getattr(expected, "deepstack_features", None) or []):
        assert len(level) == 1
        torch.testing.assert_close(level[0], torch.cat(level_expected), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"])
def test_task_row_matches_with_a_dynamic_number_of_images(family):
    """The task zoo's row (one image per prompt, dynamic batch 2, checked on a batch of 3): the number of images
    stayed dynamic (it was fixed to 2 by tolist()), the multimodal positions an input computed by get_rope_index."""
    from fx2onnx.zoo.library_zoo import run_row

    row = run_row("tasks", f"image-text-to-text/{family}", family, "to_onnx", "batch")
    assert row["success"], row
    assert row["max_abs"] < 1e-4
