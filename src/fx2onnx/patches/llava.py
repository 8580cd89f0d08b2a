"""LLaVA's image features kept in one tensor, so the number of images stays dynamic.

``LlavaModel.get_image_features`` projects the vision features of every image at
once (``[images, tokens, hidden]``) then splits them into a Python list, one
tensor per image (``image_features = list(image_features)``). Iterating over a
tensor's first dimension makes torch.export specialize that dimension: the
number of images (``pixel_values.shape[0]``) becomes the example's. The forward
only concatenates the list again (``torch.cat(image_features, dim=0)``) before
writing the features over the image placeholder tokens.

The replacement computes the same features (the configured vision layer or
layers, the class token dropped with the ``default`` strategy, the projector)
and returns them as a list of one tensor, every image's features one after the
other (``[images * tokens, hidden]``): the concatenation the forward does gives
the same tensor and nothing depends on the number of images any more. Calls with
``image_sizes`` (split by image size) go to the original method. While the
patch is applied, ``pooler_output`` is therefore not one entry per image.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import source_guard


def _selected_hidden_states(
    hidden_states: tuple[torch.Tensor, ...], layers: int | list[int], strategy: str | None
) -> torch.Tensor:
    pool = [hidden_states[layer] for layer in ([layers] if isinstance(layers, int) else layers)]
    if strategy == "default":
        pool = [h[:, 1:] for h in pool]
    return pool[0] if len(pool) == 1 else torch.cat(pool, dim=-1)


def _make_llava_image_features(original: Any) -> Any:
    def get_image_features(
        self: Any,
        pixel_values: torch.Tensor,
        vision_feature_layer: int | list[int] | None = None,
        vision_feature_select_strategy: str | None = None,
        image_sizes: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        if image_sizes is not None:
            return original(
                self,
                pixel_values,
                vision_feature_layer=vision_feature_layer,
                vision_feature_select_strategy=vision_feature_select_strategy,
                image_sizes=image_sizes,
                **kwargs,
            )
        layers = self.config.vision_feature_layer if vision_feature_layer is None else vision_feature_layer
        strategy = (
            self.config.vision_feature_select_strategy
            if vision_feature_select_strategy is None
            else vision_feature_select_strategy
        )
        outputs = self.vision_tower(pixel_values, output_hidden_states=True, return_dict=True)
        features = self.multi_modal_projector(_selected_hidden_states(outputs.hidden_states, layers, strategy))
        # one entry for all images: the forward concatenates the list, the number of images stays symbolic
        outputs.pooler_output = [features.flatten(0, 1)]
        if kwargs.get("return_dict", True) is False:
            return outputs.to_tuple()
        return outputs

    get_image_features.__wrapped__ = original  # type: ignore[attr-defined]
    return get_image_features


_guard_llava_image_features = source_guard(
    "LlavaModel.get_image_features", "list(image_features)",
    absent="LlavaModel.get_image_features does not split the features into a list in this version",
)
