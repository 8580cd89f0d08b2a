"""Images to the masks transformers' mask-generation pipeline returns, with a SAM folder written by ``export``
(``onnx/vision_encoder.onnx``, ``onnx/prompt_encoder_mask_decoder.onnx``: :mod:`fx2onnx.deploy.mask_generation`).

As the pipeline: the image processor lays a grid of points over the image (and its crops,
``generate_crop_boxes``), the image encoder runs once per crop, the mask decoder on each batch of points; each batch's
masks are upscaled to the image (``post_process_masks``) and filtered by their predicted quality and stability
(``filter_masks``), then the masks of all batches by non-maximum suppression (``post_process_for_mask_generation``):
the image processor's own functions, which take torch tensors. :meth:`MaskGenerationPipeline.segment` gives the
three masks of prompts of one's own (points, labels 1 on the object and 0 off it).

.. code-block:: python

    import fx2onnx

    masks = fx2onnx.pipeline("sam_onnx")("photo.png", points_per_batch=64)
    print(len(masks["masks"]), masks["scores"][:3])
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from ..formats import FOLDER_METADATA
from .folder import _read_json, piece_sessions
from .integrity import check_folder_files
from .pipelines import Pipeline

#: the two pieces of a SAM folder, by name in ``fx2onnx.json``
PIECES = ("vision_encoder", "prompt_encoder_mask_decoder")


class MaskGenerationPipeline(Pipeline):
    """A SAM folder, called as transformers' mask-generation pipeline.

    :param folder: a folder written by ``python -m fx2onnx export`` for task ``mask-generation``
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None,  # noqa: D107
                 threads: int | None = None):
        self.folder = os.fspath(folder)
        metadata = _read_json(os.path.join(self.folder, FOLDER_METADATA))
        self.task, pieces = metadata.get("task"), metadata.get("pieces", {})
        if self.task != "mask-generation" or any(p not in pieces for p in PIECES):
            raise ValueError(f"{self.folder!r} is a folder of task {self.task!r}, not a mask-generation folder with "
                             f"the pieces {list(PIECES)}.")
        check_folder_files(self.folder, metadata)
        self.modality, self.outputs, self.sentence = "image", ("iou_scores", "pred_masks"), False
        self.sessions = piece_sessions(self.folder, {name: pieces[name] for name in PIECES}, providers, threads)
        self.config = _read_json(os.path.join(self.folder, "config.json"))
        self.id2label: dict[int, str] = {}
        self._processor: Any = None
        self._tokenizer: Any = None

    def embed(self, pixel_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The image embeddings and their positional embeddings of ``pixel_values`` (the image encoder)."""
        embeddings, positions = self.sessions["vision_encoder"].run(
            None, {"pixel_values": np.asarray(pixel_values, dtype=np.float32)})
        return embeddings, positions

    def decode(self, embeddings: tuple[np.ndarray, np.ndarray], points: np.ndarray,
               labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The scores ``(batch, prompts, 3)`` and low-resolution masks ``(batch, prompts, 3, h, w)`` of the prompts
        ``points (batch, prompts, points, 2)`` (in the resized image) labelled ``labels (batch, prompts, points)``."""
        scores, masks = self.sessions["prompt_encoder_mask_decoder"].run(None, {
            "image_embeddings": embeddings[0], "image_positional_embeddings": embeddings[1],
            "input_points": np.asarray(points, dtype=np.float32), "input_labels": np.asarray(labels, dtype=np.int64)})
        return scores, masks

    def segment(self, image: Any, points: Sequence[Sequence[Sequence[float]]],
                labels: Sequence[Sequence[int]] | None = None, mask_threshold: float = 0.0) -> dict[str, Any]:
        """The three masks (booleans at the image's size) and scores of each prompt of one image: ``points[i]`` the
        points (x, y in the image's pixels) of prompt ``i``, ``labels[i]`` theirs (default: 1, on the object)."""
        import torch  # deferred: the image processor's post-processing takes torch tensors

        image = self._images([image])[0]
        processor = self.processor
        inputs = processor(images=[image], return_tensors="np")
        (height, width), (new_height, new_width) = inputs["original_sizes"][0], inputs["reshaped_input_sizes"][0]
        labels = [[1] * len(p) for p in points] if labels is None else labels
        if len(labels) != len(points) or any(len(p) != len(lab) for p, lab in zip(points, labels)):
            raise ValueError("give one label per point (1 on the object, 0 off it), as many as the points of each "
                             "prompt.")
        longest = max(len(p) for p in points)  # shorter prompts padded as the processor pads them: (0, 0), -10
        coords = np.zeros((len(points), longest, 2), dtype=np.float32)
        padded = np.full((len(points), longest), -10, dtype=np.int64)
        for i, (prompt, marks) in enumerate(zip(points, labels)):
            if np.asarray(prompt).shape != (len(prompt), 2):
                raise ValueError(f"the prompt {prompt!r:.60} is not a list of (x, y) points.")
            coords[i, :len(prompt)], padded[i, :len(prompt)] = prompt, marks
        coords = coords * np.array([new_width / width, new_height / height], dtype=np.float32)
        labels = padded
        scores, masks = self.decode(self.embed(inputs["pixel_values"]), coords[None], labels[None])
        masks = processor.post_process_masks(torch.from_numpy(masks), inputs["original_sizes"].tolist(),
                                             inputs["reshaped_input_sizes"].tolist(), mask_threshold=mask_threshold)
        return {"masks": masks[0].numpy(), "scores": scores[0]}

    def __call__(self, inputs: Any, points_per_batch: int = 64, points_per_crop: int = 32, crops_n_layers: int = 0,
                 crop_overlap_ratio: float = 512 / 1500, crop_n_points_downscale_factor: int = 1,
                 pred_iou_thresh: float = 0.88, stability_score_thresh: float = 0.95, mask_threshold: float = 0.0,
                 stability_score_offset: float = 1.0, crops_nms_thresh: float = 0.7, **unused: Any) -> Any:
        """What transformers' ``pipeline("mask-generation", model=folder)(inputs, ...)`` returns, with its options
        and defaults: ``{"masks": [boolean arrays at the image's size], "scores": [floats]}`` per image."""
        given = {k: v for k, v in unused.items() if v is not None}
        if given:
            raise ValueError(f"a mask-generation folder takes no {sorted(given)}.")
        if points_per_batch <= 0 or points_per_crop <= 0:
            raise ValueError(f"points_per_batch ({points_per_batch}) and points_per_crop ({points_per_crop}) must be "
                             "positive.")
        single = not isinstance(inputs, (list, tuple))
        images = self._images([inputs] if single else list(inputs))
        if not images:
            raise ValueError("nothing to run: give at least one image.")
        results = [self._generate(image, points_per_batch, points_per_crop, crops_n_layers, crop_overlap_ratio,
                                  crop_n_points_downscale_factor, pred_iou_thresh, stability_score_thresh,
                                  mask_threshold, stability_score_offset, crops_nms_thresh) for image in images]
        return results[0] if single else results

    def _generate(self, image: Any, points_per_batch: int, points_per_crop: int, crops_n_layers: int,
                  crop_overlap_ratio: float, downscale: int, pred_iou_thresh: float, stability_score_thresh: float,
                  mask_threshold: float, stability_score_offset: float, crops_nms_thresh: float) -> dict[str, Any]:
        """The masks of one image: the pipeline's preprocess, forward and postprocess on the two pieces."""
        import torch  # deferred: the image processor's functions take torch tensors

        processor = self.processor
        target = processor.size.get("longest_edge", processor.size.get("height"))
        crop_boxes, grid_points, crops, input_labels = processor.generate_crop_boxes(
            image, target, crops_n_layers, crop_overlap_ratio, points_per_crop, downscale)
        inputs = processor(images=crops, return_tensors="pt")
        full_size = inputs["original_sizes"][0].tolist()
        all_masks, all_scores, all_boxes = [], [], []
        for crop, pixels in enumerate(inputs["pixel_values"]):
            embeddings = self.embed(pixels[None].numpy())
            original = inputs["original_sizes"][crop:crop + 1].tolist()
            reshaped = inputs["reshaped_input_sizes"][crop:crop + 1].tolist()
            for start in range(0, grid_points.shape[1], points_per_batch):
                points = grid_points[:, start:start + points_per_batch, crop:crop + 1, :]
                labels = input_labels[:, start:start + points_per_batch, crop:crop + 1]
                scores, masks = self.decode(embeddings, points.numpy(), labels.numpy())
                masks = processor.post_process_masks(torch.from_numpy(masks), original, mask_threshold=mask_threshold,
                                                     reshaped_input_sizes=reshaped, binarize=False)
                masks, scores, boxes = processor.filter_masks(
                    masks[0], torch.from_numpy(scores)[0], full_size, crop_boxes[crop:crop + 1][0], pred_iou_thresh,
                    stability_score_thresh, mask_threshold, stability_score_offset)
                all_masks.extend(masks)
                all_scores.append(scores)
                all_boxes.append(boxes)
        masks, scores = processor.post_process_for_mask_generation(
            all_masks, torch.cat(all_scores), torch.cat(all_boxes), crops_nms_thresh)[:2]
        return {"masks": [np.asarray(m, dtype=bool) for m in masks], "scores": [float(s) for s in scores]}
