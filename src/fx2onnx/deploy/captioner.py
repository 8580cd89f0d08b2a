"""Image captioners made of a vision model and a text decoder attending to it through cross-attention
(BLIP's ``BlipForConditionalGeneration``), seen as an encoder-decoder so that the generic split
(:mod:`fx2onnx.deploy.speech_generic`) exports and checks them and its loop
(:class:`fx2onnx.runtime.image_seq2seq.Seq2SeqImageGenerator`) runs them.

:class:`CaptionerAsEncoderDecoder` holds the captioner's own ``vision_model`` and ``text_decoder`` (the
checkpoint's tensor names are kept), its encoder is the vision model on ``pixel_values``, its forward
the text decoder on ``encoder_outputs`` with an ``EncoderDecoderCache`` (the cross keys and values
computed once by the encoder piece). Its generation config is what the captioner's ``generate`` passes
its text decoder: the text configuration's ``bos_token_id`` starts the caption, ``sep_token_id`` ends it;
a prompt (``"a photography of"``) follows the start token, as BLIP's ``generate`` replaces the
processor's first token with it.

.. code-block:: python

    from fx2onnx.deploy.captioner import as_encoder_decoder
    seq2seq = as_encoder_decoder(blip)  # blip itself when it is no such captioner
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from ..runtime.image_seq2seq import PROMPT_AFTER_START


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


def as_encoder_decoder(model: Any) -> Any:
    """``model`` seen as an encoder-decoder when it is a cross-attention captioner, else ``model``."""
    if isinstance(model, CaptionerAsEncoderDecoder) or not is_cross_attention_captioner(model):
        return model
    return CaptionerAsEncoderDecoder(model)


def captioner_generation(model: Any) -> dict[str, Any]:
    """What ``fx2onnx.json`` says of a captioner's generation: the start, end and padding tokens its
    ``generate`` gives the text decoder, the prompt after the start token."""
    seq2seq = as_encoder_decoder(model)
    generation = seq2seq.generation_config
    return {"generation": {k: getattr(generation, k) for k in ("decoder_start_token_id", "eos_token_id",
                                                               "pad_token_id")},
            "decoder_prompt": PROMPT_AFTER_START}
