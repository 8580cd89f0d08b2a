"""The choice of the next token from the logits: greedy, or sampled as :epkg:`transformers` samples.

:class:`Sampling` holds the options of ``model.generate`` this loop implements, with the
definitions of transformers' logits processors, applied in the same order on float32 scores:
the repetition penalty (a score of a token already in the sequence, the left pads excluded,
is divided by the penalty when positive, multiplied when negative), then, when sampling,
the temperature (scores divided by it), top-k (scores below the k-th largest set to -inf),
top-p (the smallest scores whose probabilities sum to at most ``1 - top_p`` removed, the
largest always kept); the token is drawn with :func:`torch.multinomial` from the softmax.
Given a seed, the draws come from a generator seeded so, which produces the numbers of
``torch.manual_seed(seed)``: the tokens are those of ``torch.manual_seed(seed);
model.generate(do_sample=True, ...)`` as long as the logits lead to the same choices.

.. code-block:: python

    from fx2onnx.runtime.sampling import Sampling
    sampling = Sampling(do_sample=True, temperature=0.7, top_k=20, top_p=0.9, seed=0)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How the next token is chosen (the defaults of transformers' ``GenerationConfig``).

    :param do_sample: draw the token (False: the largest score, greedy)
    :param temperature: divides the scores before sampling (> 0)
    :param top_k: keep the k largest scores (0 or None: all)
    :param top_p: keep the most likely tokens whose probabilities sum to ``top_p`` (1.0: all)
    :param repetition_penalty: > 1 makes the tokens already in the sequence less likely
        (greedy decoding too)
    :param seed: the seed of the draws (None: torch's global generator)
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}.")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}.")

    @property
    def needs_logits(self) -> bool:
        """Whether the choice needs the scores (False: the argmax of the logits is enough)."""
        return self.do_sample or self.repetition_penalty != 1.0

    def chooser(self) -> "TokenChooser":
        """A chooser for one generation (it owns the generator of the draws)."""
        return TokenChooser(self)


class TokenChooser:
    """Chooses the next tokens of one generation from the last logits (see :class:`Sampling`)."""

    def __init__(self, sampling: Sampling):
        import torch

        self.sampling = sampling
        self._torch = torch
        self.generator = None if sampling.seed is None else torch.Generator().manual_seed(int(sampling.seed))

    def __call__(self, logits: np.ndarray, sequences: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The next token of each sequence.

        :param logits: ``(batch, vocabulary)`` scores of the last position
        :param sequences: ``(batch, length)`` the tokens so far (prompt included)
        :param mask: ``(batch, length)`` 0 on the left pads of the prompt, 1 elsewhere
        :return: ``(batch,)`` int64
        """
        torch, s = self._torch, self.sampling
        scores = self.scores(logits, sequences, mask)
        if not s.do_sample:
            return torch.argmax(scores, dim=-1).numpy().astype(np.int64)
        probs = softmax_rows(scores)
        return torch.multinomial(probs, num_samples=1, generator=self.generator).squeeze(1).numpy().astype(np.int64)

    def scores(self, logits: np.ndarray, sequences: np.ndarray, mask: np.ndarray) -> Any:
        """The scores the token is chosen from, a ``(batch, vocabulary)`` :class:`torch.Tensor`: the
        logits after the repetition penalty, and when sampling the temperature, top-k and top-p
        (-inf for the tokens removed), as transformers' logits processors leave them."""
        torch, s = self._torch, self.sampling
        scores = torch.from_numpy(np.asarray(logits, dtype=np.float32))
        if s.repetition_penalty != 1.0:
            scores = _repetition_penalty(torch, scores, torch.from_numpy(sequences), torch.from_numpy(mask),
                                         s.repetition_penalty)
        if not s.do_sample:
            return scores
        if s.temperature != 1.0:
            scores = scores / s.temperature
        if s.top_k:
            kth = torch.topk(scores, min(s.top_k, scores.shape[-1]))[0][..., -1, None]
            scores = scores.masked_fill(scores < kth, -float("inf"))
        if s.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=False)
            remove = sorted_scores.softmax(dim=-1).cumsum(dim=-1) <= (1 - s.top_p)
            remove[..., -1:] = False
            scores = scores.masked_fill(remove.scatter(1, order, remove), -float("inf"))
        return scores


def softmax_rows(scores: Any) -> Any:
    """The softmax of each row of a 2D :class:`torch.Tensor`, one row at a time: the same values as
    ``scores.softmax(dim=-1)``, without torch's parallel loop over the rows, whose threads cost milliseconds
    to wake on a busy machine (2.8 ms for 2 rows of 128 with 2 threads against 2 us with one)."""
    if scores.shape[0] == 1:
        return scores.softmax(dim=-1)
    import torch

    return torch.cat([row.softmax(dim=-1) for row in scores.split(1)])


def _repetition_penalty(torch: Any, scores: Any, sequences: Any, mask: Any, penalty: float) -> Any:
    """Penalizes the scores of the tokens present in ``sequences`` where ``mask`` (of the same
    shape) is not 0: the pads are sent to an extra column, dropped after."""
    vocabulary = scores.shape[-1]
    ids = sequences.masked_fill(mask == 0, vocabulary)
    ids = ids.clamp(max=vocabulary)
    padded = torch.nn.functional.pad(scores, (0, 1))
    chosen = torch.gather(padded, 1, ids)
    chosen = torch.where(chosen < 0, chosen * penalty, chosen / penalty)
    return padded.scatter(1, ids, chosen)[..., :vocabulary]
