"""The pieces of a SpeechT5 text-to-speech folder (``SpeechT5ForTextToSpeech``), as optimum names them:

* ``onnx/encoder_model.onnx``: ``input_ids``, ``attention_mask`` -> ``encoder_hidden_states``;
* ``onnx/decoder_model.onnx``: one step of the spectrogram decoder: ``output_sequence`` (the frames so far, the
  first all zeros), ``speaker_embeddings``, ``encoder_hidden_states``, ``encoder_attention_mask`` and the
  self-attention cache ``past_key_<i>`` / ``past_value_<i>`` (empty at the first step) -> ``spectrum`` (the
  ``reduction_factor`` new frames), ``prob`` (the stop probabilities) and ``present_key_<i>`` / ``present_value_<i>``;
* ``onnx/decoder_postnet_and_vocoder.onnx``: ``spectrogram`` -> ``waveform``: the postnet, then the HiFi-GAN vocoder.

SpeechT5 makes a spectrogram: transformers' text-to-audio pipeline takes its vocoder as ``vocoder=`` (by default it
downloads ``microsoft/speecht5_hifigan``). The folder holds it as a ``vocoder/`` sub-folder (a ``SpeechT5HifiGan``
saved by ``save_pretrained``): the export reads it there, refuses a folder without one, and copies its
``config.json`` (its ``sampling_rate``) into ``vocoder/`` of the exported folder. The voice is the pipeline's
``forward_params={"speaker_embeddings": ...}``: a ``speaker_embeddings.npy`` of the checkpoint folder (an x-vector
of ``speaker_embedding_dim`` floats) is copied as the exported folder's default voice.

The decoder's prenet drops half its units at every run, in eval too (transformers' ``_consistent_dropout``, as the
paper): the graph draws the same random mask, so each run gives another spectrogram as in eager; the checks against
eager are exact when ``speech_decoder_prenet_dropout`` is 0 only.
"""

from __future__ import annotations

import glob
import os
import shutil
from typing import Any

import torch

from ..weights.empty import parameters_on_meta
from .encoder import SENTENCES, _processor
from .onnx_pieces import export_onnx_pieces
from .saved_model import rename_external_data
from .speech import Piece
from .transformersjs import data_file_name

ENCODER_FILE, DECODER_FILE = "onnx/encoder_model.onnx", "onnx/decoder_model.onnx"
VOCODER_FILE = "onnx/decoder_postnet_and_vocoder.onnx"
#: the sub-folder of the checkpoint (and of the exported folder: its config) holding the vocoder
VOCODER_FOLDER = "vocoder"
#: the default voice, beside config.json
SPEAKER_FILE = "speaker_embeddings.npy"


class SpeechT5EncoderPiece(torch.nn.Module):
    """The text encoder (its prenet included)."""

    base_model_prefix = "model"

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model.speecht5.encoder(input_values=input_ids, attention_mask=attention_mask).last_hidden_state


class SpeechT5DecoderPiece(torch.nn.Module):
    """One step of the spectrogram decoder, as transformers' ``_generate_speech`` runs it: the prenet on every frame,
    the decoder layers on the last one with the self-attention cache, the new frames and the stop probabilities."""

    base_model_prefix = "model"

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def forward(self, output_sequence, speaker_embeddings, encoder_hidden_states, encoder_attention_mask,
                past_keys, past_values):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(list(zip(past_keys, past_values))), DynamicCache())
        decoder, config = self.model.speecht5.decoder, self.model.config
        hidden = decoder.prenet(output_sequence, speaker_embeddings)
        out = decoder.wrapped_decoder(hidden_states=hidden[:, -1:], attention_mask=None,
                                      encoder_hidden_states=encoder_hidden_states,
                                      encoder_attention_mask=encoder_attention_mask, past_key_values=cache,
                                      use_cache=True, return_dict=True)
        last = out.last_hidden_state.squeeze(1)
        postnet = self.model.speech_decoder_postnet
        spectrum = postnet.feat_out(last).view(last.shape[0], config.reduction_factor, config.num_mel_bins)
        prob = torch.sigmoid(postnet.prob_out(last))
        presents = [t for layer in cache.self_attention_cache.layers for t in (layer.keys, layer.values)]
        return (spectrum, prob, *presents)


class PostnetVocoderPiece(torch.nn.Module):
    """The postnet on the whole spectrogram, then the vocoder: ``(batch, frames, mel)`` -> ``(batch, samples)``."""

    def __init__(self, postnet: Any, vocoder: Any):
        super().__init__()
        self.postnet = postnet
        self.vocoder = vocoder

    def forward(self, spectrogram: torch.Tensor) -> torch.Tensor:
        return self.vocoder(self.postnet.postnet(spectrogram))


def load_vocoder(folder: str, name: str) -> Any:
    """The ``SpeechT5HifiGan`` of ``folder/vocoder`` in float32; one line when the folder has none."""
    import transformers  # deferred: heavy

    path = os.path.join(folder, VOCODER_FOLDER)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"{name} makes a spectrogram, not a waveform: save its vocoder (a SpeechT5HifiGan, e.g. "
                         f"microsoft/speecht5_hifigan, with save_pretrained) in {path!r}, then export again.")
    transformers.utils.logging.disable_progress_bar()
    try:
        return transformers.SpeechT5HifiGan.from_pretrained(path, dtype=torch.float32).eval()
    finally:
        transformers.utils.logging.enable_progress_bar()


def _postnet(folder: str, config: Any) -> Any:
    """The model's postnet with its weights read from the checkpoint's safetensors files (float32)."""
    from safetensors import safe_open
    from transformers.models.speecht5.modeling_speecht5 import SpeechT5SpeechDecoderPostnet

    postnet, prefix, state = SpeechT5SpeechDecoderPostnet(config), "speech_decoder_postnet.", {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(path, "pt") as f:
            state.update({k[len(prefix):]: f.get_tensor(k).float() for k in f.keys() if k.startswith(prefix)})
    postnet.load_state_dict(state, strict=True)
    return postnet.eval()


def _cache_sets(config: Any, batch: int, past: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    heads = config.decoder_attention_heads
    shape = (batch, heads, past, config.hidden_size // heads)
    g = torch.Generator().manual_seed(past)
    return ([torch.randn(*shape, generator=g) for _ in range(config.decoder_layers)],
            [torch.randn(*shape, generator=g) for _ in range(config.decoder_layers)])


def speecht5_pieces(model: Any, vocoder: Any, postnet: Any, folder: str, config: Any) -> list[Piece]:
    """The three pieces around ``model`` (on the meta device for the export, eager for the check), each with two
    input sets: two then three texts of its tokenizer, 2 then 3 frames of output, caches of 1 then 2 steps."""
    tokenizer = _processor(folder, "text")
    texts = [{k: v for k, v in tokenizer(list(t), padding=True, return_tensors="pt").items()
              if k in ("input_ids", "attention_mask")} for t in SENTENCES]
    g = torch.Generator().manual_seed(0)
    decoder_sets = []
    for encoded, frames in zip(texts, (2, 3)):
        batch, source = encoded["input_ids"].shape
        keys, values = _cache_sets(config, batch, frames - 1)
        decoder_sets.append({
            "output_sequence": torch.randn(batch, frames, config.num_mel_bins, generator=g),
            "speaker_embeddings": torch.randn(batch, config.speaker_embedding_dim, generator=g),
            "encoder_hidden_states": torch.randn(batch, source, config.hidden_size, generator=g),
            "encoder_attention_mask": encoded["attention_mask"], "past_keys": keys, "past_values": values})
    layers = range(config.decoder_layers)
    past = {0: "batch", 2: "past"}
    decoder_names = ["output_sequence", "speaker_embeddings", "encoder_hidden_states", "encoder_attention_mask",
                     *[f"past_key_{i}" for i in layers], *[f"past_value_{i}" for i in layers]]
    presents = [n for i in layers for n in (f"present_key_{i}", f"present_value_{i}")]
    # the flattened inputs list the keys, then the values; the outputs pair them per layer
    cache = {f"past_{kind}_{i}": f"present_{kind}_{i}" for i in layers for kind in ("key", "value")}
    spectrograms = [{"spectrogram": torch.randn(1, frames, config.num_mel_bins, generator=g)} for frames in (4, 6)]
    return [
        Piece("encoder", ENCODER_FILE, SpeechT5EncoderPiece(model), texts[0], texts[1],
              {n: {0: "batch", 1: "sequence"} for n in ("input_ids", "attention_mask")},
              ["input_ids", "attention_mask"], ["encoder_hidden_states"]),
        Piece("decoder", DECODER_FILE, SpeechT5DecoderPiece(model), decoder_sets[0], decoder_sets[1],
              {"output_sequence": {0: "batch", 1: "frames"}, "speaker_embeddings": {0: "batch"},
               "encoder_hidden_states": {0: "batch", 1: "sequence"},
               "encoder_attention_mask": {0: "batch", 1: "sequence"},
               "past_keys": [past] * len(layers), "past_values": [past] * len(layers)},
              decoder_names, ["spectrum", "prob", *presents], cache),
        Piece("postnet_and_vocoder", VOCODER_FILE, PostnetVocoderPiece(postnet, vocoder), spectrograms[0],
              spectrograms[1], {"spectrogram": {0: "batch", 1: "frames"}}, ["spectrogram"], ["waveform"]),
    ]


def export_speecht5_pieces(folder: str, out_dir: str, config: Any, dtype: torch.dtype,
                           options: dict[str, Any]) -> tuple[list[Piece], Any]:
    """Exports the encoder and the decoder (weights streamed from the checkpoint) and the postnet with the vocoder of
    ``folder/vocoder`` (small: loaded) into ``out_dir/onnx``; copies the vocoder's config and the default voice;
    returns the pieces and the function rebuilding them around the eager model for the check."""
    import transformers  # deferred: heavy

    from .. import to_onnx

    name = config.architectures[0]
    vocoder = load_vocoder(folder, name)
    with parameters_on_meta():
        model = getattr(transformers, name)._from_config(config, dtype=dtype).eval()
    pieces = speecht5_pieces(model, vocoder, _postnet(folder, config), folder, config)
    export_onnx_pieces(folder, out_dir, pieces[:2], config, dtype, options)
    tail = pieces[2]
    options["say"](f"exporting the {tail.name} of {name}")
    path = os.path.join(out_dir, tail.filename)
    tail.module.to(dtype)
    to_onnx(tail.module, (), dict(tail.inputs, spectrogram=tail.inputs["spectrogram"].to(dtype)),
            dynamic_shapes=tail.dynamic_shapes, filename=path, external_data=True,
            target_opset=options["opset"], optimize=False if options["optimize"] == "none" else options["optimize"],
            input_names=tail.input_names, output_names=tail.output_names)
    tail.module.float()
    rename_external_data(path, data_file_name(tail.filename))
    os.makedirs(os.path.join(out_dir, VOCODER_FOLDER), exist_ok=True)
    shutil.copyfile(os.path.join(folder, VOCODER_FOLDER, "config.json"),
                    os.path.join(out_dir, VOCODER_FOLDER, "config.json"))

    def eager_pieces(eager: Any, eager_config: Any) -> list[Piece]:
        return speecht5_pieces(eager, load_vocoder(folder, name), eager.speech_decoder_postnet, folder, eager_config)

    return pieces, eager_pieces
