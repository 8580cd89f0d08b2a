"""A tokenizer made in code, and a checkpoint folder with it: what a published folder holds,
without a download.

:func:`tiny_tokenizer` trains a byte-level BPE tokenizer
on a few sentences of this module, with the special tokens of a chat model and a chat
template; :func:`write_checkpoint_folder` writes a ``save_pretrained`` folder: random
weights of a config (seeded, one tensor at a time, never the whole model in memory), the
tokenizer and a generation config.

.. code-block:: python

    import transformers
    from fx2onnx.testing.tokenizer import write_checkpoint_folder

    config = transformers.Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      vocab_size=512, architectures=["Qwen3ForCausalLM"])
    write_checkpoint_folder(config, "qwen3_folder", dtype="bfloat16")
"""

from __future__ import annotations

import os
from typing import Any

from ..weights import write_random_checkpoint

#: what the tokenizer learns from
CORPUS = (
    "The exporter converts the graph of a PyTorch model into an ONNX model, one operator at a time.",
    "A checkpoint folder holds a config, the weights, a tokenizer and a generation config.",
    "onnxruntime runs the model on the CPU; the cache of keys and values stays in its memory.",
    "Write a short story about a robot learning to paint the sea at night.",
    "What is the capital of France? Paris is the capital of France.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Punctuation: , . ; : ! ? ( ) [ ] { } ' \" - _ / \\",
    "hello world, hello again, the quick brown fox jumps over the lazy dog.",
    "A list:\n- one\n- two\n\tindented; LETTERS: ABCDEFGHIJKLMNOPQRSTUVWXYZ, letters: abcdefghijklmnopqrstuvwxyz",
)
#: the special tokens (Qwen's chat markers) and the chat template using them
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
UNKNOWN = "<unk>"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer(vocab_size: int = 384) -> Any:
    """A BPE :class:`transformers.PreTrainedTokenizerFast` of at most ``vocab_size`` tokens
    trained on :data:`CORPUS` (its characters, then merges), with a chat template;
    ``<|endoftext|>`` is the end of sequence and the pad token, ``<unk>`` a character the
    corpus does not have."""
    import tokenizers
    import transformers

    if vocab_size < 128:
        raise ValueError(f"vocab_size must be at least 128 (the characters of the corpus and merges), not {vocab_size}.")
    # byte-level (as GPT-2's, Llama 3's, Qwen's), its alphabet the corpus' characters only: every token
    # decodes to printable text, even when a random model draws them
    model = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token=UNKNOWN))
    model.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[*SPECIAL_TOKENS, UNKNOWN], show_progress=False,
    )
    model.train_from_iterator(CORPUS, trainer=trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=model, eos_token=SPECIAL_TOKENS[0], pad_token=SPECIAL_TOKENS[0],
        unk_token=UNKNOWN, chat_template=CHAT_TEMPLATE,
    )


def tiny_qwen3_config(**overrides: Any) -> Any:
    """A Qwen3 decoder of 2 layers and 64 hidden units over :func:`tiny_tokenizer`'s 384 tokens (grouped-query
    attention, tied embeddings), the tests' checkpoint; ``overrides`` change any field."""
    import transformers  # deferred: heavy

    values = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=384, max_position_embeddings=256,
                  architectures=["Qwen3ForCausalLM"], tie_word_embeddings=True)
    values.update(overrides)
    return transformers.Qwen3Config(**values)


def write_checkpoint_folder(
    config: Any, folder: str | os.PathLike, dtype: str = "bfloat16", *, seed: int = 0, tokenizer: bool = True,
    std: float | None = None,
) -> dict[str, Any]:
    """Writes a ``save_pretrained`` folder of the model of ``config``: random weights
    (:func:`fx2onnx.weights.write_random_checkpoint`), the tokenizer of :func:`tiny_tokenizer`
    (of ``config.vocab_size`` tokens at most, when ``tokenizer``: ``config.vocab_size`` becomes
    its size) and a generation config whose end of sequence is the tokenizer's.

    :param std: the standard deviation of the weights (see :func:`fx2onnx.weights.write_random_checkpoint`;
        a tiny model needs larger weights than 0.02 to generate varied tokens)

    :return: what :func:`fx2onnx.weights.write_random_checkpoint` returns
    """
    import transformers

    tok = tiny_tokenizer(min(config.vocab_size, 384)) if tokenizer else None
    if tok is not None:
        config.vocab_size = len(tok)  # the model generates the tokens the tokenizer has
        config.eos_token_id = config.pad_token_id = tok.eos_token_id
        try:
            config.bos_token_id = None
        except Exception:  # noqa: BLE001 - a configuration whose bos_token_id must be a token: the tokenizer's
            config.bos_token_id = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    written = write_random_checkpoint(config, folder, dtype, seed=seed, std=std)
    if tok is not None:
        tok.save_pretrained(os.fspath(folder))
    generation = transformers.GenerationConfig(
        eos_token_id=getattr(config, "eos_token_id", None), pad_token_id=getattr(config, "pad_token_id", None),
        bos_token_id=getattr(config, "bos_token_id", None),
    )
    generation.save_pretrained(os.fspath(folder))
    return written
