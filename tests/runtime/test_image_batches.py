"""Images an image processor gives their own sizes (keeping each one's aspect ratio: ZoeDepth, TextNet, EoMT) run one
at a time: :func:`fx2onnx.runtime.vision.image_batches` gives one batch when the arrays stack, one per image else."""

from __future__ import annotations

import numpy as np
import PIL.Image
import transformers

from fx2onnx.runtime.vision import image_batches


def test_image_batches_split_images_of_other_sizes():
    processor = transformers.ZoeDepthImageProcessor(size={"height": 32, "width": 32}, ensure_multiple_of=8,
                                                    keep_aspect_ratio=True, do_pad=False)
    rng = np.random.default_rng(0)
    wide, tall = (rng.integers(0, 256, s, dtype=np.uint8) for s in ((30, 60, 3), (60, 30, 3)))
    batches = image_batches(processor, [wide, tall])
    assert [b["pixel_values"].shape for b in batches] == [(1, 3, 32, 64), (1, 3, 64, 32)]
    np.testing.assert_array_equal(batches[0]["pixel_values"], image_batches(processor, [wide])[0]["pixel_values"])
    same = image_batches(processor, [wide, wide])
    assert [b["pixel_values"].shape for b in same] == [(2, 3, 32, 64)]


def test_image_batches_run_alone_the_images_a_processor_pads_to_the_batch():
    # DETR's and YOLOS' processors pad the images of a batch to the largest: the pads would change an embedding
    processor = transformers.DetrImageProcessor(size={"shortest_edge": 32, "longest_edge": 64})
    rng = np.random.default_rng(0)
    wide, tall = (rng.integers(0, 256, s, dtype=np.uint8) for s in ((30, 60, 3), (60, 30, 3)))
    batches = image_batches(processor, [wide, tall])
    assert [b["pixel_values"].shape for b in batches] == [(1, 3, 32, 64), (1, 3, 64, 32)]
    assert [b["pixel_mask"].all() for b in batches] == [True, True]  # no pads


def test_image_batches_of_a_processor_giving_torch_tensors_only():
    # timm's processor refuses return_tensors="np": its torch tensors read back as numpy arrays, the same values
    processor = transformers.TimmWrapperImageProcessor(pretrained_cfg={
        "input_size": [3, 32, 32], "interpolation": "bilinear", "crop_pct": 1.0, "crop_mode": "center",
        "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]})
    rng = np.random.default_rng(0)
    images = [PIL.Image.fromarray(rng.integers(0, 256, s, dtype=np.uint8)) for s in ((30, 60, 3), (60, 30, 3))]
    batches = image_batches(processor, images)
    assert len(batches) == 1 and isinstance(batches[0]["pixel_values"], np.ndarray)
    assert batches[0]["pixel_values"].shape == (2, 3, 32, 32)
    np.testing.assert_array_equal(batches[0]["pixel_values"],
                                  processor(images=images, return_tensors="pt")["pixel_values"].numpy())
