"""How many candidates a verifying run of speculative decoding checks (:mod:`fx2onnx.runtime.speculative`):
:class:`Backoff`, plain decoding while the candidates keep failing, and :class:`CandidateBudget`, the count giving
the most tokens per second from the measured cost of each run size and the acceptance seen."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Backoff:
    """Plain decoding while the candidates keep failing: after ``n`` verifying runs in a row which
    kept none, no candidate for ``min(2 ** (n - 1), limit)`` steps, then one candidate a run (a verifying
    run computes the head on every candidate: on the benchmark Llama, 10 candidates cost 1.9 plain steps in
    float32, 1 candidate 1.02; int4's kernels, compute-bound there, pay several steps for 5); a run which
    keeps one resets both, the next proposes the source's count."""

    limit: int = 64
    failures: int = 0
    wait: int = 0
    #: the candidates the next run verifies at most (None: the source's count)
    cap: int | None = None

    def allows(self) -> bool:
        """Whether this step may propose (a step waiting counts down)."""
        if self.wait > 0:
            self.wait -= 1
            return False
        return True

    def record(self, accepted: int, proposed: int | None = None) -> None:
        if accepted:
            self.failures, self.cap = 0, None
        else:
            self.failures += 1
            self.wait = min(2 ** (self.failures - 1), self.limit)
            self.cap = 1


class CandidateBudget:
    """How many candidates the next run verifies: the count giving the most tokens per second, from
    the cost of a run of each size seen so far and the acceptance seen.

    A run feeding ``n`` tokens costs :meth:`cost` ``(n)`` seconds (the least measured, the CPU time of the
    calling thread, where onnxruntime runs: the machine's load reaches it less than the wall clock; the process
    CPU clock reads every thread's, the workers spinning on other cores, much slower on a busy machine); ``k``
    candidates give ``1 + a1 + a1 a2 + ... + a1 ... ak`` tokens (``ai``: the share of the candidates kept at place
    ``i`` once the ones before were, decayed counts); a draft adds its cost per candidate. When no count beats a
    plain step, none (:meth:`choose`). On the benchmark Llama in int4, a run of 11 tokens costs 7.5 plain
    steps, one of 6 tokens 2.9: 4 or 5 candidates give more tokens per second than 10. A size never measured is
    tried when it is next to the best one (the costs of the other sizes interpolated): the counts settle in a few
    runs, and the costs are kept for the later generations of the same decoder. ``limit`` caps the count (the
    source's ``num_tokens``)."""

    #: the weight of the counts before each verifying run (the acceptance follows the text)
    decay = 0.9
    #: the plain steps between two probes at most, when no count of candidates gains over a plain step
    max_pause = 32
    #: the plain steps before a probe when no count would gain even with every candidate kept (the costs alone
    #: decide: a draft as costly as its candidates' worth, int4's verifying runs)
    hopeless_pause = 256

    def __init__(self, generator: Any = None):
        self.generator = generator
        #: seconds of a run feeding ``n`` tokens (the least seen)
        self.costs: dict[int, float] = {}
        #: the seconds of proposing, per candidate (a draft's runs) or per run (a lookup: :attr:`per_candidate`)
        self.proposal_cost = 0.0
        self.per_candidate = True
        #: decayed counts of the candidates kept and refused at each place of a run (0: the first candidate); a
        #: lookup's candidates are kept all or none more often than one by one: the first is the likeliest refused
        self.kept: list[float] = [0.0] * 64
        self.refused: list[float] = [0.0] * 64
        #: (limit, pending, the best count, its tokens per second) until the costs or the counts change
        self._scored: tuple[int, int, int, float] | None = None
        self.start()

    def start(self) -> None:
        """A new generation: no plain steps pending (the costs and the counts are kept)."""
        #: plain steps left before the next verifying run (a probe), their next count, a probe due
        self.wait, self.pause, self.probe, self._scored = 0, 1, False, None

    def changed(self) -> None:
        """The costs, the counts or the proposal's cost were set by hand: the best count is computed again."""
        self._scored = None

    def record_run(self, fed: int, seconds: float) -> None:
        """A run of the decoder feeding ``fed`` tokens took ``seconds``."""
        if seconds > 0 and seconds < self.costs.get(fed, float("inf")):
            self.costs[fed] = seconds
            self._scored = None

    def record(self, proposed: int, accepted: int, proposal_seconds: float = 0.0) -> None:
        """A verifying run kept ``accepted`` of ``proposed`` candidates, proposed in ``proposal_seconds``."""
        self.probe, self._scored = False, None
        for i in range(len(self.kept)):
            self.kept[i] *= self.decay
            self.refused[i] *= self.decay
        for i in range(min(accepted + 1, proposed, len(self.kept))):
            if i < accepted:
                self.kept[i] += 1
            else:
                self.refused[i] += 1
        if proposed and proposal_seconds > 0:
            per = proposal_seconds / proposed if self.per_candidate else proposal_seconds
            self.proposal_cost = per if not self.proposal_cost else 0.8 * self.proposal_cost + 0.2 * per

    def acceptance(self, place: int) -> float:
        """The probability the candidate at ``place`` (0: the first) is kept once the ones before it were (a prior of
        0.9 weighing one run)."""
        place = min(place, len(self.kept) - 1)
        return (self.kept[place] + 0.9) / (self.kept[place] + self.refused[place] + 1.0)

    def cost(self, n: int) -> float | None:
        """The seconds of a run feeding ``n`` tokens: measured, or interpolated between the sizes measured
        around it (below every size measured: proportional to the smallest; above: the largest's)."""
        if n in self.costs:
            return self.costs[n]
        lower = max((m for m in self.costs if m < n), default=None)
        upper = min((m for m in self.costs if m > n), default=None)
        if lower is None and upper is None:
            return None
        if lower is None:
            return self.costs[upper] * n / upper
        if upper is None:
            return self.costs[lower]
        return self.costs[lower] + (self.costs[upper] - self.costs[lower]) * (n - lower) / (upper - lower)

    def choose(self, limit: int, pending: int = 1) -> int:
        """The candidates (from 0, a plain step, to ``limit``) the next run verifies after its ``pending`` tokens.

        When no count gives more tokens per second than a plain step (its cost measured: tried once when it
        might be better), the next steps are plain, ``1, 2, 4...`` (at most :attr:`max_pause`) steps before a
        probe verifies the best count again (it updates the counts: a few kept bring the candidates back, and the
        pauses start again from one step; a draft costing more than its candidates give keeps pausing however many
        it gets right)."""
        if self.wait > 0:
            self.wait -= 1
            return 0
        if limit < 1 or not self.costs:
            return max(limit, 0)
        if self._scored is not None and self._scored[:2] == (limit, pending):
            best, score = self._scored[2:]
        else:
            scores, tokens, reached = {}, 1.0, 1.0
            for k in range(1, limit + 1):
                reached *= self.acceptance(k - 1)  # the probability the k-th candidate is kept
                tokens += reached
                cost = self.cost(pending + k)
                scores[k] = tokens / (cost + self.proposal_cost * (k if self.per_candidate else 1))
            best = max(scores, key=scores.__getitem__)
            score = scores[best]
            self._scored = (limit, pending, best, score)
        if self.probe:  # a pause ended: its verifying run updates the counts
            return best
        plain = self.costs.get(pending)
        if plain is None:  # never measured: tried once when it may be faster (proportional below the sizes seen)
            if score * self.cost(pending) < 1.0:
                return 0
        elif score * plain <= 1.0:
            self.wait, self.probe = self.pause - 1, True
            self.pause = min(2 * self.pause, self.max_pause)
            per = self.proposal_cost if self.per_candidate else 0.0
            fixed = 0.0 if self.per_candidate else self.proposal_cost
            if all((1 + k) * plain <= self.cost(pending + k) + per * k + fixed for k in range(1, limit + 1)):
                self.wait = self.hopeless_pause - 1  # every candidate kept would not pay either
            return 0
        self.pause = 1  # candidates pay: the next pause is short
        if pending + best in self.costs:  # its neighbours never measured are tried once
            for k in (best + 1, best - 1):
                if 1 <= k <= limit and pending + k not in self.costs:
                    return k
        return best
