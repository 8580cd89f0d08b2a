"""Image-to-text models which are not plain encoder-decoders, seen as ones so that the generic split
(:mod:`fx2onnx.deploy.speech_generic`) exports and checks them and its loop
(:class:`fx2onnx.runtime.image_seq2seq.Seq2SeqImageGenerator`) runs them.

* A vision model and a text decoder attending to it through cross-attention (BLIP's
  ``BlipForConditionalGeneration``): :class:`CaptionerAsEncoderDecoder` holds the captioner's own
  ``vision_model`` and ``text_decoder`` (the checkpoint's tensor names are kept), its encoder is the vision
  model on ``pixel_values``, its forward the text decoder on ``encoder_outputs`` with an
  ``EncoderDecoderCache`` (the cross keys and values computed once by the encoder piece). Its generation
  config is what the captioner's ``generate`` passes its text decoder: the text configuration's
  ``bos_token_id`` starts the caption, ``sep_token_id`` ends it; a prompt (``"a picture of"``) follows the
  start token, as BLIP's ``generate`` replaces the processor's first token with it.
* An encoder-decoder whose encoder reads a prompt the image features were written into (Florence-2):
  :class:`PromptMergingAsEncoderDecoder`'s encoder takes ``pixel_values``, ``attention_mask`` and the
  prompt's ``input_ids`` (its image placeholders then the task's text, made by the processor) and does
  what the model's ``generate`` does before its text encoder; the decoder step is the model's forward.
  The prompt is the encoder's: ``generate OUT "<CAPTION>" --image cat.png``.

.. code-block:: python

    from fx2onnx.deploy.captioner import as_encoder_decoder
    seq2seq = as_encoder_decoder(blip)  # blip itself when it is none of these
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from ..inputs.vlm_inputs import image_text_inputs, text_token_range
from ..runtime.image_seq2seq import PROMPT_AFTER_START
from ..weights.empty import empty_weights


def is_cross_attention_captioner(model: Any) -> bool:
    """Whether ``model`` is no encoder-decoder but a ``vision_model`` and a ``text_decoder`` taking
    ``encoder_hidden_states`` (BLIP)."""
    decoder = getattr(model, "text_decoder", None)
    return (not getattr(getattr(model, "config", None), "is_encoder_decoder", False)
            and isinstance(getattr(model, "vision_model", None), torch.nn.Module)
            and isinstance(decoder, torch.nn.Module)
            and "encoder_hidden_states" in inspect.signature(decoder.forward).parameters)


class _VisionEncoder(torch.nn.Module):
    """The vision model as an encoder: ``pixel_values`` -> an output with ``last_hidden_state``."""

    def __init__(self, vision_model: torch.nn.Module):
        super().__init__()
        self.vision_model = vision_model

    def forward(self, pixel_values: torch.Tensor, return_dict: bool = True) -> Any:
        from transformers.modeling_outputs import BaseModelOutput

        return BaseModelOutput(last_hidden_state=self.vision_model(pixel_values=pixel_values)[0])


class CaptionerAsEncoderDecoder(torch.nn.Module):
    """A cross-attention captioner (:func:`is_cross_attention_captioner`) with the interface of a
    transformers encoder-decoder: ``get_encoder()``, ``forward(encoder_outputs=, decoder_input_ids=,
    past_key_values=)``, a ``config`` saying ``is_encoder_decoder`` and a ``generation_config`` whose start
    and end tokens are those its ``generate`` gives the text decoder."""

    def __init__(self, model: Any):
        import transformers

        super().__init__()
        self.vision_model = model.vision_model
        self.text_decoder = model.text_decoder
        self._captioner = [model]  # not a submodule: the parameters keep the captioner's names
        self.config = copy.copy(model.config)
        self.config.is_encoder_decoder = True
        text = model.config.get_text_config()
        self.config.decoder_start_token_id = text.bos_token_id
        self.generation_config = transformers.GenerationConfig(
            decoder_start_token_id=text.bos_token_id, eos_token_id=getattr(text, "sep_token_id", None),
            pad_token_id=text.pad_token_id)

    def _init_weights(self, module: torch.nn.Module) -> None:
        self._captioner[0]._init_weights(module)

    def get_encoder(self) -> torch.nn.Module:
        return _VisionEncoder(self.vision_model)

    def forward(self, pixel_values: torch.Tensor | None = None, encoder_outputs: Any = None,
                decoder_input_ids: torch.Tensor | None = None, past_key_values: Any = None,
                use_cache: bool = True) -> Any:
        if encoder_outputs is None:
            encoder_outputs = self.get_encoder()(pixel_values)
        return self.text_decoder(input_ids=decoder_input_ids, encoder_hidden_states=encoder_outputs.last_hidden_state,
                                 past_key_values=past_key_values, use_cache=use_cache, return_dict=True)


def merges_prompt(model: Any) -> bool:
    """Whether ``model`` is an encoder-decoder whose forward writes the image features over placeholders
    of the prompt before its text encoder (Florence-2): ``get_image_features``, an image token, an encoder
    reading no pixels."""
    config = getattr(model, "config", None)
    encoder = model.get_encoder() if callable(getattr(model, "get_encoder", None)) else None
    return (getattr(config, "is_encoder_decoder", False) and callable(getattr(model, "get_image_features", None))
            and isinstance(getattr(config, "image_token_id", None), int) and encoder is not None
            and "pixel_values" in inspect.signature(model.forward).parameters
            and "pixel_values" not in inspect.signature(encoder.forward).parameters)


class _PromptEncoder(torch.nn.Module):
    """The image features written over the prompt's placeholders, then the text encoder."""

    def __init__(self, model: Any):
        super().__init__()
        self._model = [model]

    def forward(self, pixel_values: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                return_dict: bool = True) -> Any:
        model = self._model[0]
        embeds = model.get_input_embeddings()(input_ids)
        features = model.get_image_features(pixel_values).pooler_output.to(embeds.dtype)
        placeholders = (input_ids == model.config.image_token_id).unsqueeze(-1).expand_as(embeds)
        embeds = embeds.masked_scatter(placeholders, features)
        return model.get_encoder()(inputs_embeds=embeds, attention_mask=attention_mask, return_dict=True)


class PromptMergingAsEncoderDecoder(torch.nn.Module):
    """An encoder-decoder of :func:`merges_prompt` whose encoder takes the pixels and the prompt."""

    #: read by :func:`fx2onnx.deploy.speech_generic.example_features`: the examples hold a prompt
    merges_prompt = True

    def __init__(self, model: Any):
        super().__init__()
        for name, child in model.named_children():  # the checkpoint's names
            self.add_module(name, child)
        self._model = [model]
        self.config = model.config
        self.generation_config = model.generation_config

    def _init_weights(self, module: torch.nn.Module) -> None:
        self._model[0]._init_weights(module)

    def get_encoder(self) -> torch.nn.Module:
        return _PromptEncoder(self._model[0])

    def forward(self, input_ids: torch.Tensor | None = None, pixel_values: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, encoder_outputs: Any = None,
                decoder_input_ids: torch.Tensor | None = None, past_key_values: Any = None,
                use_cache: bool = True, logits_to_keep: int = 0,
                decoder_inputs_embeds: torch.Tensor | None = None) -> Any:
        if encoder_outputs is None:
            encoder_outputs = self.get_encoder()(pixel_values, input_ids, attention_mask)
        return self._model[0](encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                              decoder_input_ids=decoder_input_ids, decoder_inputs_embeds=decoder_inputs_embeds,
                              past_key_values=past_key_values, use_cache=use_cache, logits_to_keep=logits_to_keep)


def example_prompts(folder: str | None, model: Any, config: Any, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Two sets of ``pixel_values``, ``input_ids`` and ``attention_mask`` of batch 2 and 3 whose prompts differ
    in length: the folder's processor on images made in code and two task prompts; without one (a model of the
    task zoo), the task zoo's inputs, the second set's prompt two tokens longer."""
    import os

    import numpy as np

    if folder is not None and os.path.isfile(os.path.join(folder, "preprocessor_config.json")):
        import PIL.Image
        import transformers

        processor = transformers.AutoProcessor.from_pretrained(folder, local_files_only=True)
        rng = np.random.default_rng(seed)
        sets = []
        for batch, side, prompt in ((2, 40, "<CAPTION>"), (3, 56, "<OCR>")):
            images = [PIL.Image.fromarray(rng.integers(0, 256, (side, side + 8 * i, 3), dtype=np.uint8))
                      for i in range(batch)]
            out = processor(text=[prompt] * batch, images=images, return_tensors="pt")
            sets.append({k: torch.as_tensor(out[k]) for k in ("pixel_values", "input_ids", "attention_mask")})
        if sets[0]["input_ids"].shape[1] == sets[1]["input_ids"].shape[1]:
            raise ValueError("the two task prompts have the same length: the prompt's length would be frozen")
        return sets

    sets = []
    with empty_weights(model._model[0]) if any(p.is_meta for p in model.parameters()) else _nothing():
        for batch, extra in ((2, 0), (3, 2)):
            inputs, _ = image_text_inputs(model._model[0], config, batch, seed + batch)
            ids = inputs["input_ids"]
            if extra:  # a longer prompt: text tokens before its end
                low, high = text_token_range(config)
                more = torch.randint(low, high, (batch, extra), generator=torch.Generator().manual_seed(seed))
                ids = torch.cat([ids[:, :-1], more, ids[:, -1:]], dim=1)
            sets.append({"pixel_values": inputs["pixel_values"], "input_ids": ids,
                         "attention_mask": torch.ones_like(ids)})
    return sets


def _nothing() -> Any:
    import contextlib

    return contextlib.nullcontext()


def as_encoder_decoder(model: Any) -> Any:
    """``model`` seen as an encoder-decoder when it is a cross-attention captioner (BLIP) or merges the
    image into its encoder's prompt (Florence-2), else ``model``."""
    if isinstance(model, (CaptionerAsEncoderDecoder, PromptMergingAsEncoderDecoder)):
        return model
    if is_cross_attention_captioner(model):
        return CaptionerAsEncoderDecoder(model)
    if merges_prompt(model):
        return PromptMergingAsEncoderDecoder(model)
    return model


def captioner_generation(model: Any) -> dict[str, Any]:
    """What ``fx2onnx.json`` says of a captioner's generation: the start, end and padding tokens its
    ``generate`` gives the text decoder, the prompt after the start token."""
    seq2seq = as_encoder_decoder(model)
    generation = seq2seq.generation_config
    return {"generation": {k: getattr(generation, k) for k in ("decoder_start_token_id", "eos_token_id",
                                                               "pad_token_id")},
            "decoder_prompt": PROMPT_AFTER_START}
