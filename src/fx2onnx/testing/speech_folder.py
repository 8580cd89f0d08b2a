"""A Whisper checkpoint folder made in code: what a published folder holds, without a download.

:func:`whisper_tokenizer` turns the byte-level BPE of :func:`fx2onnx.testing.tokenizer.tiny_tokenizer`
into a :class:`transformers.WhisperTokenizer` with Whisper's special tokens (start of
transcript, languages, tasks, no timestamps); :func:`write_whisper_folder` writes the random
weights of a :class:`transformers.WhisperConfig`, that tokenizer, a feature extractor whose
window holds the encoder's positions, and a generation config naming the special tokens as
the published checkpoints do (``lang_to_id``, ``task_to_id``, ``no_timestamps_token_id``,
``suppress_tokens``, ``begin_suppress_tokens``). :func:`write_vibevoice_asr_folder` writes a speech
language model (VibeVoice-ASR: an audio encoder whose features go over placeholders of a Qwen2 prompt)
with its processor: the tiny tokenizer with the audio markers and a chat template placing an audio part
between them, the acoustic tokenizer's feature extractor (24 kHz, one feature per 3200 samples).

.. code-block:: python

    import transformers
    from fx2onnx.testing.speech_folder import write_whisper_folder

    config = transformers.WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2,
                                        encoder_attention_heads=4, decoder_attention_heads=4,
                                        encoder_ffn_dim=128, decoder_ffn_dim=128,
                                        max_source_positions=50, max_target_positions=64)
    write_whisper_folder(config, "whisper_folder", dtype="bfloat16")
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..inputs.tasks import get_task_architecture, tiny_task_config
from ..weights import write_random_checkpoint
from .tokenizer import tiny_tokenizer

#: the special tokens after the end of text, in the order of the published tokenizers
#: (fewer languages)
LANGUAGES = ("en", "fr", "de")
SPECIAL_TOKENS = ("<|startoftranscript|>", *(f"<|{code}|>" for code in LANGUAGES), "<|translate|>", "<|transcribe|>",
                  "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>")


def whisper_tokenizer(vocab_size: int = 384) -> Any:
    """A :class:`transformers.WhisperTokenizer`: the vocabulary and merges of
    :func:`fx2onnx.testing.tokenizer.tiny_tokenizer` (its own special tokens left out),
    ``<|endoftext|>`` then :data:`SPECIAL_TOKENS` after them."""
    import transformers

    state = json.loads(tiny_tokenizer(vocab_size).backend_tokenizer.to_str())
    words = [w for w, _ in sorted(state["model"]["vocab"].items(), key=lambda kv: kv[1]) if not w.startswith("<")]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["model"]["merges"]]
    tok = transformers.WhisperTokenizer(vocab={w: i for i, w in enumerate(words)}, merges=merges)
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    return tok


def write_whisper_folder(
    config: Any, folder: str | os.PathLike, dtype: str = "bfloat16", *, seed: int = 0, std: float | None = None,
    keep_vocab: bool = False,
) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of a Whisper model: random weights
    (:func:`fx2onnx.weights.write_random_checkpoint`), the tokenizer of :func:`whisper_tokenizer`
    (``config.vocab_size`` becomes its size, unless ``keep_vocab``: the published size for a
    benchmark, the tokens past the tokenizer's decoding to nothing), a :class:`transformers.WhisperFeatureExtractor` of
    ``config.num_mel_bins`` bins whose window is ``2 * config.max_source_positions`` frames
    (30 s for the published configs, 1 s for 50 positions), and a multilingual generation config.

    :return: what :func:`fx2onnx.weights.write_random_checkpoint` returns
    """
    import transformers

    tok = whisper_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    eos = tok.eos_token_id
    config.vocab_size = max(config.vocab_size, len(tok)) if keep_vocab else len(tok)
    config.architectures = ["WhisperForConditionalGeneration"]
    config.eos_token_id = config.pad_token_id = config.bos_token_id = eos
    config.decoder_start_token_id = ids["<|startoftranscript|>"]
    written = write_random_checkpoint(config, folder, dtype, seed=seed, std=std)
    folder = os.fspath(folder)
    tok.save_pretrained(folder)
    hop, rate = 160, 16000
    frames = 2 * config.max_source_positions
    if (frames * hop) % rate:
        raise ValueError(f"max_source_positions={config.max_source_positions}: the feature extractor's window "
                         f"({frames} frames of {hop} samples) must last whole seconds; use a multiple of 50.")
    extractor = transformers.WhisperFeatureExtractor(feature_size=config.num_mel_bins, sampling_rate=rate,
                                                     hop_length=hop, chunk_length=frames * hop // rate)
    extractor.save_pretrained(folder)
    transformers.GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=eos, pad_token_id=eos, bos_token_id=eos,
        no_timestamps_token_id=ids["<|notimestamps|>"], is_multilingual=True,
        lang_to_id={f"<|{c}|>": ids[f"<|{c}|>"] for c in LANGUAGES},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        forced_decoder_ids=[[1, None], [2, ids["<|transcribe|>"]]],
        suppress_tokens=[ids["<|startoflm|>"], ids["<|startofprev|>"], ids["<|nocaptions|>"]],
        begin_suppress_tokens=[tok.convert_tokens_to_ids("Ġ"), eos],
        max_length=config.max_target_positions,
    ).save_pretrained(folder)
    return written


#: VibeVoice-ASR's audio markers: begin, placeholder (expanded by the processor), end
VIBEVOICE_AUDIO_TOKENS = ("<|object_ref_start|>", "<|box_start|>", "<|object_ref_end|>")


def write_vibevoice_asr_folder(
    folder: str | os.PathLike, config: Any = None, dtype: str = "bfloat16", *, seed: int = 0, std: float = 0.2,
) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of VibeVoice-ASR: random weights of ``config`` (default: the task
    zoo's tiny configuration), the tiny tokenizer with :data:`VIBEVOICE_AUDIO_TOKENS` (the text vocabulary
    becomes its size) and a chat template writing an audio part between the markers, a
    :class:`transformers.VibeVoiceAsrProcessor` and a generation config ending on ``<|endoftext|>``.

    :param std: the standard deviation of the weights (a tiny model needs more than 0.02 to vary its tokens)
    :return: what :func:`fx2onnx.weights.write_random_checkpoint` returns
    """
    import transformers

    if config is None:
        config = tiny_task_config(get_task_architecture("speech-seq2seq", "vibevoice_asr"))
    tok = tiny_tokenizer(384)
    tok.add_special_tokens({"additional_special_tokens": list(VIBEVOICE_AUDIO_TOKENS)})
    text = config.text_config
    text.vocab_size = len(tok)
    config.audio_bos_token_id, config.audio_token_id, config.audio_eos_token_id = (
        tok.convert_tokens_to_ids(t) for t in VIBEVOICE_AUDIO_TOKENS)
    text.eos_token_id = text.pad_token_id = tok.eos_token_id
    text.bos_token_id = None
    config.architectures = ["VibeVoiceAsrForConditionalGeneration"]
    tok.chat_template = (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'audio' %}" + "".join(VIBEVOICE_AUDIO_TOKENS) + "\n{% else %}{{ part['text'] }}"
        "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    written = write_random_checkpoint(config, folder, dtype, seed=seed, std=std)
    folder = os.fspath(folder)
    processor = transformers.VibeVoiceAsrProcessor(transformers.VibeVoiceAcousticTokenizerFeatureExtractor(), tok,
                                                   chat_template=tok.chat_template)
    processor.save_pretrained(folder)
    transformers.GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id).save_pretrained(folder)
    return written
