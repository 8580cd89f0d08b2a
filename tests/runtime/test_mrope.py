"""Qwen2-VL's multimodal rotary positions computed in numpy (fx2onnx.runtime.mrope) against the model's own
get_rope_index, on prompts the processor made (images of different sizes, text between them, a padded batch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from fx2onnx.runtime.mrope import rope_index, rope_index_of  # noqa: E402


def _model():
    from fx2onnx.testing.vlm_folder import QWEN2_VL_TOKENS, tiny_qwen2_vl_config

    config = tiny_qwen2_vl_config(layers=1)
    for i, key in enumerate(QWEN2_VL_TOKENS):
        setattr(config, key, 500 + i)
    torch.manual_seed(0)
    return transformers.Qwen2VLForConditionalGeneration(config).eval().model, config


def _prompt(config, pieces):
    """Token ids: text tokens (ints) and images (grids between their markers)."""
    ids, grids = [], []
    for piece in pieces:
        if isinstance(piece, int):
            ids += list(range(10, 10 + piece))
        else:
            grids.append([1, *piece])
            ids += [config.vision_start_token_id] + [config.image_token_id] * (piece[0] * piece[1] // 4)
            ids += [config.vision_end_token_id]
    return ids, grids


def test_rope_index_is_get_rope_index():
    model, config = _model()
    one, grid_one = _prompt(config, [3, (4, 6), 2, (2, 2), 5])
    two, grid_two = _prompt(config, [(6, 4), 4])
    length = max(len(one), len(two))
    ids = np.zeros((2, length), dtype=np.int64)
    mask = np.zeros((2, length), dtype=np.int64)
    for row, prompt in enumerate((one, two)):  # left padded
        ids[row, length - len(prompt):], mask[row, length - len(prompt):] = prompt, 1
    grid = np.array(grid_one + grid_two)
    types = (ids == config.image_token_id).astype(np.int64)
    expected, deltas = model.get_rope_index(torch.from_numpy(ids), torch.from_numpy(types), torch.from_numpy(grid),
                                            attention_mask=torch.from_numpy(mask))
    got = rope_index(ids, grid, config.image_token_id, 2, mask)
    np.testing.assert_array_equal(got, expected.numpy())
    # the next token after each prompt: its largest position plus one, transformers' length plus rope delta
    np.testing.assert_array_equal(got.max(axis=(0, 2)) + 1, mask.sum(-1) + deltas[:, 0].numpy())
    dict_inputs = {"input_ids": ids, "image_grid_thw": grid, "attention_mask": mask, "mm_token_type_ids": types}
    np.testing.assert_array_equal(rope_index_of(dict_inputs, config.image_token_id, 2), got)


def test_rope_index_refuses_grids_that_do_not_match():
    model, config = _model()
    ids, grid = _prompt(config, [2, (4, 4), 1])
    with pytest.raises(ValueError, match="8 features but 4 placeholders"):
        rope_index(np.array([ids]), np.array([[1, 4, 8]]), config.image_token_id, 2)
    with pytest.raises(ValueError, match="2 image grids for 1 images"):
        rope_index(np.array([ids]), np.array(grid * 2), config.image_token_id, 2)


def test_rope_index_of_videos_is_get_rope_index():
    """Qwen2.5-VL: a video's temporal patches at time positions spaced by ``tokens_per_second *
    second_per_grid_ts``, beside an image, in a left-padded batch; Qwen2-VL's one per temporal patch."""
    from fx2onnx.testing.vlm_folder import QWEN2_VL_TOKENS, tiny_qwen2_5_vl_config, tiny_qwen2_vl_config

    for make, kind in ((tiny_qwen2_5_vl_config, transformers.Qwen2_5_VLForConditionalGeneration),
                       (tiny_qwen2_vl_config, transformers.Qwen2VLForConditionalGeneration)):
        config = make(layers=1)
        for i, key in enumerate(QWEN2_VL_TOKENS):
            setattr(config, key, 500 + i)
        torch.manual_seed(0)
        model = kind(config).eval().model
        start, end = config.vision_start_token_id, config.vision_end_token_id
        one = [10, 11, 12, start] + [config.image_token_id] * 6 + [end, 13, start] + [config.video_token_id] * 12 + \
            [end, 14]
        two = [15, start] + [config.video_token_id] * 4 + [end, 16, 17]
        length = len(one)
        ids = np.zeros((2, length), dtype=np.int64)
        mask = np.zeros((2, length), dtype=np.int64)
        for row, prompt in enumerate((one, two)):
            ids[row, length - len(prompt):], mask[row, length - len(prompt):] = prompt, 1
        types = (ids == config.image_token_id).astype(np.int64) + 2 * (ids == config.video_token_id)
        images, videos = np.array([[1, 4, 6]]), np.array([[3, 4, 4], [4, 2, 2]])
        seconds = np.array([0.5, 2.0], dtype=np.float32)
        tokens_per_second = getattr(config.vision_config, "tokens_per_second", None)
        extra = {"second_per_grid_ts": torch.from_numpy(seconds)} if tokens_per_second else {}
        expected, _ = model.get_rope_index(torch.from_numpy(ids), torch.from_numpy(types), torch.from_numpy(images),
                                           torch.from_numpy(videos), attention_mask=torch.from_numpy(mask), **extra)
        inputs = {"input_ids": ids, "attention_mask": mask, "image_grid_thw": images, "video_grid_thw": videos,
                  "second_per_grid_ts": seconds}
        got = rope_index_of(inputs, config.image_token_id, 2, config.video_token_id, tokens_per_second)
        np.testing.assert_array_equal(got, expected.numpy())
        assert (got[0] != got[1]).any()  # the time row differs from the height row on the video


def test_rope_index_of_qwen3_vl_videos_frame_by_frame():
    """Qwen3-VL: the processor writes a timestamp between the temporal patches of a video, each patch's
    placeholders a run of their own with a grid of one frame (``frames_apart``)."""
    from fx2onnx.testing.vlm_folder import QWEN2_VL_TOKENS, tiny_qwen3_vl_config

    config = tiny_qwen3_vl_config(layers=1)
    for i, key in enumerate(QWEN2_VL_TOKENS):
        setattr(config, key, 500 + i)
    torch.manual_seed(0)
    model = transformers.Qwen3VLForConditionalGeneration(config).eval().model
    video = config.video_token_id
    ids = np.array([[10, 11, 20, 21] + [video] * 4 + [22, 23] + [video] * 4 + [24, config.image_token_id] * 1 +
                     [12]], dtype=np.int64)
    ids[0, -2] = 13  # no image: text
    types = 2 * (ids == video).astype(np.int64)
    videos = np.array([[2, 4, 4]])  # two temporal patches of 2x2 merged features
    expected, _ = model.get_rope_index(torch.from_numpy(ids), torch.from_numpy(types), None, torch.from_numpy(videos))
    got = rope_index_of({"input_ids": ids, "video_grid_thw": videos, "mm_token_type_ids": types},
                        config.image_token_id, 2, video, frames_apart=True)
    np.testing.assert_array_equal(got, expected.numpy())
