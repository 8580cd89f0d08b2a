"""Pairs of images to the matches transformers' keypoint-matching pipeline returns, with an EfficientLoFTR folder
written by ``export`` (``onnx/model.onnx``: :mod:`fx2onnx.deploy.keypoint_matching`).

As the pipeline: each pair through the folder's image processor, the model, then the image processor's
``post_process_keypoint_matching`` (the keypoints at the images' sizes, the matches scoring above ``threshold``),
sorted by score: ``[{"keypoint_image_0": {"x", "y"}, "keypoint_image_1": {"x", "y"}, "score"}]`` per pair.

.. code-block:: python

    import fx2onnx

    matches = fx2onnx.pipeline("efficientloftr_onnx")(["left.png", "right.png"], threshold=0.2)
    print(len(matches), matches[0])
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from .pipelines import Pipeline, open_task_folder


class KeypointMatchingPipeline(Pipeline):
    """An EfficientLoFTR folder, called as transformers' keypoint-matching pipeline.

    :param folder: a folder written by ``python -m fx2onnx export`` for task ``keypoint-matching``
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None,  # noqa: D107
                 threads: int | None = None):
        open_task_folder(self, folder, "keypoint-matching", providers, threads)
        self.modality = "image"

    def _pairs(self, inputs: Any) -> list[list[Any]]:
        """The pairs of ``inputs`` (a pair of images, or a list of pairs) as RGB images; one line when a pair is
        not two images."""
        if not isinstance(inputs, (list, tuple)) or not inputs:
            raise ValueError("a keypoint-matching folder takes a pair of images (--image A --image B), or a list of "
                             "pairs.")
        pairs = [inputs] if not isinstance(inputs[0], (list, tuple)) else list(inputs)
        for pair in pairs:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(f"a keypoint-matching folder matches images two by two: {pair!r:.60} is not a pair "
                                 "of images.")
        return [[self._rgb(image) for image in self._images(list(pair))] for pair in pairs]

    @staticmethod
    def _rgb(image: Any) -> Any:
        """A PIL RGB image (the pipeline's ``load_image``)."""
        import PIL.Image

        return image.convert("RGB") if hasattr(image, "convert") else PIL.Image.fromarray(np.asarray(image, np.uint8))

    def __call__(self, inputs: Any, threshold: float = 0.0, **unused: Any) -> Any:
        """What transformers' ``pipeline("keypoint-matching", model=folder)(inputs, threshold=...)`` returns: the
        matches of one pair, a list of them for a list of pairs."""
        import types

        import torch  # deferred: the image processor's post-processing takes torch tensors

        given = {k: v for k, v in unused.items() if v is not None}
        if given:
            raise ValueError(f"a keypoint-matching folder takes no {sorted(given)}.")
        single = isinstance(inputs, (list, tuple)) and len(inputs) == 2 and not isinstance(inputs[0], (list, tuple))
        processor, results = self.processor, []
        for pair in self._pairs(inputs):
            pixels = processor(images=pair, return_tensors="pt")["pixel_values"].numpy().astype(np.float32)
            outputs = self._run({"pixel_values": pixels}, all_outputs=True)
            outputs = types.SimpleNamespace(**{n: torch.from_numpy(o) for n, o in zip(self.outputs, outputs)})
            found = processor.post_process_keypoint_matching(outputs, target_sizes=[[image.size for image in pair]],
                                                             threshold=threshold)[0]
            matches = [{"keypoint_image_0": {"x": k0[0].item(), "y": k0[1].item()},
                        "keypoint_image_1": {"x": k1[0].item(), "y": k1[1].item()}, "score": score.item()}
                       for k0, k1, score in zip(found["keypoints0"], found["keypoints1"], found["matching_scores"])]
            results.append(sorted(matches, key=lambda m: m["score"], reverse=True))
        return results[0] if single else results
