"""The benchmark Llama with trained-like weights: briefly trained on a synthetic, text-like corpus.

A model with random weights predicts nearly uniform logits over its 32000 tokens (the two
best differ by ~0.1 on average): any quantization noise flips its greedy token, which says
nothing of how a trained LLM behaves. This module trains the benchmark Llama of
``bench_models.py`` (hidden 512, 4 layers, 8 heads, 2 kv heads, ffn 1376, vocabulary 32000)
for a few hundred steps, on CPU, seeded, on a corpus drawn from a deterministic process
with the structure of text:

* 256 *words*, each spelled with 1 to 3 tokens (*subwords*) taken from 1024 tokens of the
  vocabulary (the other 30976 tokens never occur, as rare tokens in a real corpus);
* a text is a chain of words: each word is followed by one of 4 words chosen for it, with
  probabilities 1/i^1.5 normalized (0.60, 0.21, 0.12, 0.07), the first word of a text drawn
  with Zipf frequencies (1/rank).

The next token is certain inside a word (the model has to tell which word it is in from the
previous tokens) and follows the word chain at a word's start; a perfect model has a loss of
about 0.55 nat per token. Greedy generation from such a model is confident, as a trained
LLM's is, which makes an accuracy measurement of quantization meaningful; it is still a tiny
model trained for minutes, not a language model.

Training: 200 steps of 8 texts of 64 tokens, AdamW (learning rate 3e-3, cosine schedule),
one thread: the loss goes from 10.4 to 0.77. A step takes about 2.8 s on an idle core (the
32000-token ``lm_head`` is most of it), so about 9 minutes; it took 24 minutes on the shared,
loaded 2-core machine of the measurements. The weights are cached outside the repository (``$FX2ONNX_CACHE`` or ``~/.cache/fx2onnx``)
under a name holding the settings; a missing file is trained again, with the same result on
the same machine and versions (seeded, deterministic algorithms).

    python bench/trained_llama.py [--steps 300] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import Any

import numpy as np
import torch

#: the benchmark Llama of bench_models.py (the quick one: its tiny version)
CONFIG = dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
              intermediate_size=1376, vocab_size=32000)
QUICK_CONFIG = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=128, vocab_size=1024)


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A deterministic, text-like token process (see the module's docstring)."""

    vocab_size: int
    n_words: int = 256
    n_tokens: int = 1024
    successors: int = 4
    seed: int = 1234

    def tables(self) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """(spelling of each word, successors of each word, their probabilities, first-word frequencies)"""
        rng = np.random.RandomState(self.seed)
        n_tokens = min(self.n_tokens, self.vocab_size - 3)
        pool = rng.permutation(np.arange(3, self.vocab_size))[:n_tokens]
        lengths = rng.randint(1, 4, size=self.n_words)
        spelling = [pool[rng.randint(0, n_tokens, size=n)] for n in lengths]
        successors = np.stack([rng.choice(self.n_words, self.successors, replace=False) for _ in range(self.n_words)])
        probs = 1.0 / np.arange(1, self.successors + 1) ** 1.5
        first = 1.0 / np.arange(1, self.n_words + 1)
        return spelling, successors, probs / probs.sum(), first / first.sum()

    def sample(self, batch: int, length: int, seed: int) -> torch.Tensor:
        """``batch`` texts of ``length`` tokens (int64), the same for the same seed."""
        spelling, successors, probs, first = self.tables()
        rng = np.random.RandomState(seed)
        rows = []
        for _ in range(batch):
            word = rng.choice(self.n_words, p=first)
            tokens: list[int] = []
            while len(tokens) < length:
                tokens.extend(int(t) for t in spelling[word])
                word = successors[word, rng.choice(self.successors, p=probs)]
            rows.append(tokens[:length])
        return torch.tensor(rows, dtype=torch.int64)


def cache_path(quick: bool, steps: int) -> str:
    root = os.environ.get("FX2ONNX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "fx2onnx"))
    return os.path.join(root, f"llama_{'quick' if quick else 'bench'}_words256_steps{steps}_seed0.pt")


def train(model: torch.nn.Module, corpus: Corpus, steps: int, batch: int, length: int, lr: float,
          verbose: bool = False) -> list[float]:
    """AdamW, cosine schedule after a short warm-up; returns the loss of every step."""
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + np.cos(np.pi * min(1.0, s / steps))))
    model.train()
    losses = []
    begin = time.perf_counter()
    for step in range(steps):
        ids = corpus.sample(batch, length, seed=10_000 + step)
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if verbose and (step % 25 == 0 or step == steps - 1):
            print(f"step {step:4d} loss {losses[-1]:.3f} ({time.perf_counter() - begin:.0f} s)")
    model.eval()
    return losses


def trained_llama(quick: bool = False, steps: int | None = None, verbose: bool = False) -> Any:
    """The :class:`fx2onnx.zoo.TinyModel` of the benchmark Llama (sdpa, with a cache, the
    model's eos disabled), its weights trained (loaded from the cache when there)."""
    from fx2onnx.zoo import get_tiny_model

    steps = steps or (150 if quick else 200)
    config = QUICK_CONFIG if quick else CONFIG
    tiny = get_tiny_model("llama", with_cache=True, attn_implementation="sdpa", max_position_embeddings=512,
                          **config)
    tiny.model.generation_config.eos_token_id = None
    path = cache_path(quick, steps)
    if os.path.exists(path):
        tiny.model.load_state_dict(torch.load(path, weights_only=True))
        return tiny
    losses = train(tiny.model, Corpus(config["vocab_size"]), steps, batch=8, length=64,
                   lr=3e-3, verbose=verbose)
    if verbose:
        print(f"final loss {np.mean(losses[-10:]):.3f} (mean of the last 10 steps)")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(tiny.model.state_dict(), path + ".tmp")
    os.replace(path + ".tmp", path)
    return tiny


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    trained_llama(args.quick, args.steps, verbose=True)
