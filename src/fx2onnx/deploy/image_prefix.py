"""Image-text models whose image features precede the prompt without placeholder tokens (GIT:
``GitForCausalLM`` puts the projected image features in front of the text embeddings; the image tokens
attend to each other in both directions, the text causally), split as the placeholder models are.

* ``vision.onnx``: ``pixel_values`` -> ``image_features`` ``(rows, hidden)``, every image's one after the other
  (the image encoder and its projection).
* ``decoder.onnx``: the signature of :func:`fx2onnx.deploy.vision.decoder_piece`. The loop writes one
  placeholder id per feature row in front of the prompt (:data:`PREFIX_TOKEN_OFFSET`: the vocabulary's size, an
  id no token has); the piece sets them to 0, embeds the text at the positions the loop gives (those of
  transformers' ``generate``: the prompt's text from 0, each new token the next, the image rows not counted),
  writes the features over the placeholders after the embeddings (the image tokens have no position
  embedding, as in GIT), and builds GIT's mask (one bidirectional block over the image tokens).

The loop is :class:`fx2onnx.runtime.image_prefix.ImagePrefixGenerator`.

.. code-block:: python

    from fx2onnx.deploy.image_prefix import image_prefix_pieces, is_image_prefix_model
    if is_image_prefix_model(model):
        vision, decoder = image_prefix_pieces(model, model.config)
"""

from __future__ import annotations

from typing import Any

import torch

from ..inputs.task_inputs import image_shape
from ..weights.empty import empty_weights
from .speech import Piece
from .vision import decoder_piece

#: the placeholder id of an image row: the vocabulary's size plus this offset (outside the vocabulary)
PREFIX_TOKEN_OFFSET = 0


def is_image_prefix_model(model: Any) -> bool:
    """Whether ``model`` has GIT's layout: a base model ``git`` with an ``image_encoder`` and a
    ``visual_projection``, an ``output`` head."""
    git = getattr(model, "git", None)
    return all(isinstance(getattr(git, n, None), torch.nn.Module) for n in ("image_encoder", "visual_projection",
                                                                            "embeddings", "encoder")) \
        and isinstance(getattr(model, "output", None), torch.nn.Module)


def prefix_token(config: Any) -> int:
    """The placeholder id of an image row of ``config``'s model (outside its vocabulary)."""
    return int(config.get_text_config().vocab_size) + PREFIX_TOKEN_OFFSET


class PrefixVisionPiece(torch.nn.Module):
    """The image encoder and its projection: ``(rows, hidden)``, every image's features one after the other."""

    def __init__(self, model: Any):
        super().__init__()
        self.git = model.git
        self.base_model_prefix = "git"

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        features = self.git.visual_projection(self.git.image_encoder(pixel_values).last_hidden_state)
        return features.reshape(-1, features.shape[-1])


class PrefixDecoderPiece(torch.nn.Module):
    """GIT's text model on a prompt whose placeholders (in front) take the image features."""

    def __init__(self, model: Any):
        super().__init__()
        self.git = model.git
        self.output = model.output
        self.base_model_prefix = "git"
        self.config = model.config
        #: the placeholder the graph writes the features over (read by the loop from ``fx2onnx.json``)
        self.image_token_id = prefix_token(model.config)
        self.token_types, self.video_token_id = False, None

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, image_features):
        from transformers.masking_utils import create_causal_mask

        found = input_ids == self.image_token_id
        # the text's positions, as the loop gives them (the image rows' are not read: their embeddings are replaced)
        embeds = self.git.embeddings(input_ids=torch.where(found, torch.zeros_like(input_ids), input_ids),
                                     position_ids=position_ids.clamp(min=0))
        embeds = embeds.masked_scatter(found.unsqueeze(-1).expand_as(embeds), image_features.to(embeds.dtype))
        mask = create_causal_mask(config=self.config.get_text_config(), inputs_embeds=embeds,
                                  attention_mask=attention_mask, past_key_values=past_key_values, position_ids=None,
                                  block_sequence_ids=torch.where(found, 0, -1))
        out = self.git.encoder(embeds, attention_mask=mask, past_key_values=past_key_values, use_cache=True)
        return {"logits": self.output(out.last_hidden_state[:, -1:]), "past_key_values": out.past_key_values}


def image_prefix_pieces(model: Any, config: Any, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[Piece]:
    """The vision and decoder pieces of a model of :func:`is_image_prefix_model`, with example inputs of two
    shapes (two images then three, of the image encoder's size)."""
    import contextlib

    channels, height, width = image_shape(config)
    g = torch.Generator().manual_seed(seed)
    sets = [{"pixel_values": torch.rand(n, channels, height, width, generator=g).to(dtype)} for n in (2, 3)]
    vision = PrefixVisionPiece(model)
    meta = any(p.is_meta for p in model.parameters())
    with torch.no_grad(), empty_weights(model) if meta else contextlib.nullcontext():
        per_image = vision(sets[0]["pixel_values"].float() if not meta else sets[0]["pixel_values"]).shape[0] // 2
    first = Piece("vision", "vision.onnx", vision, sets[0], sets[1], {"pixel_values": {0: "images"}},
                  ["pixel_values"], ["image_features"])
    decoder = decoder_piece(model, config, dtype, g, per_image, token=prefix_token(config),
                            module=PrefixDecoderPiece(model))
    return [first, decoder]
