"""Speculative decoding (fx2onnx.runtime.speculative): prompt lookup and a draft model give the tokens of
plain greedy decoding and of transformers' generate(prompt_lookup_num_tokens=...) / generate(assistant_model=...)."""

from __future__ import annotations

import copy
import functools
import json
import os

import numpy as np
import onnx
import pytest
import torch

transformers = pytest.importorskip("transformers")

import fx2onnx  # noqa: E402
from fx2onnx.__main__ import main  # noqa: E402
from fx2onnx.zoo import get_tiny_model  # noqa: E402
from fx2onnx.testing.tokenizer import tiny_qwen3_config, write_checkpoint_folder  # noqa: E402
from fx2onnx.runtime import OnnxGenerator  # noqa: E402
from fx2onnx.runtime.folder import FolderGenerator, session_options  # noqa: E402
from fx2onnx.runtime.candidate_budget import Backoff, CandidateBudget  # noqa: E402
from fx2onnx.runtime.speculative import (  # noqa: E402
    VERIFY_LOGITS, VERIFY_METADATA_KEY, VERIFY_TOKENS, DraftModel, PromptLookup,
)

#: a prompt which repeats itself: a random tiny model then loops, and the lookup finds its continuation
REPEATING = [[5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9, 10, 11, 5, 6, 7]]
NEW = 30


@functools.cache
def exported(layers: int, seed: int):
    """(tiny llama, its ONNX model with a cache: the logits of every position)."""
    tiny = get_tiny_model("llama", with_cache=True, num_hidden_layers=layers, seed=seed)
    tiny.model.generation_config.eos_token_id = None
    with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
        onx = fx2onnx.to_onnx(tiny.model, (), kwargs=modificator(copy.deepcopy(tiny.inputs)),
                              dynamic_shapes=tiny.dynamic_shapes)
    return tiny, onx


@pytest.mark.slow  # 12 s: the draft folder's export; make test-all runs it
def test_prompt_lookup_and_draft_give_greedy_tokens():
    tiny, onx = exported(2, 0)
    draft, draft_onx = exported(1, 1)
    ids = torch.tensor(REPEATING)
    generator = OnnxGenerator(onx)
    plain = generator.generate(ids, NEW)
    # prompt lookup: transformers' tokens, several per run on a text which repeats
    got = generator.generate(ids, NEW, speculation=PromptLookup(10))
    with torch.no_grad():
        expected = tiny.model.generate(ids, do_sample=False, max_new_tokens=NEW, prompt_lookup_num_tokens=10)
    assert got.tolist() == plain.tolist() == expected.tolist()
    times = generator.last_times
    assert times.decode_steps == NEW - 1 and times.accepted > 10
    assert times.mean_acceptance_length > 1.5 and times.target_runs < NEW - 10
    # a draft model (another tiny llama): transformers' assisted generation's tokens
    got = fx2onnx.generate(onx, ids, NEW, speculation=DraftModel(OnnxGenerator(draft_onx)))
    with torch.no_grad():
        expected = tiny.model.generate(ids, do_sample=False, max_new_tokens=NEW, assistant_model=draft.model)
    assert got.tolist() == plain.tolist() == expected.tolist()
    # the backoff: plain decoding for 1, 2, 4... steps after runs which kept nothing, then one candidate a run,
    # reset by a run that kept one
    backoff = Backoff(limit=4)
    waits, caps = [], []
    for accepted, proposed in ((0, 10), (0, 5), (0, 2), (0, 1), (2, 2)):
        backoff.record(accepted, proposed)
        waits.append(backoff.wait)
        caps.append(backoff.cap)
    assert waits == [1, 2, 4, 4, 4] and caps == [1, 1, 1, 1, None] and backoff.failures == 0
    assert [backoff.allows() for _ in range(5)] == [False] * 4 + [True]


def test_candidate_budget_settles_on_the_count_of_most_tokens_per_second():
    """Runs of the benchmark Llama in int4 (a run feeding n tokens costs costs[n] plain steps): with 95 % of
    the candidates kept, 5 candidates give the most tokens per step (5.3 tokens for 2.9 steps; 10: 8.6 for
    7.5); the budget starts at the source's count, tries the sizes next to the best one, then keeps it;
    with 30 % kept, one candidate a run; a draft's cost per candidate lowers the count."""
    costs = {1: 1.0, 2: 1.24, 3: 1.69, 4: 2.07, 5: 2.5, 6: 2.9, 7: 4.0, 8: 5.0, 9: 6.0, 10: 6.7, 11: 7.47}
    budget = CandidateBudget()
    budget.kept, budget.refused = [95.0] * 64, [5.0] * 64
    chosen = []
    for _ in range(12):
        chosen.append(budget.choose(10))
        budget.record_run(1 + chosen[-1], costs[1 + chosen[-1]])
    # a plain step is tried once (the costs measured make it look cheap: proportional below 11 tokens)
    assert chosen == [10, 0, 3, 4, 5, 6] + [5] * 6, chosen
    budget.kept, budget.refused = [30.0] * 64, [70.0] * 64
    for n, cost in costs.items():
        budget.record_run(n, cost)
    budget.changed()
    assert budget.choose(10) == 1  # 1.3 tokens for 1.24 steps
    # the first candidate often refused, the next ones kept once it is (a lookup on text that does not repeat):
    # with float32's flat costs, 10 candidates
    flat = CandidateBudget()
    for n in range(1, 12):
        flat.record_run(n, 1.0 + 0.08 * (n - 1))
    flat.kept, flat.refused = [30.0] + [95.0] * 63, [70.0] + [5.0] * 63
    assert flat.choose(10) == 10
    budget.kept, budget.refused = [95.0] * 64, [5.0] * 64
    budget.proposal_cost = 0.5
    budget.changed()
    assert budget.choose(10) < 5
    # the acceptance follows the last runs: kept counts decay
    budget.record(10, 0)
    assert budget.acceptance(0) < 0.95
    assert CandidateBudget().choose(7) == 7  # nothing measured: the source's count


def test_candidate_budget_proposes_nothing_when_candidates_do_not_pay():
    """With 10 % of the candidates kept, no count gains over a plain step: plain steps, a probe of one
    candidate after 1, 2, 4... (at most 32) of them; probes keeping their candidate bring candidates back; a new
    generation starts without a pause; when even every candidate kept would not pay (a costly draft), 256 plain
    steps before the next probe."""
    budget = CandidateBudget()
    costs = {1: 1.0, 2: 1.24, 3: 1.69, 4: 2.07, 5: 2.5, 6: 2.9, 7: 4.0, 8: 5.0, 9: 6.0, 10: 6.7, 11: 7.47}
    for n, cost in costs.items():
        budget.record_run(n, cost)
    budget.kept, budget.refused = [1.0] * 64, [9.0] * 64
    chosen = []
    for _ in range(160):
        chosen.append(budget.choose(10))
        if chosen[-1]:
            budget.record(chosen[-1], 0)
    assert set(chosen) == {0, 1}
    probes = [i for i, k in enumerate(chosen) if k]
    assert np.diff([-1] + probes).tolist()[:8] == [2, 3, 5, 9, 17, 33, 33, 33]
    chosen = []
    for _ in range(40):  # the text repeats now: every probe keeps its candidate
        while budget.wait:
            budget.choose(10)
        chosen.append(budget.choose(10))
        if chosen[-1]:
            budget.record(chosen[-1], chosen[-1])
    assert chosen[:2] == [1, 0] and chosen[-1] > 1, chosen
    budget.kept, budget.refused = [1.0] * 64, [9.0] * 64
    budget.changed()
    assert budget.choose(10) == 0 and budget.probe and budget.choose(10) == 1  # a probe until a run verifies
    budget.start()
    assert budget.wait == 0 and budget.pause == 1 and not budget.probe
    # a draft's cost per candidate: candidates kept 60 % of the time, each costing 0.7 of a step, do not pay
    draft = CandidateBudget()
    draft.costs = {1: 1.0, 2: 1.02, 3: 1.04, 11: 1.9}
    draft.kept, draft.refused = [6.0] * 64, [4.0] * 64
    draft.proposal_cost = 0.7
    assert draft.choose(10) == 0 and draft.wait == 0  # 100 % kept would pay: the next step probes
    draft.proposal_cost = 1.2
    draft.changed()
    draft.start()
    assert draft.choose(10) == 0 and draft.wait == CandidateBudget.hopeless_pause - 1
    draft.start()
    draft.proposal_cost = 0.1
    draft.changed()
    assert draft.choose(10) > 0


def test_prompt_lookup_occurrences():
    """The n-grams indexed as the sequence grows give the first occurrence (transformers') or the last one
    (onnxruntime-genai's, its continuation repeated past the end), the longest n-gram first, as a search of the
    whole sequence does."""
    rng = np.random.default_rng(0)

    def searched(tokens: list[int], k: int, n: int, last: bool) -> list[int]:
        for size in range(min(n, len(tokens) - 1), 0, -1):
            starts = [i + size for i in range(len(tokens) - size) if tokens[i: i + size] == tokens[-size:]]
            if starts:
                start = starts[-1] if last else starts[0]
                loop = tokens[start:]
                return [loop[i % len(loop)] for i in range(k)] if last else tokens[start: start + k]
        return []

    for occurrence in ("first", "last"):
        for n in (1, 2, 3):
            lookup = PromptLookup(4, n, occurrence=occurrence)
            lookup.reset(set())
            for _ in range(30):
                tokens = rng.integers(3, 9, size=int(rng.integers(1, 8))).tolist()
                for t in rng.integers(3, 9, size=20).tolist():  # grown one token at a time, as a generation
                    tokens.append(t)
                    assert lookup.propose(tokens, 4) == searched(tokens, 4, n, occurrence == "last"), tokens
    with pytest.raises(ValueError, match="occurrence"):
        PromptLookup(4, occurrence="middle")


@pytest.mark.slow
def test_prompt_lookup_matches_transformers_candidates():
    """The candidates are transformers' PromptLookupCandidateGenerator's: the first earlier occurrence of
    the last 2 (then 1) tokens, cut before an end-of-sequence token."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    rng = np.random.default_rng(0)
    for eos in (None, 7):
        for _ in range(200):
            tokens = rng.integers(3, 12, size=int(rng.integers(2, 30))).tolist()
            ours = PromptLookup(4)
            ours.reset(set() if eos is None else {eos})
            theirs = PromptLookupCandidateGenerator(None if eos is None else torch.tensor([eos]), 4, 2, max_length=100)
            candidates, _ = theirs.get_candidates(torch.tensor([tokens]))
            assert ours.propose(tokens, 4) == candidates[0, len(tokens):].tolist(), tokens


@pytest.mark.slow
@pytest.mark.parametrize("optimize", ["onnxruntime", "default"])
def test_draft_and_lookup_with_eos_and_every_length(optimize):
    """Every new-token count from 1 (the last run verifies fewer candidates), an end-of-sequence token
    reached inside accepted candidates, the cache in place (onnxruntime) or concatenated (default)."""
    tiny, _ = exported(2, 0)
    with fx2onnx.torch_export_patches(patch_transformers=True) as modificator:
        onx = fx2onnx.to_onnx(tiny.model, (), kwargs=modificator(copy.deepcopy(tiny.inputs)),
                              dynamic_shapes=tiny.dynamic_shapes, optimize=optimize)
    generator = OnnxGenerator(onx)
    ids = np.array(REPEATING)
    plain = generator.generate(ids, NEW)[0, 17:].tolist()
    eos = plain[12]  # inside the loop the model falls into: reached by accepted candidates
    for speculation in (PromptLookup(10), DraftModel(OnnxGenerator(exported(2, 0)[1]))):
        for new in (1, 2, 3, 7, NEW):
            assert generator.generate(ids, new, speculation=speculation)[0, 17:].tolist() == plain[:new]
        got = generator.generate(ids, NEW, eos_token_id=eos, speculation=speculation)[0, 17:].tolist()
        assert got == plain[: plain.index(eos) + 1]


@pytest.mark.slow
def test_refusals():
    _, onx = exported(2, 0)
    generator = OnnxGenerator(onx)
    with pytest.raises(ValueError, match="one sequence"):
        generator.generate(np.array([[5, 6], [7, 8]]), 3, speculation=PromptLookup(3))
    with pytest.raises(ValueError, match="its own draft"):
        generator.generate(np.array([[5, 6]]), 3, speculation=DraftModel(generator))
    with pytest.raises(ValueError, match="max_matching_ngram_size"):
        PromptLookup(0)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A bf16 checkpoint folder with a tokenizer, its export (no flag), and a one-layer draft's."""
    root = tmp_path_factory.mktemp("speculative")
    paths = {name: str(root / name) for name in ("model", "model_onnx", "draft", "draft_onnx")}
    write_checkpoint_folder(tiny_qwen3_config(), paths["model"], dtype="bfloat16", std=0.3)
    write_checkpoint_folder(tiny_qwen3_config(num_hidden_layers=1), paths["draft"], dtype="bfloat16", std=0.3, seed=1)
    for name in ("model", "draft"):
        assert main(["export", paths[name], "--out", paths[name + "_onnx"], "--quiet"]) == 0
    return paths


@pytest.mark.slow
def test_folder_verifies_with_its_last_logits(folders, capsys):
    """A folder's decoder returns ``logits`` (the last position: what onnxruntime-genai reads) and
    ``verify_logits`` (the last 16, equal to eager's); ``generate --prompt-lookup`` and ``--draft`` print
    plain greedy's text, transformers' with the same option."""
    from fx2onnx.validation import run_onnx

    out = folders["model_onnx"]
    proto = onnx.load(os.path.join(out, "onnx", "model.onnx"), load_external_data=False)
    outputs = {o.name: [d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim] for o in proto.graph.output}
    assert outputs["logits"][1:] == [1, 384] and [o.name for o in proto.graph.output][-1] == VERIFY_LOGITS
    assert {p.key: p.value for p in proto.metadata_props}[VERIFY_METADATA_KEY] == str(VERIFY_TOKENS)
    model = transformers.AutoModelForCausalLM.from_pretrained(folders["model"], dtype=torch.float32).eval()
    ids = torch.arange(5, 25)[None]  # 20 tokens: the last 16 positions
    feeds = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(20)[None]}
    feeds.update({i.name: torch.zeros((1, 2, 0, 16)) for i in proto.graph.input if i.name.startswith("past")})
    got = dict(zip([o.name for o in proto.graph.output], run_onnx(os.path.join(out, "onnx", "model.onnx"), (), feeds)))
    with torch.no_grad():
        expected = model(input_ids=ids).logits.numpy()
    np.testing.assert_allclose(got[VERIFY_LOGITS], expected[:, -VERIFY_TOKENS:], atol=1e-4, rtol=1e-3)
    np.testing.assert_allclose(got["logits"], expected[:, -1:], atol=1e-4, rtol=1e-3)

    tokenizer = transformers.AutoTokenizer.from_pretrained(folders["model"])
    prompt = "hello world, hello world, hello world, the exporter"
    capsys.readouterr()
    assert main(["generate", out, prompt, "--max-new-tokens", "24"]) == 0
    plain = capsys.readouterr().out
    draft = transformers.AutoModelForCausalLM.from_pretrained(folders["draft"], dtype=torch.float32).eval()
    inputs = tokenizer(prompt, return_tensors="pt")
    for option, kwargs in ((["--prompt-lookup", "10"], dict(prompt_lookup_num_tokens=10)),
                           (["--draft", folders["draft_onnx"]], dict(assistant_model=draft))):
        assert main(["generate", out, prompt, "--max-new-tokens", "24", *option]) == 0
        captured = capsys.readouterr()
        assert captured.out == plain and "mean acceptance length" in captured.err
        with torch.no_grad():
            expected = model.generate(**inputs, do_sample=False, max_new_tokens=24, **kwargs)
        text = tokenizer.decode(expected[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        assert captured.out.strip() == text.strip()
    # the cache in place, rolled back: a text which repeats accepts candidates, the tokens stay greedy's
    gen = FolderGenerator(out)
    repeated = list(range(5, 45)) * 2
    tokens = gen.generate_text(repeated, 40).new_ids
    gen.generator.speculation = DraftModel(folders["model_onnx"])
    result = gen.generate_text(repeated, 40)
    assert result.new_ids == tokens and result.times.accepted > 0


@pytest.mark.slow
def test_one_token_runs_past_the_first_mask(folders):
    """With the cache in place, one-token runs (a draft's steps, the model's plain steps between verifying runs)
    go through arrays bound once: a generation longer than the first mask's 64 positions (a prompt of 5 tokens)
    still gives plain greedy's tokens, with a draft and with candidates always wrong."""
    gen = FolderGenerator(folders["model_onnx"])
    assert gen.generator.in_place
    ids = np.array([[5, 6, 7, 8, 9]])
    plain = gen.generator.generate(ids, 90).tolist()
    wrong = PromptLookup(4)
    wrong.propose = lambda tokens, k: [(tokens[-1] + 1) % 300] * k
    for speculation in (DraftModel(folders["draft_onnx"]), wrong):
        assert gen.generator.generate(ids, 90, speculation=speculation).tolist() == plain
        assert gen.generator.last_times.run_candidates.count(0) > 20


@pytest.mark.slow
def test_zero_candidates_give_greedy_tokens(folders):
    """A budget whose candidates do not pay (each costs half a plain step, one in ten kept) makes plain steps, then
    probes: plain greedy's tokens with prompt lookup (first and last occurrence) and with a draft whose cache
    falls behind during the plain steps (its next run feeds the tokens it missed)."""
    gen = FolderGenerator(folders["model_onnx"])
    ids = np.array([list(range(5, 25)) * 2])
    plain = gen.generator.generate(ids, 60).tolist()
    speculations = (PromptLookup(10), PromptLookup(10, occurrence="last"), DraftModel(folders["draft_onnx"]))
    for speculation in speculations:
        budget = speculation._budget = CandidateBudget(gen.generator)
        budget.per_candidate = speculation.proposes_by_runs
        budget.costs = {n: 1.0 + 0.5 * (n - 1) for n in range(1, 17)}  # far above the runs' own: kept
        budget.kept, budget.refused = [1.0] * 64, [9.0] * 64
        budget.hopeless_pause = budget.max_pause  # probes as often as when the counts decide (the costs do here)
        assert gen.generator.generate(ids, 60, speculation=speculation).tolist() == plain
        runs = gen.generator.last_times.run_candidates
        first = next(i for i, k in enumerate(runs) if k)
        assert runs[first + 1] == 0 and runs.count(0) > 20, runs


@pytest.mark.slow
def test_command_line_refusals(folders, tmp_path, capsys):
    out = folders["model_onnx"]
    other = tmp_path / "other"
    os.makedirs(other)
    for f in os.listdir(folders["draft_onnx"]):
        os.symlink(os.path.join(folders["draft_onnx"], f), other / f)
    os.unlink(other / "tokenizer.json")
    with open(os.path.join(folders["draft_onnx"], "tokenizer.json")) as f:
        tok = json.load(f)
    tok["model"]["vocab"] = {k + "x": v for k, v in tok["model"]["vocab"].items()}
    with open(other / "tokenizer.json", "w") as f:
        json.dump(tok, f)
    for args, message in ((["--prompt-lookup", "3", "--draft", folders["draft_onnx"]], "one of"),
                          (["--mtp"], "no multi-token-prediction head"),
                          (["--draft", str(tmp_path / "none")], "is not a folder"),
                          (["--draft", str(other)], "tokenizers"),
                          (["--prompt-lookup", "0"], ">= 1")):
        capsys.readouterr()
        assert main(["generate", out, "hello", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_onnxruntime_genai_runs_the_same_modes(folders, tmp_path):
    """``write_genai_speculative``: onnxruntime-genai's n-gram decoding and draft model on a folder exported
    with every position's logits give the tokens of our loop in the same mode (and of plain greedy)."""
    og = pytest.importorskip("onnxruntime_genai")
    from fx2onnx.deploy.genai_config import write_genai_speculative

    why = write_genai_speculative(folders["model_onnx"], 6, ngram_size=2)
    assert why is not None and "--all-logits" in why  # the default folder: the last position only
    prompt = list(range(5, 45)) * 2
    expected = FolderGenerator(folders["model_onnx"]).generate_text(prompt, 30).new_ids
    for mode, options in (("ngram", {"ngram_size": 2}), ("draft", {"draft_folder": folders["draft_onnx"]})):
        out = str(tmp_path / mode)
        assert main(["export", folders["model"], "--out", out, "--quiet", "--all-logits", "--no-validate"]) == 0
        assert write_genai_speculative(out, 6, **options) is None
        model = og.Model(out)
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + 30, do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens(np.array([prompt], dtype=np.int32))
        tokens = []
        while not generator.is_done():
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        stats = generator.get_speculative_stats()
        assert stats["draft_tokens_proposed"] > 0 and tokens == expected, mode
        gen = FolderGenerator(out)
        gen.generator.speculation = PromptLookup(6) if mode == "ngram" else DraftModel(folders["draft_onnx"])
        assert gen.generate_text(prompt, 30).new_ids == expected


@pytest.mark.slow
def test_sampled_speculation():
    """Sampling: the draft being the model itself, transformers' speculative sampling keeps every candidate
    (``p / q`` is 1); with top_k=1 the draws are greedy's tokens; a repetition penalty without sampling gives
    transformers' tokens (the penalty applied to each verified position with the tokens before it)."""
    from fx2onnx.runtime.sampling import Sampling

    tiny, onx = exported(2, 0)
    generator = OnnxGenerator(onx)
    ids = np.array(REPEATING)
    plain = generator.generate(ids, NEW).tolist()
    same = DraftModel(OnnxGenerator(onx), assistant_confidence_threshold=0.0)
    same.adaptive = False  # every run verifies the draft's count (the budget would cut a draft this costly)
    generator.generate(ids, NEW, sampling=Sampling(do_sample=True, seed=0, temperature=0.8), speculation=same)
    times = generator.last_times
    assert times.accepted == times.proposed > 20 and times.verifying_runs <= 3
    for speculation in (PromptLookup(10), DraftModel(OnnxGenerator(exported(1, 1)[1]))):
        got = generator.generate(ids, NEW, sampling=Sampling(do_sample=True, top_k=1, seed=0), speculation=speculation)
        assert got.tolist() == plain
    with torch.no_grad():
        expected = tiny.model.generate(torch.tensor(REPEATING), do_sample=False, max_new_tokens=NEW,
                                       repetition_penalty=1.3, prompt_lookup_num_tokens=10)
    got = generator.generate(ids, NEW, sampling=Sampling(repetition_penalty=1.3), speculation=PromptLookup(10))
    assert got.tolist() == expected.tolist()


#: the 0.999 quantiles of the chi-square distribution by degrees of freedom (scipy.stats.chi2.ppf(0.999, df))
CHI2_999 = {3: 16.266, 4: 18.467, 5: 20.515, 8: 26.124, 15: 37.697}


def _chi_square(counts: np.ndarray, probabilities: np.ndarray) -> tuple[float, int]:
    """(Pearson's statistic, degrees of freedom) of ``counts`` against ``probabilities``, the cells of
    probability 0 asserted empty."""
    assert counts[probabilities == 0].sum() == 0, (counts, probabilities)
    keep = probabilities > 0
    expected = probabilities[keep] * counts.sum()
    return float(((counts[keep] - expected) ** 2 / expected).sum()), int(keep.sum()) - 1


def test_speculative_sampling_follows_the_model_distribution():
    """transformers' acceptance rule (a draft's candidate kept with probability min(1, p / q), the token after a
    rejected one drawn from max(p - q, 0) normalized): whatever the draft's q, the first token follows the model's
    p at the first position and the second, after a kept candidate, p at the second (chi-square, 2000 draws of
    fixed seeds: deterministic)."""
    from fx2onnx.runtime.sampling import Sampling

    rng = np.random.default_rng(0)
    vocabulary = 6
    p_logits = rng.normal(0, 1.5, size=(3, vocabulary)).astype(np.float32)
    q_logits = rng.normal(0, 1.5, size=(2, vocabulary)).astype(np.float32)
    p_logits[0, 5] = q_logits[1, 4] = -np.inf  # a token the model never gives, one the draft never proposes
    p, q = (np.exp(x - x.max(-1, keepdims=True)).astype(np.float64) for x in (p_logits, q_logits))
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    speculation = PromptLookup(2)
    speculation.reset(set(), Sampling(do_sample=True, top_k=0, seed=0).chooser())
    first, second, lengths = np.zeros(vocabulary), np.zeros(vocabulary), np.zeros(4)
    draws = 2000
    drafted = (rng.random((draws, 2, 1)) > q.cumsum(-1)).sum(-1).tolist()  # each row drawn from the draft's q
    for candidates in drafted:
        speculation.candidate_scores = torch.from_numpy(q_logits)
        tokens = speculation._select(p_logits, [1], candidates)
        assert tokens[:-1] == candidates[: len(tokens) - 1]
        lengths[len(tokens)] += 1
        first[tokens[0]] += 1
        if len(tokens) > 1:
            second[tokens[1]] += 1
    for counts, probabilities in ((first, p[0]), (second, p[1])):
        statistic, freedom = _chi_square(counts, probabilities)
        assert statistic < CHI2_999[freedom], (counts, probabilities * counts.sum())
    # the first candidate is kept with probability sum(min(p, q)), as the rule says
    kept = np.minimum(p[0], q[0]).sum()
    assert abs(lengths[2:].sum() / draws - kept) < 4 * np.sqrt(kept * (1 - kept) / draws)


class _FixedCandidates(PromptLookup):
    """Proposes the same candidates at every run (the model's two most likely next tokens): prompt lookup's
    sampled rule (each position drawn from the model, candidates kept while equal) on candidates often kept."""

    def __init__(self, candidates: list[int]):
        super().__init__(len(candidates))
        self.candidates = candidates

    def propose(self, tokens: list[int], k: int) -> list[int]:
        return self.candidates[:k]


@pytest.mark.slow
def test_sampled_speculation_distribution_and_zero_temperature():
    """The first two tokens sampled with a draft (whose scores differ from the model's) or with candidates
    follow the model's distribution (chi-square over 500 seeds against the eager model's softmax after top-k
    and temperature); at a temperature near 0, sampling with either mode gives plain greedy's tokens."""
    from fx2onnx.runtime.sampling import Sampling

    tiny, onx = exported(2, 0)
    generator = OnnxGenerator(onx, session_options=session_options(1))  # one thread: a tiny model, many runs
    prompt = REPEATING[0]
    top_k, temperature = 4, 1.5

    def processed(ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            logits = tiny.model(torch.tensor([ids])).logits[0, -1].double() / temperature
        kept = logits >= torch.topk(logits, top_k).values[-1]
        return torch.where(kept, logits, -float("inf")).softmax(-1).numpy()

    first = processed(prompt)
    support = np.flatnonzero(first)
    joint = np.concatenate([first[t] * processed(prompt + [int(t)])[None] for t in support])  # (4, vocabulary)
    second = {int(t): np.flatnonzero(row) for t, row in zip(support, joint)}
    cells = np.array([joint[i, second[int(t)]] for i, t in enumerate(support)]).ravel()  # 16 cells
    draft = DraftModel(OnnxGenerator(onx, session_options=session_options(1)), assistant_confidence_threshold=0.0)
    delta = np.random.default_rng(1).normal(0, 1.0, size=tiny.model.config.vocab_size).astype(np.float32)
    run = draft.decoder.run
    draft.decoder.run = lambda tokens: run(tokens) + delta  # the draft's scores: the model's, perturbed
    best = int(support[first[support].argmax()])
    lookup = _FixedCandidates([best, int(second[best][joint[list(support).index(best), second[best]].argmax()])])
    for speculation in (draft, lookup):
        counts = np.zeros((len(support), top_k))
        for seed in range(500):
            got = generator.generate(np.array([prompt]), 2, speculation=speculation,
                                     sampling=Sampling(do_sample=True, top_k=top_k, temperature=temperature, seed=seed))
            t1, t2 = got[0, -2:].tolist()
            i = list(support).index(t1)
            counts[i, list(second[t1]).index(t2)] += 1
        statistic, freedom = _chi_square(counts.ravel(), cells)
        assert statistic < CHI2_999[freedom], (type(speculation).__name__, counts, cells * 500)
    plain = generator.generate(np.array(REPEATING), NEW).tolist()
    for speculation in (PromptLookup(10), DraftModel(OnnxGenerator(exported(1, 1)[1]))):
        got = generator.generate(np.array(REPEATING), NEW, speculation=speculation,
                                 sampling=Sampling(do_sample=True, top_k=0, temperature=1e-6, seed=0))
        assert got.tolist() == plain


class _Oracle(PromptLookup):
    """Proposes the next tokens of a known sequence with the third one wrong: runs keep 2 of 3 candidates,
    the cache goes back inside the run."""

    def __init__(self, expected: list[int]):
        super().__init__(3)
        self.expected = expected

    def propose(self, tokens: list[int], k: int) -> list[int]:
        following = self.expected[len(tokens): len(tokens) + 3]
        return (following[:2] + [following[2] + 1] if len(following) == 3 else following)[:k]


@pytest.mark.slow
def test_hybrid_decoder_rolls_back_its_recurrent_states(tmp_path):
    """A hybrid decoder (LFM2: a short convolution's state beside keys and values) keeps a snapshot of its cache
    before each run: prompt lookup, a draft and candidates kept in part give plain greedy's tokens, transformers'."""
    checkpoint, out = str(tmp_path / "lfm2"), str(tmp_path / "lfm2_onnx")
    config = transformers.Lfm2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=128,
                                     layer_types=["conv", "full_attention"], architectures=["Lfm2ForCausalLM"])
    write_checkpoint_folder(config, checkpoint, dtype="float32", std=0.3)
    assert main(["export", checkpoint, "--out", out, "--quiet", "--no-validate"]) == 0
    gen = FolderGenerator(out)
    prompt = list(range(5, 45)) * 2
    plain = gen.generate_text(prompt, 30).new_ids
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=30, min_new_tokens=30,
                                  prompt_lookup_num_tokens=10)
    assert plain == expected[0, len(prompt):].tolist()
    oracle = _Oracle(prompt + plain)
    for speculation in (PromptLookup(10), DraftModel(out), oracle):
        gen.generator.speculation = speculation
        result = gen.generate_text(prompt, 30)
        assert result.new_ids == plain, type(speculation).__name__
    times = result.times  # two of three kept at every run but the last (the sequence's end: one candidate)
    assert times.accepted >= 2 * (times.verifying_runs - 1) >= 16
