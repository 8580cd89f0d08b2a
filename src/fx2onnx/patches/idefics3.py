"""Idefics 3's image features kept in one tensor, so the batch stays dynamic.

``Idefics3Model.get_image_features`` drops the padding images (all
zeros), runs the vision tower and the connector on the real ones, then splits the features
per prompt: ``image_features.split(num_real_images_per_batch.tolist())``. ``tolist()`` of a
tensor with one entry per prompt makes torch.export specialize the batch (``pixel_values``
of shape ``(batch, images, 3, H, W)`` with a dynamic batch failed: 'conflicts between
user-specified ranges and inferred ranges'). The forward only concatenates the list again
(``torch.cat(image_hidden_states, dim=0)``) before writing the features over the image
placeholder tokens.

The replacement computes the same features (padding images dropped, the same patch mask,
the vision tower, the connector) and returns them as a list of one tensor, every real image's
features one after the other: the concatenation gives the same tensor and nothing reads the
number of images per prompt in Python. While the patch is applied ``pooler_output`` is not
one entry per prompt.

SmolVLM's copy of the method is not patched: its forward returns the image encoder's outputs,
``pooler_output`` included, so the model has one output per prompt and no program with a dynamic
batch can have its outputs. Export SmolVLM with a static batch (``pixel_values``,
``pixel_attention_mask``, ``input_ids`` and ``attention_mask`` without ``{0: "batch"}``), which
matches eager.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import source_guard

#: (modeling module, model class) of the families whose get_image_features is patched
IMAGE_FEATURES = (("transformers.models.idefics3.modeling_idefics3", "Idefics3Model"),)


def _patch_attention_mask(pixel_attention_mask: torch.Tensor, patch_size: int) -> torch.Tensor:
    """A patch is kept when one of its pixels is (the original's unfold of the pixel mask)."""
    grid = pixel_attention_mask.unfold(dimension=1, size=patch_size, step=patch_size)
    grid = grid.unfold(dimension=2, size=patch_size, step=patch_size)
    return (grid.sum(dim=(-1, -2)) > 0).bool()


def _make_image_features(original: Any) -> Any:
    def get_image_features(
        self: Any, pixel_values: torch.Tensor, pixel_attention_mask: torch.Tensor | None = None, **kwargs: Any
    ) -> Any:
        return_dict = kwargs.pop("return_dict", True)  # consumed by the original's can_return_tuple
        batch_size, num_images = pixel_values.shape[:2]
        pixel_values = pixel_values.to(dtype=self.dtype)
        pixel_values = pixel_values.view(batch_size * num_images, *pixel_values.shape[2:])
        # padding images are all zeros: dropped, as the original does
        values_per_image = pixel_values.shape[1:].numel()
        real_images = (pixel_values == 0.0).sum(dim=(-1, -2, -3)) != values_per_image
        pixel_values = pixel_values[real_images].contiguous()
        if pixel_attention_mask is None:
            pixel_attention_mask = torch.ones(
                size=(pixel_values.size(0), pixel_values.size(2), pixel_values.size(3)),
                dtype=torch.bool, device=pixel_values.device,
            )
        else:
            pixel_attention_mask = pixel_attention_mask.view(batch_size * num_images, *pixel_attention_mask.shape[2:])
            pixel_attention_mask = pixel_attention_mask[real_images].contiguous()
        patch_mask = _patch_attention_mask(pixel_attention_mask, self.config.vision_config.patch_size)
        outputs = self.vision_model(pixel_values=pixel_values, patch_attention_mask=patch_mask, return_dict=True,
                                    **kwargs)
        features = self.connector(outputs.last_hidden_state)
        # one entry for every prompt: the forward concatenates the list, the batch stays symbolic
        outputs.pooler_output = [features.reshape(-1, features.shape[-1])]
        return outputs if return_dict is not False else outputs.to_tuple()

    get_image_features.__wrapped__ = original  # type: ignore[attr-defined]
    return get_image_features


guard_image_features = source_guard(
    "get_image_features", "num_real_images_per_batch.tolist()", "self.connector(", "real_images_inds",
    absent="get_image_features does not split the features with tolist() in this version",
)
