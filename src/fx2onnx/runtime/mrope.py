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

from typing import Any

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
    image_grid_thw: np.ndarray,
    image_token_id: int,
    merge_size: int,
    attention_mask: np.ndarray | None = None,
    token_types: np.ndarray | None = None,
) -> np.ndarray:
    """The positions ``(3, batch, seq)`` int64 of prompts holding images (0 on the pads).

    :param input_ids: ``(batch, seq)``, the processor's token ids, every image's placeholders
        one after the other
    :param image_grid_thw: ``(images, 3)``: the grid of patches of every image, in the order of
        their placeholders, prompt after prompt
    :param image_token_id: the placeholder of an image's features (when ``token_types`` is not given)
    :param merge_size: the side of the blocks of patches merged into one feature
    :param attention_mask: 0 on the pads (left or right)
    :param token_types: the processor's ``mm_token_type_ids`` (1 on the image placeholders)
    """
    ids = np.asarray(input_ids)
    batch, length = ids.shape
    mask = np.ones(ids.shape, dtype=bool) if attention_mask is None else np.asarray(attention_mask).astype(bool)
    types = (ids == image_token_id).astype(np.int64) if token_types is None else np.asarray(token_types)
    grids = [tuple(int(v) for v in g) for g in np.asarray(image_grid_thw).reshape(-1, 3)]
    used = 0
    positions = np.zeros((3, batch, length), dtype=np.int64)
    for b in range(batch):
        rows, current = [], 0
        for kind, start, end in _runs(types[b][mask[b]]):
            if kind == 0:
                rows.append(np.arange(end - start, dtype=np.int64)[None].repeat(3, axis=0) + current)
                current += end - start
                continue
            if kind != 1 or used == len(grids):
                raise ValueError(f"Prompt {b} holds more images than the {len(grids)} grids given"
                                 if kind == 1 else f"Prompt {b} holds tokens of modality {kind}: images only.")
            t, h, w = grids[used]
            used += 1
            frames, height, width = np.meshgrid(np.arange(t), np.arange(h // merge_size), np.arange(w // merge_size),
                                                indexing="ij")
            if frames.size != end - start:
                raise ValueError(f"Image {used - 1} of grid {(t, h, w)} has {frames.size} features but {end - start} "
                                 "placeholders: give the processor's input_ids and image_grid_thw.")
            rows.append(np.stack([frames, height, width]).reshape(3, -1).astype(np.int64) + current)
            current += max(h, w) // merge_size
        if rows:
            positions[:, b, mask[b]] = np.concatenate(rows, axis=1)
    if used != len(grids):
        raise ValueError(f"{len(grids)} image grids for {used} images in the prompts.")
    return positions


def rope_index_of(inputs: dict[str, Any], image_token_id: int, merge_size: int) -> np.ndarray:
    """:func:`rope_index` of a processor's outputs (``input_ids``, ``image_grid_thw``, and
    ``attention_mask``, ``mm_token_type_ids`` when it gives them)."""
    return rope_index(inputs["input_ids"], inputs["image_grid_thw"], image_token_id, merge_size,
                      inputs.get("attention_mask"), inputs.get("mm_token_type_ids"))
