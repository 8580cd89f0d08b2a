"""Qwen2-VL's multimodal rotary positions of a prompt, in numpy: what its ``get_rope_index`` computes.

A text token has the same position in the three rows (time, height, width), one more than the
token before it. The features of an image (a grid of ``t x h x w`` patches merged by blocks of
``merge_size x merge_size``) take the position of the token before them plus one in every row,
plus their frame in the first row, their row of merged patches in the second and their column in
the third; the text after the image starts at the first of them plus the larger side of the
merged grid. The exported decoder of a Qwen2-VL folder takes these rows as its ``position_ids``
``(3, batch, seq)`` (:mod:`fx2onnx.deploy.qwen_vl`): they read the grid's values, so the loop
computes them, once per prompt; the later tokens follow the largest position
(:meth:`fx2onnx.runtime.OnnxGenerator.generate`).

.. code-block:: python

    from fx2onnx.runtime.mrope import rope_index
    positions = rope_index(inputs["input_ids"], inputs["image_grid_thw"], image_token_id=151655,
                           merge_size=2, attention_mask=inputs["attention_mask"])
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def _runs(types: np.ndarray) -> list[tuple[int, int, int]]:
    """``(type, start, end)`` of every run of equal values."""
    if types.size == 0:
        return []
    edges = np.flatnonzero(np.diff(types)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [types.size]])
    return [(int(types[s]), int(s), int(e)) for s, e in zip(starts, ends)]


def rope_index(
    input_ids: np.ndarray,
    image_grid_thw: np.ndarray | None,
    image_token_id: int,
    merge_size: int,
    attention_mask: np.ndarray | None = None,
    token_types: np.ndarray | None = None,
    video_grid_thw: np.ndarray | None = None,
    video_token_id: int | None = None,
    frame_intervals: Sequence[float] | None = None,
    frames_apart: bool = False,
) -> np.ndarray:
    """The positions ``(3, batch, seq)`` int64 of prompts holding images and videos (0 on the pads).

    :param input_ids: ``(batch, seq)``, the processor's token ids, every image's (video's)
        placeholders one after the other
    :param image_grid_thw: ``(images, 3)``: the grid of patches of every image, in the order of
        their placeholders, prompt after prompt (None: no image)
    :param image_token_id: the placeholder of an image's features (when ``token_types`` is not given)
    :param merge_size: the side of the blocks of patches merged into one feature
    :param attention_mask: 0 on the pads (left or right)
    :param token_types: the processor's ``mm_token_type_ids`` (1 on the image placeholders, 2 on the
        video ones)
    :param video_grid_thw: ``(videos, 3)``: the grid of every video (its first value: frames merged
        by the temporal patch)
    :param video_token_id: the placeholder of a video's features (when ``token_types`` is not given)
    :param frame_intervals: per video, the time positions between two of its temporal patches
        (Qwen2.5-VL: ``tokens_per_second * second_per_grid_ts``); 1 when None (Qwen2-VL)
    :param frames_apart: every temporal patch of a video is a grid of its own (Qwen3-VL: the
        processor writes a timestamp between them, the placeholders of each patch a run apart)
    """
    ids = np.asarray(input_ids)
    batch, length = ids.shape
    mask = np.ones(ids.shape, dtype=bool) if attention_mask is None else np.asarray(attention_mask).astype(bool)
    if token_types is None:
        types = (ids == image_token_id).astype(np.int64)
        if video_token_id is not None:
            types[ids == video_token_id] = 2
    else:
        types = np.asarray(token_types)
    grids = {kind: [tuple(int(v) for v in g) for g in np.asarray(thw).reshape(-1, 3)] if thw is not None else []
             for kind, thw in ((1, image_grid_thw), (2, video_grid_thw))}
    if frames_apart:
        grids[2] = [(1, h, w) for t, h, w in grids[2] for _ in range(t)]
        frame_intervals = None
    intervals = list(frame_intervals) if frame_intervals is not None else [1.0] * len(grids[2])
    used = {1: 0, 2: 0}
    names = {1: "image", 2: "video"}
    positions = np.zeros((3, batch, length), dtype=np.int64)
    for b in range(batch):
        rows, current = [], 0
        for kind, start, end in _runs(types[b][mask[b]]):
            if kind == 0:
                rows.append(np.arange(end - start, dtype=np.int64)[None].repeat(3, axis=0) + current)
                current += end - start
                continue
            if kind not in grids:
                raise ValueError(f"Prompt {b} holds tokens of modality {kind}: images and videos only.")
            if used[kind] == len(grids[kind]):
                raise ValueError(f"Prompt {b} holds more {names[kind]}s than the {len(grids[kind])} grids given.")
            t, h, w = grids[kind][used[kind]]
            # the time positions of a video's temporal patches, spaced by its interval (float32 as torch's)
            step = np.float32(intervals[used[kind]]) if kind == 2 else np.float32(1)
            used[kind] += 1
            times = (np.arange(t, dtype=np.float32) * step).astype(np.int64)
            frames, height, width = np.meshgrid(times, np.arange(h // merge_size), np.arange(w // merge_size),
                                                indexing="ij")
            if frames.size != end - start:
                raise ValueError(f"{names[kind].capitalize()} {used[kind] - 1} of grid {(t, h, w)} has {frames.size} "
                                 f"features but {end - start} placeholders: give the processor's input_ids and "
                                 f"{names[kind]}_grid_thw.")
            rows.append(np.stack([frames, height, width]).reshape(3, -1).astype(np.int64) + current)
            current += max(h, w) // merge_size
        if rows:
            positions[:, b, mask[b]] = np.concatenate(rows, axis=1)
    for kind, name in names.items():
        if used[kind] != len(grids[kind]):
            raise ValueError(f"{len(grids[kind])} {name} grids for {used[kind]} {name}s in the prompts.")
    return positions


def rope_index_of(inputs: dict[str, Any], image_token_id: int, merge_size: int, video_token_id: int | None = None,
                  tokens_per_second: float | None = None, frames_apart: bool = False) -> np.ndarray:
    """:func:`rope_index` of a processor's outputs (``input_ids``, ``image_grid_thw``, and
    ``attention_mask``, ``mm_token_type_ids``, ``video_grid_thw``, ``second_per_grid_ts`` when it gives
    them); ``tokens_per_second``: Qwen2.5-VL's time positions per second of video (None: one per
    temporal patch, Qwen2-VL); ``frames_apart``: Qwen3-VL's temporal patches, each a grid of its own."""
    videos = inputs.get("video_grid_thw")
    intervals = None
    if videos is not None and tokens_per_second is not None:
        seconds = inputs.get("second_per_grid_ts")
        seconds = np.ones(len(videos), dtype=np.float32) if seconds is None else np.asarray(seconds, dtype=np.float32)
        intervals = [np.float32(tokens_per_second) * s for s in seconds.reshape(-1)]
    return rope_index(inputs["input_ids"], inputs.get("image_grid_thw"), image_token_id, merge_size,
                      inputs.get("attention_mask"), inputs.get("mm_token_type_ids"), videos, video_token_id, intervals,
                      frames_apart)
