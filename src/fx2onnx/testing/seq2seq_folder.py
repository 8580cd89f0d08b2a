"""Text encoder-decoder checkpoint folders made in code: a tiny T5 or BART (2 layers, width 32) with the tokenizer of
:func:`fx2onnx.testing.tokenizer.tiny_tokenizer` and a generation config, what ``save_pretrained`` writes.

.. code-block:: python

    from fx2onnx.testing.seq2seq_folder import write_text_seq2seq_folder

    write_text_seq2seq_folder("t5_folder", "t5")
"""

from __future__ import annotations

import os
from typing import Any

from .tokenizer import tiny_tokenizer


def text_seq2seq_config(kind: str, vocab_size: int, pad: int, eos: int) -> Any:
    """A tiny ``T5Config`` or ``BartConfig`` (2 encoder and 2 decoder layers, width 32, 4 heads) whose weights are
    drawn wide enough for a random model to generate varied tokens."""
    import transformers

    if kind == "t5":
        return transformers.T5Config(vocab_size=vocab_size, d_model=32, d_kv=8, num_heads=4, num_layers=2,
                                     num_decoder_layers=2, d_ff=64, decoder_start_token_id=pad, pad_token_id=pad,
                                     eos_token_id=eos, initializer_factor=2.0)
    if kind == "bart":
        return transformers.BartConfig(vocab_size=vocab_size, d_model=32, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, max_position_embeddings=64, init_std=0.5,
                                       pad_token_id=pad, eos_token_id=eos, bos_token_id=eos,
                                       decoder_start_token_id=eos, forced_eos_token_id=None)
    raise ValueError(f"kind={kind!r}: use 't5' or 'bart'.")


def write_text_seq2seq_folder(folder: str | os.PathLike, kind: str = "t5", seed: int = 0) -> None:
    """Writes a ``save_pretrained`` folder of a tiny T5 (``kind="t5"``) or BART (``"bart"``) with random weights,
    the tokenizer of :func:`~fx2onnx.testing.tokenizer.tiny_tokenizer` (its end token the pad and end of sequence)
    and its generation config."""
    import torch
    import transformers

    tok = tiny_tokenizer()
    config = text_seq2seq_config(kind, len(tok), tok.pad_token_id, tok.eos_token_id)
    torch.manual_seed(seed)
    model_class = transformers.T5ForConditionalGeneration if kind == "t5" else \
        transformers.BartForConditionalGeneration
    model = model_class(config).eval()
    folder = os.fspath(folder)
    model.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    tok.save_pretrained(folder)
