"""Speculative decoding: prompt lookup and a draft model in fx2onnx's loop, beside plain greedy decoding and
onnxruntime-genai in the same mode, on the trained benchmark Llama.

The model is ``bench/trained_llama.py``'s (hidden 512, 4 layers, vocabulary 32000, trained on a text-like
corpus: greedy decoding is confident, as a trained LLM's); the draft is the same architecture with 2 layers,
trained the same way (``--draft-steps``, cached beside it). Both are written as ``save_pretrained`` folders
and exported with ``fx2onnx.deploy.export_folder`` (float32; ``--precisions int4`` int4): the default
folder (``logits`` of the last position, ``verify_logits`` of the last 16) and one exported with every
position's logits, which onnxruntime-genai's n-gram decoding and draft model need
(:func:`fx2onnx.deploy.genai_config.write_genai_speculative`).

Two texts, one prompt each, 128 new tokens, greedy, batch 1:

* **repeating**: a corpus text ``S``, the model's own greedy continuation ``G`` of ``S``, then ``S`` again: the
  model writes ``G`` a second time, which the prompt holds (editing, summarizing, code);
* **non-repeating**: a corpus text the continuation of which is not in the prompt.

For each thread count (1, 2), each loop and mode: decode tokens/s (the new tokens after the first over their
time), the mean acceptance length (new tokens per run of the model after the prompt; genai's from its
``target_forward_passes``) and the tokens per run counted the same way for both loops (the prompt's run
included), whether the tokens are plain greedy's; the best of ``--repeat`` rounds, their median and every
round's value (the noise), every configuration once per round in a shuffled order, after a round of warm-up,
each generation after a pause of ``SETTLE_SECONDS`` (the sessions of both loops live in one process: the last
one's onnxruntime workers spin a while after its run and would hold a core at 2 threads); also the process CPU
time per token after the first (``cpu_ms_per_token``: the least of the rounds, and their median), which the
machine's load reaches less.
The draft runs in genai's setting (10 candidates a run, ours at most 10: each run verifies the count giving the
most tokens per second, none when no count beats a plain step, :class:`fx2onnx.runtime.candidate_budget.CandidateBudget`,
as prompt lookup's at most 10) and with transformers' defaults (up to 20, here 15, fewer once the draft's
probability falls under 0.4). The backoff is also priced from counts: the model's time of a run verifying k candidates
over a plain step's (the fastest of 25, robust to the noise), summed over the
runs of a row (``modeled_backoff_cost``). A plain decoding step is also timed beside genai's in paired short
rounds, wall and CPU time (``--modes "greedy, paired steps"``, :func:`paired_steps`), which the machine's load
reaches less. Each row says the load average when it was measured. The floor beside it: the machine's memory
bandwidth (a numpy copy of 256 MB) over the weights' bytes, the tokens/s of one read of every weight per
token. Also the prefill cost of keeping 16 positions' logits instead of 1 (a folder exported with 1).

    python bench/bench_speculative.py [--json _doc/bench/speculative.json] [--precisions float32,int4] [--repeat 3]
        [--threads 1] [--folders DIR (trained, written and exported once, kept)]
    python bench/bench_speculative.py --folders DIR --prepare --precisions int4,float32   # only write DIR

The machine is shared: numbers are noisy (the best of interleaved runs is kept).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from trained_llama import CONFIG, QUICK_CONFIG, Corpus, cache_path, train, trained_llama  # noqa: E402

import fx2onnx.deploy.text_generation as deploy_text  # noqa: E402
from fx2onnx.deploy import export_folder  # noqa: E402
from fx2onnx.deploy.genai_config import write_genai_speculative  # noqa: E402
from fx2onnx.runtime.folder import FolderGenerator  # noqa: E402
from fx2onnx.runtime.mtp import MultiTokenPrediction  # noqa: E402
from fx2onnx.runtime.speculative import DraftModel, PromptLookup, SequenceDecoder  # noqa: E402

#: a token the corpus never holds: the end of sequence onnxruntime-genai's config needs, never generated
EOS = 2
NEW = 128
#: the mode of the rows of :func:`paired_steps`
PAIRED = "greedy, paired steps"
#: the modes of the rows of :func:`mtp_rows` (their ``section`` is "mtp")
MTP = "multi-token prediction"
#: the pause before each timed generation: onnxruntime's worker threads spin a while after a run ends, and the
#: loops run several sessions in one process (ours, genai's, a draft's): the next generation would start while
#: the last session's workers still hold a core (at 2 threads)
SETTLE_SECONDS = 0.05


class WrongLookup(PromptLookup):
    """Prompt lookup whose candidates are always wrong (each token plus one): the cost of verifying runs
    which keep nothing, with and without the backoff to plain decoding."""

    def propose(self, tokens: list[int], k: int) -> list[int]:
        return [t + 1 for t in super().propose(tokens, k)] or [tokens[-1] + 1] * min(k, self.num_tokens)


def draft_llama(steps: int, verbose: bool = False):
    """The 2-layer draft: the benchmark Llama's config with 2 layers, trained as trained_llama trains."""
    from fx2onnx.zoo import get_tiny_model

    config = dict(CONFIG, num_hidden_layers=2)
    tiny = get_tiny_model("llama", with_cache=True, attn_implementation="sdpa", max_position_embeddings=512, **config)
    path = cache_path(False, steps).replace("llama_bench", "llama_draft2")
    if os.path.exists(path):
        tiny.model.load_state_dict(torch.load(path, weights_only=True))
        return tiny
    train(tiny.model, Corpus(config["vocab_size"]), steps, batch=8, length=64, lr=3e-3, verbose=verbose)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(tiny.model.state_dict(), path + ".tmp")
    os.replace(path + ".tmp", path)
    return tiny


def write_checkpoint(model: torch.nn.Module, folder: str) -> None:
    """A save_pretrained folder of ``model`` (float32) whose end of sequence is :data:`EOS`."""
    import transformers

    model.config.eos_token_id = model.config.pad_token_id = EOS
    model.config.bos_token_id = None
    model.save_pretrained(folder)
    transformers.GenerationConfig(eos_token_id=EOS, pad_token_id=EOS).save_pretrained(folder)


def genai_copy(folder: str, out: str, threads: int, **speculative) -> str:
    """A copy of ``folder`` (weights hard-linked) whose genai_config runs ``threads`` intra-op threads and,
    given ``speculative``, genai's speculative decoding."""
    shutil.copytree(folder, out, copy_function=lambda src, dst: (os.link if src.endswith("data") else
                                                                 shutil.copyfile)(src, dst))
    if speculative:
        why = write_genai_speculative(out, **speculative)
        assert why is None, why
    path = os.path.join(out, "genai_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    for section in ("decoder", "draft"):
        if section in config["model"]:
            config["model"][section]["session_options"]["intra_op_num_threads"] = threads
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    return out


def genai_run(model, prompt: list[int]) -> tuple[list[int], float, float, dict]:
    """(new tokens, decode seconds after the first token, total seconds, speculative stats)."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + NEW, do_sample=False)
    time.sleep(SETTLE_SECONDS)
    begin = time.perf_counter()
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([prompt], dtype=np.int32))
    tokens, first = [], None
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
        if first is None:
            first, first_cpu = time.perf_counter(), time.process_time()
    end, end_cpu = time.perf_counter(), time.process_time()
    stats = dict(generator.get_speculative_stats(), decode_cpu_s=end_cpu - first_cpu)
    return tokens, end - first, end - begin, stats


def genai_passes(stats: dict) -> int:
    """The runs of the model in onnxruntime-genai's speculative stats: its verifying runs
    (``target_forward_passes``) and the plain steps where n-gram lookup found nothing
    (``standard_fallback_steps``, not counted in the former)."""
    return int(stats.get("target_forward_passes", 0)) + int(stats.get("standard_fallback_steps", 0))


def bandwidth() -> float:
    """GB/s of a numpy copy of 256 MB (read + write), the best of 5."""
    a = np.ones(2**26, dtype=np.float32)
    b = np.empty_like(a)
    best = min(_timed(lambda: np.copyto(b, a)) for _ in range(5))
    return 2 * a.nbytes / best / 1e9


def versions() -> dict[str, str]:
    import onnxruntime
    import onnxruntime_genai

    return {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
            "onnxruntime-genai": onnxruntime_genai.__version__}


def _timed(fn) -> float:
    begin = time.perf_counter()
    fn()
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the rows there")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--draft-steps", type=int, default=80)
    parser.add_argument("--precisions", default="float32", help="float32, int4 or both (float32,int4)")
    parser.add_argument("--train-draft", action="store_true", help="train (and cache) the draft, then stop")
    parser.add_argument("--quick", action="store_true", help="a smoke test: the tiny trained Llama as model and draft")
    parser.add_argument("--modes", default=None,
                        help="measure these modes only, separated by ';' (the other rows of --json are kept)")
    parser.add_argument("--folders", default=None,
                        help="write the checkpoints and export the folders there when missing, and keep them (a later "
                             "run reuses them, no training; default: a temporary folder)")
    parser.add_argument("--prepare", action="store_true",
                        help="with --folders: train, write and export every precision's folders there, then stop")
    args = parser.parse_args()
    if args.prepare and not args.folders:
        parser.error("--prepare writes the folders into --folders DIR: name it")
    torch.set_num_threads(1)
    if args.train_draft:
        draft_llama(args.draft_steps, verbose=True)
        return
    rows, root = [], args.folders or tempfile.mkdtemp(prefix="bench_speculative_")
    os.makedirs(root, exist_ok=True)
    try:
        checkpoints = [os.path.join(root, name, "config.json") for name in ("target", "draft")]
        if not (args.folders and all(os.path.exists(p) for p in checkpoints)):  # written once into --folders
            if args.quick:
                target = draft = trained_llama(quick=True).model
            else:
                target, draft = trained_llama().model, draft_llama(args.draft_steps).model
            write_checkpoint(target, os.path.join(root, "target"))
            write_checkpoint(draft, os.path.join(root, "draft"))
        corpus = Corpus((QUICK_CONFIG if args.quick else CONFIG)["vocab_size"])
        seed_text = corpus.sample(1, 64, seed=7)[0].tolist()
        other = corpus.sample(1, 96, seed=8)[0].tolist()
        floor_gbs = 0.0 if args.prepare else bandwidth()
        if args.modes and not args.prepare and MTP in args.modes.split(";"):
            rows += mtp_rows(root, {"repeating": seed_text, "non-repeating": other}, args.threads, args.repeat,
                             floor_gbs, args.quick)
        for precision in ([] if args.modes == MTP else args.precisions.split(",")):
            quantize = None if precision == "float32" else "int4"
            folders = {}
            for name, source, options in (("default", "target", {}), ("all-logits", "target", {"all_logits": True}),
                                          ("draft", "draft", {})):
                folders[name] = os.path.join(root, f"{name}_{precision}")
                if not (args.folders and os.path.exists(os.path.join(folders[name], "genai_config.json"))):
                    export_folder(os.path.join(root, source), folders[name], quantize=quantize, validate=False,
                                  **options)
            if args.prepare:
                continue
            data = "model_q4.onnx_data" if quantize == "int4" else "model.onnx_data"  # transformers.js' names
            if not os.path.exists(os.path.join(folders["default"], "onnx", data)):  # a folder of the former layout
                data = "model.onnx_data"
            weights_mb = os.path.getsize(os.path.join(folders["default"], "onnx", data)) / 2**20
            greedy = FolderGenerator(folders["default"]).generate_text(seed_text, NEW).new_ids
            texts = {"repeating": seed_text + greedy + seed_text, "non-repeating": other}
            modes = args.modes.split(";") if args.modes else None
            for threads in [int(t) for t in args.threads.split(",")]:
                if modes != [PAIRED]:
                    rows += measure(folders, texts, threads, precision, weights_mb, floor_gbs, args.repeat, root,
                                    modes)
                if not modes or PAIRED in modes:
                    rows += paired_steps(folders["default"], texts["non-repeating"], threads, precision, root)
            costs = verify_cost(folders["default"], texts["non-repeating"], precision) if not modes else []
            costs_before = []
            if not costs and args.json and os.path.exists(args.json):  # the ratios measured before
                with open(args.json, encoding="utf-8") as f:
                    costs_before = [r for r in json.load(f)["rows"]
                                    if r["mode"] == "verify cost" and r["precision"] == precision]
            ratios = {r["candidates"]: r["ratio"] for r in (costs or costs_before)}
            for r in rows:
                if r.get("precision") == precision and r.get("run_candidates"):
                    r["modeled_backoff_cost"] = backoff_cost(r, ratios)
                r.pop("run_candidates", None)
            rows += costs
            if precision == "float32" and not args.modes:  # the prefill cost of 16 positions' logits against 1
                rows += prefill_cost(root, folders["default"], texts["repeating"], args.repeat)
    finally:
        if not args.folders:
            shutil.rmtree(root, ignore_errors=True)
        else:  # the copies genai runs are made again at each run
            for name in os.listdir(root):
                if name.startswith("g_"):
                    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    if args.prepare:
        print(f"folders written into {root}")
        return
    for r in rows:
        print(json.dumps(r))
    if args.json:
        # the rows of an earlier run this one did not measure are kept (another precision, other threads)
        key = ("text", "precision", "threads", "loop", "folder", "mode", "kept_logits", "candidates", "section")
        kept = []
        if os.path.exists(args.json):
            with open(args.json, encoding="utf-8") as f:
                measured = {tuple(r.get(k) for k in key) for r in rows}
                kept = [r for r in json.load(f)["rows"] if tuple(r.get(k) for k in key) not in measured]
        # the command as typed, the folders' path (a temporary one) named FOLDERS
        argv = shlex.join("FOLDERS" if args.folders and a == args.folders else a for a in sys.argv)
        command = f"{datetime.date.today().isoformat()}: python " + argv
        for r in rows:  # each row says when and how it was measured
            r.update(date=datetime.date.today().isoformat(), command="python " + argv)
        commands = [command]
        if kept:
            with open(args.json, encoding="utf-8") as f:
                commands = json.load(f).get("commands", []) + commands
        stored = {"date": datetime.date.today().isoformat(), "command": "python " + argv,
                  "commands": commands,
                  "machine": f"{os.cpu_count()} cores, shared with other jobs (noisy)", "bandwidth_gb_s": floor_gbs,
                  "new_tokens": NEW, "versions": versions(), "rows": kept + rows}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(stored, f, indent=1)


def measure(folders: dict[str, str], texts: dict[str, list[int]], threads: int, precision: str, weights_mb: float,
            floor_gbs: float, repeat: int, root: str, modes: list[str] | None = None) -> list[dict]:
    """The rows of one precision and thread count: each loop and mode (those of ``modes``) on both texts."""
    import onnxruntime_genai as og

    ours = {(folder, mode): FolderGenerator(folders[folder], threads=threads)
            for folder in ("default", "all-logits") for mode in ("greedy", "prompt lookup")}
    ours["default", "draft"] = FolderGenerator(folders["default"], threads=threads)
    ours["default", "draft, transformers' defaults"] = FolderGenerator(folders["default"], threads=threads)
    ours["default", "wrong candidates"] = FolderGenerator(folders["default"], threads=threads)
    ours["default", "wrong candidates, no backoff"] = FolderGenerator(folders["default"], threads=threads)
    no_backoff = WrongLookup(10)
    no_backoff.backoff = False
    speculations = {"greedy": None, "prompt lookup": PromptLookup(10), "wrong candidates": WrongLookup(10),
                    "wrong candidates, no backoff": no_backoff}
    # genai's draft mode: 10 candidates a run whatever the draft's confidence; transformers' defaults: up to 20
    # (15: the folder's verify_logits), fewer once the draft's probability falls under 0.4
    speculations["draft"] = DraftModel(folders["draft"], threads=threads, num_assistant_tokens=10,
                                       assistant_confidence_threshold=0.0)
    speculations["draft, transformers' defaults"] = DraftModel(folders["draft"], threads=threads)
    for (folder, mode), gen in ours.items():
        gen.generator.speculation = speculations[mode]
    if modes:
        ours = {key: gen for key, gen in ours.items() if key[1] in modes or key == ("default", "greedy")}
    tag = f"{precision}_{threads}"
    genai = {
        ("default", "greedy"): og.Model(genai_copy(folders["default"], os.path.join(root, "g_plain_" + tag), threads)),
        ("all-logits", "prompt lookup"): og.Model(genai_copy(
            folders["all-logits"], os.path.join(root, "g_ngram_" + tag), threads, max_draft_tokens=10, ngram_size=2)),
        ("all-logits", "draft"): og.Model(genai_copy(
            folders["all-logits"], os.path.join(root, "g_draft_" + tag), threads, max_draft_tokens=10,
            draft_folder=folders["draft"])),
    }
    if modes:
        genai = {key: model for key, model in genai.items() if key[1] in modes}
    rows = []
    for text, prompt in texts.items():
        expected = None
        best: dict[tuple, dict] = {}
        rounds: dict[tuple, list[float]] = {}
        cpu_rounds: dict[tuple, list[float]] = {}
        configurations = [("fx2onnx", key) for key in ours] + [("onnxruntime-genai", key) for key in genai]
        rng = np.random.default_rng(0)
        for round_ in range(repeat + 1):  # interleaved, in a shuffled order; the first round warms up
            for i in rng.permutation(len(configurations)):
                loop, (folder, mode) = configurations[i]
                if loop == "fx2onnx":
                    gen, stamps = ours[folder, mode], []
                    time.sleep(SETTLE_SECONDS)
                    out = gen.generator.generate(np.array([prompt]), NEW, eos_token_id=gen.eos_token_id,
                                                 pad_token_id=gen.pad_token_id,
                                                 streamer=lambda _: stamps or stamps.append(time.process_time()))
                    cpu = time.process_time() - stamps[0]
                    t, new_ids = gen.generator.last_times, out[0, len(prompt):].tolist()
                    runs = getattr(t, "target_runs", t.decode_steps) + 1
                    row = dict(loop=loop, folder=folder, mode=mode, tokens=new_ids,
                               cpu_ms_per_token=cpu / (len(new_ids) - 1) * 1e3,
                               decode_tok_s=t.decode_steps / t.decode_total,
                               total_tok_s=(t.decode_steps + 1) / (t.prefill_total + t.decode_total),
                               acceptance_length=getattr(t, "mean_acceptance_length", 1.0),
                               tokens_per_run=len(new_ids) / runs, runs=runs,
                               proposed=getattr(t, "proposed", 0), verifying_runs=getattr(t, "verifying_runs", 0),
                               run_candidates=list(getattr(t, "run_candidates", [])))
                else:
                    tokens, decode_s, total_s, stats = genai_run(genai[folder, mode], prompt)
                    passes = genai_passes(stats)
                    row = dict(loop=loop, folder=folder, mode=mode, tokens=tokens,
                               cpu_ms_per_token=stats["decode_cpu_s"] / (len(tokens) - 1) * 1e3,
                               decode_tok_s=(len(tokens) - 1) / decode_s, total_tok_s=len(tokens) / total_s,
                               acceptance_length=(len(tokens) - 1) / (passes - 1) if passes > 1 else 1.0,
                               tokens_per_run=len(tokens) / passes if passes else 1.0, runs=passes or len(tokens),
                               proposed=int(stats.get("draft_tokens_proposed", 0)))
                key = (loop, folder, mode)
                if round_:
                    rounds.setdefault(key, []).append(row["decode_tok_s"])
                    cpu_rounds.setdefault(key, []).append(row["cpu_ms_per_token"])
                if round_ and (key not in best or row["decode_tok_s"] > best[key]["decode_tok_s"]):
                    best[key] = row
        expected = best["fx2onnx", "default", "greedy"]["tokens"]
        for key, row in best.items():
            same = row.pop("tokens") == expected
            spread = rounds[key]  # every round's decode tokens/s: the noise of the shared machine
            rows.append(dict(row, decode_tok_s_median=float(np.median(spread)),
                             cpu_ms_per_token=min(cpu_rounds[key]),
                             cpu_ms_per_token_median=float(np.median(cpu_rounds[key])),
                             decode_tok_s_rounds=[round(v, 1) for v in spread], text=text, threads=threads,
                             precision=precision, same_tokens=same,
                             weights_mb=round(weights_mb, 1), load=os.getloadavg()[0],
                             floor_tok_s=floor_gbs * 1e9 / (weights_mb * 2**20)))
            print(rows[-1], flush=True)
    return rows


def float16_logits_copy(folder: str, out: str) -> str:
    """A copy of ``folder`` whose decoder casts its logits to float16 (weights hard-linked): onnxruntime-genai
    0.18's MtpGenerator stops on float32 logits on CPU (:func:`fx2onnx.deploy.mtp.write_genai_mtp`)."""
    import onnx

    shutil.copytree(folder, out, copy_function=lambda src, dst: (os.link if src.endswith("data") else
                                                                 shutil.copyfile)(src, dst))
    path = os.path.join(out, "onnx", "model.onnx")
    model = onnx.load(path, load_external_data=False)
    for node in model.graph.node:
        node.output[:] = ["logits_float32" if o == "logits" else o for o in node.output]
    model.graph.node.append(onnx.helper.make_node("Cast", ["logits_float32"], ["logits"], to=onnx.TensorProto.FLOAT16))
    next(o for o in model.graph.output if o.name == "logits").type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    onnx.save(model, path)
    return out


def genai_mtp_run(model, head, prompt: list[int]) -> tuple[list[int], float, float, dict]:
    """onnxruntime-genai's MtpGenerator (one candidate a run): (new tokens, decode seconds after the first
    token, total seconds, its stats)."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + NEW, do_sample=False)
    params.set_speculative_options(max_draft_tokens=1)
    begin = time.perf_counter()
    generator = og.MtpGenerator(model, head, params)
    generator.append_tokens(np.array(prompt, dtype=np.int32))
    first = None
    while not generator.is_done():
        generator.generate_next_token()
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    return generator.get_sequence().tolist()[len(prompt):], end - first, end - begin, generator.get_stats()


def mtp_rows(root: str, texts: dict[str, list[int]], threads_list: str, repeat: int, floor_gbs: float,
             quick: bool) -> list[dict]:
    """Multi-token prediction on the trained benchmark Llama written as a GLM-4-MoE checkpoint with a trained
    head (``bench/trained_mtp.py``): our loop greedy and with ``--mtp`` on the default folder, genai's plain
    generator on it; genai's MtpGenerator (and its plain generator, the baseline) on the folder exported as
    it needs (every position's logits, the cache concatenated) whose logits are cast to float16, which its
    CPU path needs. Float32, 1 candidate a run, interleaved rounds as :func:`measure`'s."""
    import onnxruntime_genai as og

    from fx2onnx.deploy.mtp import genai_head_overlay
    from trained_mtp import write_mtp_checkpoint

    checkpoint = os.path.join(root, "mtp_target")
    record = write_mtp_checkpoint(checkpoint, quick=quick)
    folders = {"default": os.path.join(root, "mtp_default"), "genai": os.path.join(root, "mtp_genai")}
    import transformers

    cls = transformers.Glm4MoeForCausalLM
    saved = cls._keys_to_ignore_on_load_unexpected
    n = transformers.AutoConfig.from_pretrained(checkpoint).num_hidden_layers
    cls._keys_to_ignore_on_load_unexpected = [rf"model\.layers\.{n}\..*"]  # the head's layer: MtpModel reads it
    try:
        for name, options in (("default", {}), ("genai", {"all_logits": True, "cache_in_place": False})):
            if not os.path.exists(os.path.join(folders[name], "fx2onnx.json")):
                export_folder(checkpoint, folders[name], validate=False, **options)
    finally:
        cls._keys_to_ignore_on_load_unexpected = saved
    half = os.path.join(root, "g_mtp_half")
    shutil.rmtree(half, ignore_errors=True)
    float16_logits_copy(folders["genai"], half)
    weights_mb = os.path.getsize(os.path.join(folders["default"], "onnx", "model.onnx_data")) / 2**20
    head_mb = os.path.getsize(os.path.join(folders["default"], "onnx", "mtp.onnx")) / 2**20
    greedy = FolderGenerator(folders["default"]).generate_text(texts["repeating"], NEW).new_ids
    texts = dict(texts, repeating=texts["repeating"] + greedy + texts["repeating"])
    rows = []
    for threads in [int(t) for t in threads_list.split(",")]:
        ours = {"greedy": FolderGenerator(folders["default"], threads=threads),
                MTP: FolderGenerator(folders["default"], threads=threads)}
        ours[MTP].generator.speculation = MultiTokenPrediction(folders["default"], threads=threads)
        plain_model = og.Model(genai_copy(folders["default"], os.path.join(root, f"g_mtp_plain_{threads}"), threads))
        half_copy = genai_copy(half, os.path.join(root, f"g_mtp_half_{threads}"), threads)
        half_model = og.Model(half_copy)
        config = og.Config(half_copy)
        config.overlay(genai_head_overlay(half_copy))
        head = og.Model(config)
        configurations = [("fx2onnx", "default", "greedy"), ("fx2onnx", "default", MTP),
                          ("onnxruntime-genai", "default", "greedy"),
                          ("onnxruntime-genai", "float16 logits", "greedy"),
                          ("onnxruntime-genai", "float16 logits", MTP)]
        for text, prompt in texts.items():
            best: dict[tuple, dict] = {}
            rounds: dict[tuple, list[float]] = {}
            rng = np.random.default_rng(2)
            for round_ in range(repeat + 1):  # the first round warms up
                for i in rng.permutation(len(configurations)):
                    loop, folder, mode = key = configurations[i]
                    time.sleep(SETTLE_SECONDS)
                    if loop == "fx2onnx":
                        result = ours[mode].generate_text(prompt, NEW)
                        t = result.times
                        runs = getattr(t, "target_runs", t.decode_steps) + 1
                        row = dict(tokens=result.new_ids, decode_tok_s=t.decode_steps / t.decode_total,
                                   acceptance_length=getattr(t, "mean_acceptance_length", 1.0),
                                   tokens_per_run=len(result.new_ids) / runs, runs=runs,
                                   proposed=getattr(t, "proposed", 0), accepted=getattr(t, "accepted", 0))
                    else:
                        if mode == MTP:
                            tokens, decode_s, _, stats = genai_mtp_run(half_model, head, prompt)
                        else:
                            tokens, decode_s, _, stats = genai_run(
                                plain_model if folder == "default" else half_model, prompt)
                        passes = genai_passes(stats) or len(tokens)
                        row = dict(tokens=tokens, decode_tok_s=(len(tokens) - 1) / decode_s,
                                   tokens_per_run=len(tokens) / passes, runs=passes,
                                   proposed=int(stats.get("draft_tokens_proposed", 0)),
                                   accepted=int(stats.get("draft_tokens_accepted", 0)))
                    if round_:
                        rounds.setdefault(key, []).append(row["decode_tok_s"])
                        if key not in best or row["decode_tok_s"] > best[key]["decode_tok_s"]:
                            best[key] = row
            expected = best["fx2onnx", "default", "greedy"]["tokens"]
            for (loop, folder, mode), row in best.items():
                same = row.pop("tokens") == expected
                spread = rounds[loop, folder, mode]
                rows.append(dict(row, section="mtp", loop=loop, folder=folder, mode=mode, text=text,
                                 threads=threads, precision="float32", same_tokens=same,
                                 decode_tok_s_median=float(np.median(spread)),
                                 decode_tok_s_rounds=[round(v, 1) for v in spread],
                                 weights_mb=round(weights_mb, 1), head_mb=round(head_mb, 1),
                                 floor_tok_s=floor_gbs * 1e9 / (weights_mb * 2**20), head_training=record,
                                 load=os.getloadavg()[0]))
                print(rows[-1], flush=True)
    return rows


def paired_steps(folder: str, prompt: list[int], threads: int, precision: str, root: str, rounds: int = 12,
                 new: int = 48) -> list[dict]:
    """A decoding step of plain greedy decoding, fx2onnx's loop beside onnxruntime-genai's on the same folder, robust
    to the machine's load: ``rounds`` short generations of each (``new`` tokens), interleaved in a shuffled order,
    each giving the median wall time of its steps and (1 thread, where the model runs on the calling thread) their
    CPU time; a row gives the median over the rounds and the median of the per-round ratios to genai's (rounds
    run back to back see the same load). Also fx2onnx's loop on a session planning its memory per input shape
    (onnxruntime's default, which the loop turns off): what it cost."""
    import onnxruntime
    import onnxruntime_genai as og

    from fx2onnx.runtime.generate import OnnxGenerator

    options = onnxruntime.SessionOptions()
    options.log_severity_level, options.intra_op_num_threads = 3, threads
    with open(os.path.join(folder, "fx2onnx.json"), encoding="utf-8") as f:
        decoder = os.path.join(folder, json.load(f)["decoder"])
    pattern = OnnxGenerator(onnxruntime.InferenceSession(decoder, options, providers=["CPUExecutionProvider"]))
    gens = {"fx2onnx": FolderGenerator(folder, threads=threads).generator, "fx2onnx, memory pattern": pattern}
    model = og.Model(genai_copy(folder, os.path.join(root, f"g_paired_{precision}_{threads}"), threads))
    clock = time.thread_time if threads == 1 else None

    def stamp(stamps: list) -> None:
        stamps.append((time.perf_counter(), clock() if clock else 0.0))

    def ours(gen) -> list:
        stamps: list = []
        gen.generate(np.array([prompt]), new, streamer=lambda _: stamp(stamps))
        return stamps

    def genai() -> list:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + new, do_sample=False)
        generator, stamps = og.Generator(model, params), []
        generator.append_tokens(np.array([prompt], dtype=np.int32))
        while not generator.is_done():
            generator.generate_next_token()
            generator.get_next_tokens()
            stamp(stamps)
        return stamps

    runs = {name: (lambda gen=gen: ours(gen)) for name, gen in gens.items()}
    runs["onnxruntime-genai"] = genai
    wall: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    rng = np.random.default_rng(1)
    for round_ in range(rounds + 1):  # the first round warms up
        for i in rng.permutation(len(runs)):
            name = list(runs)[i]
            time.sleep(SETTLE_SECONDS)
            steps = np.diff(np.array(runs[name]()), axis=0)[1:]
            if round_:
                wall[name].append(float(np.median(steps[:, 0])) * 1e3)
                cpu[name].append(float(np.median(steps[:, 1])) * 1e3)
    base = "onnxruntime-genai"
    return [dict(loop=name, folder="default", mode=PAIRED, text="non-repeating", threads=threads, precision=precision,
                 rounds=rounds, step_ms=float(np.median(wall[name])),
                 speed_vs_genai=float(np.median(np.array(wall[base]) / np.array(wall[name]))),
                 step_cpu_ms=float(np.median(cpu[name])) if clock else None,
                 cpu_speed_vs_genai=float(np.median(np.array(cpu[base]) / np.array(cpu[name]))) if clock else None,
                 load=os.getloadavg()[0])
            for name in runs]


def verify_cost(folder: str, prompt: list[int], precision: str, repeat: int = 25) -> list[dict]:
    """The model's time of a run verifying ``k`` candidates (``k + 1`` tokens after a cache of the prompt) over a
    plain step's (1 token), 1 thread: the fastest of ``repeat`` runs each, robust to the machine's noise. It
    prices the backoff: a row's verifying runs cost the sum of these ratios minus one in plain steps."""
    decoder = SequenceDecoder(FolderGenerator(folder, threads=1).generator)
    decoder.start(prompt, 64)
    length, best = decoder.length, {}
    for _ in range(repeat):
        for k in (0, 1, 2, 3, 5, 10, 15):
            begin = time.perf_counter()
            decoder.run(prompt[:k + 1])
            elapsed = time.perf_counter() - begin
            decoder.rollback(length)
            best[k] = min(best.get(k, elapsed), elapsed)
    return [dict(loop="fx2onnx", mode="verify cost", precision=precision, threads=1, candidates=k,
                 run_ms=v * 1e3, ratio=v / best[0]) for k, v in best.items()]


def backoff_cost(row: dict, ratios: dict[int, float]) -> float:
    """The share a row's verifying runs add to plain decoding's model time, from :func:`verify_cost`'s ratios
    (a count of candidates between two measured ones takes the larger's)."""
    def ratio(k: int) -> float:
        return ratios[min(c for c in ratios if c >= k)] if k else 1.0

    return sum(ratio(k) - 1 for k in row["run_candidates"]) / len(row["run_candidates"])


def prefill_cost(root: str, folder: str, prompt: list[int], repeat: int) -> list[dict]:
    """Prefill tokens/s of the default folder (the last 16 positions' logits) and of one keeping 1."""
    one = os.path.join(root, "keep1")
    saved = deploy_text.VERIFY_TOKENS
    deploy_text.VERIFY_TOKENS = 1
    try:
        export_folder(os.path.join(root, "target"), one, validate=False)
    finally:
        deploy_text.VERIFY_TOKENS = saved
    gens = {16: FolderGenerator(folder, threads=1), 1: FolderGenerator(one, threads=1)}
    best = {k: 0.0 for k in gens}
    for _ in range(max(repeat, 5)):
        for kept, gen in gens.items():
            result = gen.generate_text(prompt, 1)
            best[kept] = max(best[kept], len(prompt) / result.times.prefill_total)
    return [dict(loop="fx2onnx", mode="prefill", kept_logits=k, prompt=len(prompt), threads=1, precision="float32",
                 prefill_tok_s=v) for k, v in best.items()]


if __name__ == "__main__":
    main()
