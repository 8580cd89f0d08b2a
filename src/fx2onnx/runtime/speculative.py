"""Several tokens per run of the decoder: prompt lookup and draft-model speculative decoding.

A decoder step reads every weight to produce one token; a *verifying run* feeds the pending
token and ``k`` candidate tokens at once and reads the logits of the ``k + 1`` positions: the
candidates the model agrees with (greedy: each is the argmax of the position before it) are kept,
with the model's own token after them, so that one run produces from 1 to ``k + 1`` tokens, and
exactly the tokens plain greedy decoding gives. The cache keeps the prefix that agrees: with the
cache updated in place (:mod:`fx2onnx.optimizer.rules.cache_in_place`) its valid length is a counter
(the positions after it are overwritten by the next run), a concatenated cache is cut. A recurrent
state (a hybrid decoder's convolution or SSM state: LFM2, Jamba) cannot be cut: the cache before each run is
kept (a snapshot, no copy) and a rollback goes back to it, the next run feeding the kept tokens again with
its candidates (no extra run).

Two sources of candidates, as :epkg:`transformers` defines them:

* :class:`PromptLookup` (``generate(..., prompt_lookup_num_tokens=N)``): the tokens that followed
  the first (or last) earlier occurrence of the last ``max_matching_ngram_size`` (then fewer) tokens;
* :class:`DraftModel` (``generate(..., assistant_model=draft)``): a smaller decoder of the same
  vocabulary proposes ``num_assistant_tokens`` tokens greedily (fewer once its probability of a
  token falls under ``assistant_confidence_threshold``), its own cache rolled back the same way.

Sampled (``do_sample``), each verified position's token is drawn from its processed scores and the
candidates are kept up to the first which differs (prompt lookup), or by transformers' speculative
sampling with a draft's scores (a candidate kept with probability ``min(1, p / q)``, the token after a
rejected one drawn from ``max(p - q, 0)`` normalized). What is identical then is the distribution: the
tokens follow the model's own (tested with a chi-square over many seeds), and at a temperature near 0
they are greedy's. The same seed does not give transformers' tokens: the draws are the same numbers in
the same order only while both loops verify the same candidates from the same logits (the backoff below,
float rounding, transformers' own draws for its draft), so the sequences agree over their first tokens
at best, then part.

When the candidates keep failing, the loop backs off to plain decoding (:class:`~fx2onnx.runtime.candidate_budget.Backoff`): after a
verifying run that kept none, it proposes nothing for 1, 2, 4... steps (at most 64), then one candidate;
a run that keeps one resets it. Each run verifies as many candidates as give the most tokens per second
(:class:`~fx2onnx.runtime.candidate_budget.CandidateBudget`: the cost of a run of each size measured as it runs, the share of candidates kept),
none when no count gains over a plain step (a draft's runs counted: a weak or costly draft then decodes plainly,
a probe after 1, 2, 4... 32 plain steps finding out when candidates pay again):
a verifying run's cost grows with its candidates (in int4 much faster than in float32), so that the source's
count (``num_tokens``, ``num_assistant_tokens``) is a limit (``Speculation.adaptive = False``: the source's count,
as transformers' loop). The decoder must return the logits of several positions:
a folder's decoder does (``export`` writes the logits of the last :data:`VERIFY_TOKENS` positions in a
second output, :data:`VERIFY_LOGITS`), or one exported with every position's logits.

.. code-block:: python

    from fx2onnx.runtime.folder import FolderGenerator
    from fx2onnx.runtime.speculative import DraftModel, PromptLookup

    gen = FolderGenerator("llama_onnx")
    gen.generator.speculation = PromptLookup(10)  # or DraftModel("draft_onnx")
    print(gen.generate_text("Repeat: the cat sat on the mat.", 30).text)
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable, Sequence

import numpy as np

from ..ort_values import ort_value_to_numpy
from .candidate_budget import Backoff, CandidateBudget
from .folder import FOLDER_METADATA, _read_json, session_options
from .generate import _RECURRENT, GenerationTimes, OnnxGenerator, _check_inputs, _empty_array, _ortvalue
from .sampling import softmax_rows

#: the output holding the logits of the last positions of a run (a folder's decoder)
VERIFY_LOGITS = "verify_logits"
#: the model's metadata key giving how many positions :data:`VERIFY_LOGITS` holds at most
VERIFY_METADATA_KEY = "fx2onnx.verify_logits"
#: the positions a folder's decoder returns the logits of (a verifying run checks 15 candidates)
VERIFY_TOKENS = 16
#: the decoder's output of its last hidden states, every position of a run (a folder exported with a
#: multi-token-prediction head, :mod:`fx2onnx.deploy.mtp`)
HIDDEN_OUTPUT = "hidden_states"
#: the multi-token-prediction head of a folder
MTP_FILE = "onnx/mtp.onnx"


@dataclasses.dataclass
class SpeculativeTimes(GenerationTimes):
    """:class:`GenerationTimes` of a speculative generation, with what the candidates gave."""

    #: runs of the decoder after the prompt's
    target_runs: int = 0
    #: runs which verified candidates, candidates proposed, candidates kept
    verifying_runs: int = 0
    proposed: int = 0
    accepted: int = 0
    #: seconds spent proposing (the draft model's runs included)
    propose_total: float = 0.0
    #: the candidates each run after the prompt's verified (0: a plain step)
    run_candidates: list[int] = dataclasses.field(default_factory=list)

    @property
    def mean_acceptance_length(self) -> float:
        """New tokens per run of the decoder after the prompt (1.0: plain decoding)."""
        return self.decode_steps / self.target_runs if self.target_runs else float("nan")

    @property
    def acceptance_rate(self) -> float:
        """The share of the proposed candidates the decoder agreed with."""
        return self.accepted / self.proposed if self.proposed else float("nan")


class SequenceDecoder:
    """The decoder of an :class:`OnnxGenerator` run on one sequence, several tokens per run, its
    cache rolled back to any shorter length (:meth:`rollback`).

    A recurrent state (the convolution and SSM states of a hybrid decoder, LFM2, Jamba...) cannot be cut:
    each run keeps a snapshot of the cache before it (the values onnxruntime returned, no copy) and a
    rollback goes back to the last snapshot at or before the length asked; the caller feeds the tokens
    after :attr:`length` again with its next run (one run verifies them with the new candidates).

    :param generator: the decoder; it must return the logits of several positions
        (:data:`VERIFY_LOGITS`, or ``logits`` of every position) and hold keys and values, and recurrent
        states when its cache is concatenated (not updated in place)
    """

    def __init__(self, generator: OnnxGenerator, extra_outputs: Sequence[str] = ()):
        sig = generator.signature
        self.generator = generator
        #: other outputs read at each run (:data:`HIDDEN_OUTPUT`), their values after the last run in :attr:`extras`
        self.extra_outputs = tuple(extra_outputs)
        self.extras: list[np.ndarray] = []
        absent = [n for n in self.extra_outputs if n not in {o.name for o in generator.session.get_outputs()}]
        if absent:
            raise ValueError(f"The decoder has no outputs {absent}: export the folder again with its head.")
        session = generator.session
        outputs = {o.name: o for o in session.get_outputs()}
        metadata = session.get_modelmeta().custom_metadata_map
        if VERIFY_LOGITS in outputs and VERIFY_METADATA_KEY in metadata:
            #: the output read, and the count of positions it holds at most (None: every one)
            self.rows_output, self.max_rows = VERIFY_LOGITS, int(metadata[VERIFY_METADATA_KEY])
        else:
            shape = outputs[sig.logits].shape
            if len(shape) == 3 and shape[1] == 1:
                raise ValueError("The decoder returns the logits of the last position only: a verifying run needs "
                                 "several; export the folder again (it then writes verify_logits) or with "
                                 "--all-logits.")
            self.rows_output, self.max_rows = sig.logits, None
        if sig.constants:
            raise ValueError(f"Speculative decoding runs a text decoder: this one takes {list(sig.constants)} too.")
        keys, states = set(), set()
        for name, _, shape, _ in sig.cache:
            if len(shape) == 4 and shape.count(0) == 1 and shape.index(0) == 2:
                keys.add(name)
            elif 0 not in shape and _RECURRENT.search(name):
                states.add(name)
            else:
                raise ValueError(f"The cache input {name!r} (initial shape {shape}) cannot be rolled back to fewer "
                                 "tokens (a sliding window's count): speculative decoding needs keys and values, "
                                 "and recurrent states.")
        if states and generator.in_place:
            raise ValueError(f"The decoder updates its keys in place and holds recurrent states ({sorted(states)}): "
                             "their snapshots need the concatenated cache (export without the in-place rule).")
        #: the cache holds recurrent states: a rollback goes back to a snapshot
        self.recurrent = bool(states)
        self._snapshots: list[tuple[int, list[Any], list[Any]]] = []
        lengths = {i.shape[2] for i in session.get_inputs() if i.name in keys}
        if len(lengths) > 1:
            raise ValueError(f"The cache holds keys of several lengths ({sorted(map(str, lengths))}: sliding "
                             "windows), which cannot be rolled back: speculative decoding needs full-length caches.")
        self.length = 0
        self._ones = np.ones((1, 0), dtype=np.int64)
        self._positions = np.zeros((1, 0), dtype=np.int64)
        self._binding: Any = None
        self._past: list[Any] = []
        # one-token runs (a draft's steps) with the cache in place: the token and its position written into two
        # arrays bound once, the logits into an array bound once (no value wrapped), as the plain loop's steps
        self._one_ids = np.zeros((1, 1), dtype=np.int64)
        self._one_position = np.zeros((1, 1), dtype=np.int64)
        self._one_rows: np.ndarray | None = None
        self._one_rows_value: Any = None
        #: the last run fed one token through the arrays bound once
        self._one_bound = self._one_tried = False

    @property
    def max_candidates(self) -> int | None:
        """The candidates one run verifies at most (None: no limit)."""
        return None if self.max_rows is None else self.max_rows - 1

    def start(self, prompt: Sequence[int], room: int) -> np.ndarray:
        """Runs the prompt with an empty cache (room for ``room`` more tokens before the buffers
        grow); returns the logits of its last positions, ``(rows, vocabulary)`` float32."""
        gen, sig = self.generator, self.generator.signature
        self.length = 0
        self._snapshots = []
        empty = [_empty_array(shape, 1, type_) for _, _, shape, type_ in sig.cache]
        if gen.in_place:
            self._one_bound, self._one_rows, self._one_tried = False, None, False
            self._capacity = len(prompt) + room
            self._binding = gen._bind_in_place(empty, self._capacity, [], self.rows_output)
            for name in self.extra_outputs:  # after the cache's outputs: their places in get_outputs()
                self._binding.bind_output(name, "cpu")
        else:
            from onnxruntime import OrtValue

            self._kept = empty
            self._past = [OrtValue(_ortvalue(gen._C, a, t, gen._device)) for a, (_, _, _, t) in zip(empty, sig.cache)]
        return self.run(prompt)

    def run(self, tokens: Sequence[int]) -> np.ndarray:
        """Feeds ``tokens`` after the cache; returns the logits of their last positions (all of them
        when the decoder keeps enough), ``(rows, vocabulary)`` float32 (a one-token run's may be a view of a
        buffer the next run writes: read it before)."""
        gen, sig = self.generator, self.generator.signature
        n = len(tokens)
        total = self.length + n
        if self._ones.shape[1] < total:  # the mask and the positions of a run are views of these
            self._ones = np.ones((1, max(2 * total, 64)), dtype=np.int64)
            self._positions = np.arange(self._ones.shape[1], dtype=np.int64)[None]
        if n == 1 and self._one_rows is not None and not self.extra_outputs and total <= self._capacity:
            return self._run_one(int(tokens[0]), total)
        ids = np.array([tokens], dtype=np.int64)
        feeds = {"input_ids": ids}
        if sig.has_attention_mask:
            feeds["attention_mask"] = self._ones[:, :total]
        if sig.has_position_ids:
            feeds["position_ids"] = self._positions[:, self.length:total]
        if self._binding is not None:
            binding = self._binding
            if total > self._capacity:
                self._capacity = max(2 * self._capacity, total)
                gen._grow_in_place(binding, self._capacity, [full for full, _ in gen._buffers])
            # onnxruntime's C++ binding and session: their Python wrappers check options (graph capture) which
            # cost more than the binding on a small draft's steps; the arrays stay alive until the run ends
            native = binding._iobinding
            for name, value in feeds.items():
                native.bind_input(name, value)
            binding.bind_output(self.rows_output, "cpu")
            for name in self.extra_outputs:
                binding.bind_output(name, "cpu")
            self._one_bound = False
            gen.session._sess.run_with_iobinding(native, gen._run_options)
            values = native.get_outputs()
            value = values[0]
            extras = [values[1 + len(sig.cache) + i] for i in range(len(self.extra_outputs))]
            if n == 1 and self._one_rows is None and not self.extra_outputs and not self._one_tried:
                self._one_tried = True  # None: a type read otherwise (bfloat16), the general path then
                self._one_rows = gen._bind_step_output(binding, self.rows_output, value)
                self._one_rows_value = getattr(gen, "_step_output", None)
                binding.bind_output(self.rows_output, "cpu")  # bound to its array by the next one-token run
        else:
            from onnxruntime import OrtValue

            if self.recurrent:  # the cache before the run (onnxruntime returns new values: nothing is copied)
                self._snapshots.append((self.length, self._past, self._kept))
            ort_feeds = {name: OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)) for name, v in feeds.items()}
            ort_feeds.update({name: past for (name, _, _, _), past in zip(sig.cache, self._past)})
            fetched = gen.session.run_with_ort_values(
                [self.rows_output] + [out for _, out, _, _ in sig.cache] + list(self.extra_outputs), ort_feeds)
            value, self._past = fetched[0], list(fetched[1: 1 + len(sig.cache)])
            extras = list(fetched[1 + len(sig.cache):])
        self.length = total
        self.extras = [ort_value_to_numpy(v) for v in extras]
        rows = ort_value_to_numpy(value)[0]
        return rows if rows.dtype == np.float32 else rows.astype(np.float32)

    def _run_one(self, token: int, total: int) -> np.ndarray:
        """:meth:`run` of one token with the cache in place: two arrays and the logits' array bound once."""
        gen, sig = self.generator, self.generator.signature
        native = self._binding._iobinding
        self._one_ids[0, 0] = token
        self._one_position[0, 0] = self.length
        if not self._one_bound:
            from_numpy = gen._C.OrtValue.ortvalue_from_numpy
            native.bind_ortvalue_input("input_ids", from_numpy(self._one_ids, gen._device))
            if sig.has_position_ids:
                native.bind_ortvalue_input("position_ids", from_numpy(self._one_position, gen._device))
            self._binding.bind_ortvalue_output(self.rows_output, self._one_rows_value)
            self._one_bound = True
        if sig.has_attention_mask:
            native.bind_input("attention_mask", self._ones[:, :total])
        gen.session._sess.run_with_iobinding(native, gen._run_options)
        self.length = total
        self.extras = []
        rows = self._one_rows[0]
        return rows if rows.dtype == np.float32 else rows.astype(np.float32)

    def rollback(self, length: int) -> None:
        """Keeps the first ``length`` positions of the cache (the others are forgotten); with recurrent
        states, the positions of the last snapshot at or before ``length`` (:attr:`length` tells which)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"Cannot roll a cache of {self.length} positions back to {length}.")
        if self.recurrent:
            if length < self.length:
                self.length, self._past, self._kept = max((s for s in self._snapshots if s[0] <= length),
                                                          key=lambda s: s[0])
            self._snapshots = []  # a rollback never goes before the length kept
            return
        if length < self.length and self._binding is None:
            from onnxruntime import OrtValue

            gen = self.generator
            self._kept, past = [], []
            for value, (_, _, _, type_) in zip(self._past, gen.signature.cache):
                array = np.ascontiguousarray(ort_value_to_numpy(value)[:, :, :length])
                if type_ == "tensor(bfloat16)":
                    array = array.view(np.uint16)
                self._kept.append(array)
                past.append(OrtValue(_ortvalue(gen._C, array, type_, gen._device)))
            self._past = past
        self.length = length


class Speculation:
    """The verifying loop; a subclass proposes the candidates (:meth:`propose`)."""

    #: back off to plain decoding when candidates keep failing (see :class:`~fx2onnx.runtime.candidate_budget.Backoff`)
    backoff: bool = True
    #: choose each run's count of candidates from the cost of the runs and the acceptance seen
    #: (:class:`~fx2onnx.runtime.candidate_budget.CandidateBudget`); False: the source's count (transformers' loop)
    adaptive: bool = True
    #: proposing costs a run per candidate (a draft model), not one search per run (prompt lookup)
    proposes_by_runs: bool = False
    #: outputs of the decoder :meth:`observe` reads beside the logits
    target_outputs: tuple[str, ...] = ()

    def reset(self, eos: set[int], chooser: Any = None) -> None:
        """Called at the start of a generation (``chooser``: the :class:`fx2onnx.runtime.sampling.TokenChooser`
        of a sampled one, None when greedy)."""
        self.eos, self.chooser = eos, chooser
        #: the scores a draft sampled its candidates from, ``(candidates, vocabulary)`` (None: no draft, or greedy)
        self.candidate_scores: Any = None

    @property
    def max_count(self) -> int | None:
        """The candidates a run gets at most from this source (None: no limit of its own)."""
        return None

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """At most ``k`` candidates to follow ``tokens`` (the prompt and the tokens generated)."""
        raise NotImplementedError

    def update(self, proposed: int, accepted: int) -> None:
        """Told how many of the ``proposed`` candidates the decoder kept."""

    def observe(self, target: "SequenceDecoder", start: int, valid: int, tokens: list[int]) -> None:
        """Told after each run of the decoder: it fed the positions from ``start``, the first ``valid`` of which
        hold (``target.extras``: the run's :attr:`target_outputs`); ``tokens`` is the sequence after the run."""

    def generate(
        self,
        generator: OnnxGenerator,
        input_ids: Any,
        max_new_tokens: int,
        attention_mask: Any = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        sampling: Any = None,
        streamer: Callable[[np.ndarray], None] | None = None,
    ) -> Any:
        """Generates one sequence, several tokens per run, as transformers' assisted generation does: the
        first run takes the prompt and the first candidates; greedy, the tokens of
        :meth:`OnnxGenerator.generate`; sampled (``sampling``), each position's token drawn from its
        processed scores and the candidates kept up to the first which differs, or with a draft's scores,
        transformers' speculative sampling (a candidate kept with probability ``min(1, p / q)``, the token
        after a rejected one drawn from ``max(p - q, 0)``). ``generator.last_times`` is a
        :class:`SpeculativeTimes`."""
        ids, mask, as_torch = _check_inputs(input_ids, attention_mask, max_new_tokens)
        if ids.shape[0] != 1 or not mask.all():
            raise ValueError(f"Speculative decoding generates one sequence without padding (as transformers' "
                             f"assisted generation), not a batch of {ids.shape[0]}.")
        if getattr(self, "decoder", None) is not None and self.decoder.generator is generator:
            raise ValueError("A model cannot be its own draft (one cache for both): open the draft apart, "
                             "DraftModel(folder) or DraftModel(OnnxGenerator(path)).")
        chooser = sampling.chooser() if sampling is not None and sampling.needs_logits else None
        eos = set() if eos_token_id is None else {int(e) for e in np.atleast_1d(eos_token_id)}
        target = SequenceDecoder(generator, self.target_outputs)
        self.reset(eos, chooser)
        backoff = Backoff() if self.backoff else None
        budget = None
        if self.adaptive:  # the costs measured stay with the decoder: kept for its next generations
            budget = getattr(self, "_budget", None)
            if budget is None or budget.generator is not generator:
                budget = self._budget = CandidateBudget(generator)
                budget.per_candidate = self.proposes_by_runs
            budget.start()
        times = SpeculativeTimes()
        clock = time.thread_time  # the CPU time of this thread, where onnxruntime runs (its workers beside it)
        tokens, new = ids[0].tolist(), 0
        limit = target.max_candidates
        begin = time.perf_counter()
        while new < max_new_tokens and (new == 0 or tokens[-1] not in eos):
            step = time.perf_counter()
            k = max_new_tokens - new - 1 if limit is None else min(max_new_tokens - new - 1, limit)
            candidates: list[int] = []
            self.candidate_scores = None
            if backoff is not None and backoff.cap is not None:
                k = min(k, backoff.cap)
            if backoff is not None and not backoff.allows():
                k = 0
            if budget is not None and k > 0:
                k = budget.choose(min(k, self.max_count or k), len(tokens) - target.length)
            chosen = clock()
            # a recurrent state's first snapshot is the empty cache: the prompt runs alone, not run twice
            if k > 0 and not (target.recurrent and target.length == 0):
                candidates = [int(c) for c in self.propose(tokens, k)][:k]
            proposed, proposal_cpu = time.perf_counter(), clock()
            feed = tokens[target.length:] + candidates
            if target.length == 0:
                rows = target.start(feed, min(max_new_tokens, generator.cache_chunk) + (target.max_rows or 0))
            else:
                rows = target.run(feed)
                if budget is not None:
                    budget.record_run(len(feed), clock() - proposal_cpu)
            model_time = time.perf_counter() - proposed
            accepted = self._select(rows[-len(candidates) - 1:], tokens, candidates)
            m = len(accepted) - 1
            for i, t in enumerate(accepted):
                if t in eos:
                    accepted = accepted[: i + 1]
                    break
            start = target.length - len(feed)
            target.rollback(len(tokens) + m)
            self.observe(target, start, len(feed) - len(candidates) + m, tokens + accepted)
            if candidates:
                self.update(len(candidates), m)
                if budget is not None:
                    # the first run's proposal holds a draft's own prompt run: not a cost of its candidates
                    budget.record(len(candidates), m, proposal_cpu - chosen if times.prefill_total else 0.0)
                if backoff is not None:
                    backoff.record(m, len(candidates))
                times.verifying_runs += 1
                times.proposed += len(candidates)
                times.accepted += m
            tokens += accepted
            new += len(accepted)
            if streamer is not None:
                for t in accepted:
                    streamer(np.array([t], dtype=np.int64))
            elapsed = time.perf_counter() - step
            times.propose_total += proposed - step
            if times.prefill_total == 0.0:
                times.prefill_total, times.prefill_model = time.perf_counter() - begin, model_time
                first = new
            else:
                times.target_runs += 1
                times.run_candidates.append(len(candidates))
                times.decode_total += elapsed
                times.decode_model += model_time
                times.step_overheads.append(elapsed - model_time)
        times.decode_steps = new - first
        generator.last_times = times
        result = np.array([tokens[: ids.shape[1] + max_new_tokens]], dtype=np.int64)
        if as_torch:
            import torch

            return torch.from_numpy(result)
        return result

    def _select(self, rows: np.ndarray, tokens: list[int], candidates: list[int]) -> list[int]:
        """The candidates kept and the token after them, from the logits of the pending position and of
        every candidate, ``rows`` (``(1 + candidates, vocabulary)``)."""
        chooser, n = self.chooser, len(candidates)
        if chooser is None:  # greedy: the candidates equal to the argmax of the position before
            predicted = rows.argmax(axis=-1)
            m = 0
            while m < n and candidates[m] == int(predicted[m]):
                m += 1
            return candidates[:m] + [int(predicted[m])]
        import torch

        prefix = tokens + candidates
        scores = torch.cat([chooser.scores(rows[i: i + 1], np.array([prefix[: len(tokens) + i]]),
                                           np.ones((1, len(tokens) + i), dtype=np.int64)) for i in range(n + 1)])
        if not chooser.sampling.do_sample:
            selected = scores.argmax(dim=-1).tolist()
        elif self.candidate_scores is None or n == 0:
            selected = torch.multinomial(softmax_rows(scores), 1, generator=chooser.generator).squeeze(1).tolist()
        else:  # transformers' _speculative_sampling
            q = softmax_rows(self.candidate_scores[:n])
            p = softmax_rows(scores)
            index = torch.tensor(candidates)
            ratio = p[torch.arange(n), index] / q[torch.arange(n), index]
            accepted = torch.rand(ratio.shape, generator=chooser.generator) <= ratio
            m = int(((~accepted).cumsum(dim=-1) < 1).sum())
            following = torch.clamp(p[m] - q[m], min=0) if m < n else p[m]
            if m < n:
                following = following / following.sum()
            t = int(torch.multinomial(following[None], 1, generator=chooser.generator)[0, 0])
            return candidates[:m] + [t]
        m = 0
        while m < n and candidates[m] == selected[m]:
            m += 1
        return candidates[:m] + [selected[m]]


class PromptLookup(Speculation):
    """Candidates copied from the sequence itself (transformers' ``prompt_lookup_num_tokens``).

    :param num_tokens: the candidates of a run at most (transformers' ``prompt_lookup_num_tokens``)
    :param max_matching_ngram_size: the longest n-gram matched (transformers' default 2): the last
        ``n`` tokens are looked for in the sequence, an occurrence followed by tokens gives them (cut before an
        end-of-sequence token), then ``n - 1``... down to 1
    :param occurrence: ``"first"`` (transformers': the earliest occurrence) or ``"last"`` (the latest one, as
        onnxruntime-genai's n-gram decoding, which matches ``ngram_size - 1`` tokens and no fewer; its continuation
        repeated when it reaches the end of the sequence: the loop the match closes is copied on)

    The occurrences are indexed as the sequence grows (each token once), not searched at every run.
    """

    def __init__(self, num_tokens: int = 10, max_matching_ngram_size: int = 2, occurrence: str = "first"):
        if num_tokens < 1 or max_matching_ngram_size < 1:
            raise ValueError(f"prompt lookup needs num_tokens >= 1 and max_matching_ngram_size >= 1, got "
                             f"{num_tokens} and {max_matching_ngram_size}.")
        if occurrence not in ("first", "last"):
            raise ValueError(f"occurrence={occurrence!r}: use 'first' (transformers') or 'last' (onnxruntime-genai's).")
        self.num_tokens, self.max_matching_ngram_size = num_tokens, max_matching_ngram_size
        self.occurrence = occurrence
        self.eos: set[int] = set()
        self._forget()

    def _forget(self) -> None:
        #: for each n-gram size, the n-grams seen followed by a token -> the position after the chosen occurrence
        self._found: list[dict[tuple[int, ...], int]] = [{} for _ in range(self.max_matching_ngram_size + 1)]
        #: the tokens indexed, the last of them
        self._count, self._last = 0, -1

    def reset(self, eos: set[int], chooser: Any = None) -> None:
        super().reset(eos, chooser)
        self._forget()

    @property
    def max_count(self) -> int | None:
        return self.num_tokens

    def _index(self, tokens: list[int]) -> None:
        """Indexes the n-grams ``tokens`` added since the last call (a sequence not extending the one indexed
        is indexed again)."""
        if len(tokens) < self._count or (self._count and tokens[self._count - 1] != self._last):
            self._forget()
        first = self.occurrence == "first"
        for p in range(max(self._count, 1), len(tokens)):  # the n-grams ending before position p: followed by it
            for size in range(1, min(self.max_matching_ngram_size, p) + 1):
                key = tuple(tokens[p - size: p])
                if first:
                    self._found[size].setdefault(key, p)
                else:
                    self._found[size][key] = p
        if tokens:
            self._count, self._last = len(tokens), tokens[-1]

    def propose(self, tokens: list[int], k: int) -> list[int]:
        self._index(tokens)
        length = len(tokens)
        for size in range(min(self.max_matching_ngram_size, length - 1), 0, -1):
            start = self._found[size].get(tuple(tokens[length - size:]))
            if start is not None:
                count = min(self.num_tokens, k)
                chosen = tokens[start: min(start + count, length)]
                if self.occurrence == "last" and len(chosen) < count:  # the loop it closes goes on
                    chosen = [chosen[i % len(chosen)] for i in range(count)]
                for i, t in enumerate(chosen):
                    if t in self.eos:
                        return chosen[:i]
                return chosen
        return []


class DraftModel(Speculation):
    """Candidates a smaller decoder of the same vocabulary generates greedily (transformers'
    ``assistant_model``): up to ``num_assistant_tokens``, fewer when the draft's probability of its
    token is under ``assistant_confidence_threshold``; ``"heuristic"`` schedules add 2 to the count
    after a run which kept every candidate and remove 1 otherwise (``"constant"``: transformers'
    default, as are 20 tokens and the threshold 0.4; a folder's ``generation_config.json`` may set them).

    :param draft: an :class:`OnnxGenerator`, an exported folder or the path of an ONNX decoder
    :param threads: onnxruntime's intra-op threads of a draft opened here
    """

    proposes_by_runs = True

    def __init__(self, draft: Any, num_assistant_tokens: int | None = None,
                 num_assistant_tokens_schedule: str | None = None,
                 assistant_confidence_threshold: float | None = None, threads: int | None = None):
        generation: dict[str, Any] = {}
        if isinstance(draft, OnnxGenerator):
            generator = draft
        else:
            path = os.fspath(draft)
            if os.path.isdir(path):
                generation = _read_json(os.path.join(path, "generation_config.json"))
                decoder = _read_json(os.path.join(path, FOLDER_METADATA)).get("decoder", "model.onnx")
                path = os.path.join(path, decoder)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"The draft {os.fspath(draft)!r} holds no decoder: give a folder written by "
                                        "export.")
            generator = OnnxGenerator(path, session_options=session_options(threads))
        self.decoder = SequenceDecoder(generator)
        self.num_assistant_tokens = int(num_assistant_tokens or generation.get("num_assistant_tokens") or 20)
        self.schedule = num_assistant_tokens_schedule or generation.get("num_assistant_tokens_schedule") or "constant"
        if self.schedule not in ("constant", "heuristic", "heuristic_transient"):
            raise ValueError(f"num_assistant_tokens_schedule={self.schedule!r}: use constant, heuristic or "
                             "heuristic_transient.")
        threshold = assistant_confidence_threshold
        if threshold is None:
            threshold = generation.get("assistant_confidence_threshold", 0.4)
        self.threshold = float(threshold)
        self._initial = self.num_assistant_tokens

    @property
    def max_count(self) -> int | None:
        return self.num_assistant_tokens

    def reset(self, eos: set[int], chooser: Any = None) -> None:
        super().reset(eos, chooser)
        self.decoder.length = 0
        self._started = False
        if self.schedule == "heuristic_transient":
            self.num_assistant_tokens = self._initial

    def propose(self, tokens: list[int], k: int) -> list[int]:
        d, chooser = self.decoder, self.chooser
        k = min(k, self.num_assistant_tokens)
        if not self._started:
            rows, self._started = d.start(tokens, 2 * len(tokens) + 64), True
        else:
            rows = d.run(tokens[d.length:])
        self._base = len(tokens)
        out: list[int] = []
        scores = []
        while True:
            logits = rows[-1]
            if chooser is None:
                c = int(logits.argmax())
                probability = (lambda: 1.0 / np.exp(logits - logits[c]).sum()) if self.threshold else None
            else:  # the draft chooses as the model: its processed scores, sampled or not, the same draws
                import torch

                prefix = np.array([tokens + out])
                row = chooser.scores(logits[None], prefix, np.ones_like(prefix))
                probs = row.softmax(dim=-1)
                c = int(probs.argmax() if not chooser.sampling.do_sample else
                        torch.multinomial(probs, 1, generator=chooser.generator)[0, 0])
                scores.append(row)
                probability = (lambda: float(probs[0, c])) if self.threshold else None
            out.append(c)
            if len(out) >= k or c in self.eos:
                break
            if probability is not None and probability() < self.threshold:  # transformers' ConfidenceCriteria
                break
            rows = d.run([c])
        if chooser is not None and chooser.sampling.do_sample:
            import torch

            self.candidate_scores = torch.cat(scores)
        self._proposed = out
        return out

    def update(self, proposed: int, accepted: int) -> None:
        # the draft's cache holds the sequence and every candidate but the last: keep the accepted ones
        self.decoder.rollback(self._base + min(accepted, len(self._proposed) - 1))
        if self.schedule != "constant":
            self.num_assistant_tokens = self.num_assistant_tokens + 2 if accepted == proposed else \
                max(1, self.num_assistant_tokens - 1)


def same_vocabulary(folder: str, draft_folder: str) -> str | None:
    """Why the tokenizers of two folders differ (None when they have the same vocabulary or a folder has
    no ``tokenizer.json``)."""
    vocabularies = []
    for f in (folder, draft_folder):
        path = os.path.join(f, "tokenizer.json")
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as stream:
            vocabularies.append(json.load(stream).get("model", {}).get("vocab"))
    if vocabularies[0] != vocabularies[1]:
        return (f"the tokenizers of {folder!r} and {draft_folder!r} differ: a draft model must share the "
                "vocabulary of the model")
    return None
