"""
.. _l-plot-speculative-bench:

Speculative decoding: several tokens per read of the weights
============================================================

A decoding step reads every weight of the model to produce one token: on CPU its speed is about
the memory bandwidth over the model's bytes. A *verifying run* reads them once for a pending token
and ``k`` candidates, keeps the candidates the model agrees with and its own next token: from 1 to
``k + 1`` tokens per run, exactly the tokens of greedy decoding
(:mod:`fx2onnx.runtime.speculative`). The candidates come from the text itself
(``generate --prompt-lookup 10``, transformers' ``prompt_lookup_num_tokens``) or from a smaller
draft model (``generate --draft DRAFT_DIR``, transformers' ``assistant_model``).

``bench/bench_speculative.py`` measures them on the trained benchmark Llama of
``bench/trained_llama.py`` (hidden 512, 4 layers, vocabulary 32000) and a 2-layer draft trained
the same way, exported with ``export_folder`` in float32, beside plain greedy decoding and
onnxruntime-genai in the same mode: its n-gram decoding (``ngram_size`` 2, 10 candidates) and its
draft model (10 candidates a run; ours in the same setting, and with transformers' defaults: up to 15
here, fewer once the draft's probability of its token falls under 0.4), written into ``genai_config.json`` by
:func:`fx2onnx.deploy.genai_config.write_genai_speculative` on a folder exported with every
position's logits (genai verifies with ``logits``; the default folder returns the last position
there and the last 16 in ``verify_logits``). Two prompts, 128 new tokens each:

* **repeating**: a text, the model's own continuation of it, then the text again: the model writes
  the continuation a second time, which the prompt holds (editing, summarizing, code);
* **non-repeating**: a text of the corpus; greedy decoding of this small model falls into a loop of
  words after a while, which prompt lookup then copies;
* **wrong candidates**: a lookup whose candidates are always wrong, the cost of verifying runs which
  keep nothing, with the backoff to plain decoding (after ``n`` failed runs in a row, ``2 ** (n - 1)``
  plain steps, then one candidate a run until one is kept) and without.

The numbers come from ``_doc/bench/speculative.json`` (date and command printed below), measured
on this project's 2-core machine while other jobs ran: they are noisy. Each configuration runs once per
round, the rounds interleaved in a shuffled order; a row gives the best round, the median and the
range of the rounds, the spread of which says what a difference between two rows means. The rows
without a median come from the first command printed below, before the draft ran in genai's setting
(its ``draft`` rows ran with transformers' defaults) and before the backoff went down to one candidate
(it halved them). The last full run ran on a machine loaded 15 to 27 times its 2 cores: its rounds
spread widely; the rows of the always-wrong candidates and the prices of the backoff below are kept
from an earlier, quieter run. The last two commands (``--modes`` greedy, paired steps, prompt lookup
and draft; int4 then float32, 2 rounds, the machine loaded 15 to 23 times) measured the decoders
exported after the graph lost its mask and position nodes (the int4 decoder: 121 nodes then 90;
onnxruntime-genai's own builder makes 55 of the same checkpoint, its q, k, v and its residual sums
fused) and the loop bound its token inputs once: both loops run the same folder, so the graph helps
both, the loop ours alone. A checkpoint's own multi-token-prediction head (``generate --mtp``,
:mod:`fx2onnx.runtime.mtp`) has its own section below: the benchmark Llama written as the GLM-4-MoE it
is, with a head trained on the same corpus.
"""

import json
import os

import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
root = os.path.join(here, "..", "..", "..")
with open(os.path.join(root, "_doc", "bench", "speculative.json"), encoding="utf-8") as f:
    stored = json.load(f)
PAIRED = "greedy, paired steps"
order = [
    "greedy",
    "prompt lookup",
    "draft",
    "draft, transformers' defaults",
    "wrong candidates",
    "wrong candidates, no backoff",
]
rows = sorted(
    (
        r
        for r in stored["rows"]
        if r["mode"] not in ("prefill", "verify cost", PAIRED) and r.get("section") != "mtp"
    ),
    key=lambda r: (
        r["precision"] != "float32",
        r["threads"],
        r["text"] != "repeating",
        r["loop"] != "fx2onnx",
        r["folder"] != "default",
        order.index(r["mode"]),
    ),
)
for command in stored.get("commands", [f"{stored['date']}: {stored['command']}"]):
    print(command)
print(
    f"machine: {stored['machine']}; memory bandwidth {stored['bandwidth_gb_s']:.1f} GB/s (a numpy copy)"
)
print(", ".join(f"{k} {v}" for k, v in stored.get("versions", {}).items()))
loads = [r["load"] for r in stored["rows"] if "load" in r]
if loads:
    print(f"load average of the 2 cores while the rows ran: {min(loads):.1f} to {max(loads):.1f}")

# %%
# The rows
# --------
#
# ``decode``: new tokens after the first over their time, the best round; ``median`` and ``range``: of
# every round (rows measured before the rounds were kept show none); ``tok/run``: new tokens per run of
# the model, the prompt's included, counted the same way for both loops (1.0: one token a run);
# ``floor``: the tokens/s of one read of every weight per token at the measured bandwidth, which a run
# producing several tokens can pass; ``same``: the tokens are plain greedy decoding's.


def spread(r: dict) -> str:
    values = r.get("decode_tok_s_rounds")
    return (
        f"{r['decode_tok_s_median']:>7.1f} {min(values):>6.0f}-{max(values):<5.0f}"
        if values
        else f"{'':>19}"
    )


print(
    f"{'text':<14} {'prec.':<7} {'thr':>3} {'loop':<17} {'folder':<10} {'mode':<30} {'decode':>7} "
    f"{'median':>7} {'range':<12} {'tok/run':>7} {'floor':>6} same"
)
for r in rows:
    per_run = f"{r['tokens_per_run']:>7.2f}" if "tokens_per_run" in r else f"{'':>7}"
    print(
        f"{r['text']:<14} {r['precision']:<7} {r['threads']:>3} {r['loop']:<17} {r['folder']:<10} "
        f"{r['mode']:<30} "
        f"{r['decode_tok_s']:>7.1f} {spread(r)} {per_run} {r['floor_tok_s']:>6.0f} {r['same_tokens']}"
    )
    assert r["same_tokens"], r  # every mode gives greedy decoding's tokens

# %%
# Speed-ups
# ---------
#
# Each mode's decode tokens/s over plain greedy decoding of the same loop on the same text and
# threads, and fx2onnx's over onnxruntime-genai's in the same mode (genai's n-gram and draft run on
# the folder with every position's logits, fx2onnx's on the default folder), from the best rounds. On
# this shared machine the rounds of one configuration spread over a wide range (above): a ratio near 1
# says the two are equal within the noise, not that one is faster; the always-wrong candidates with
# the backoff may come out faster than plain decoding for that reason, the next section prices them
# without the noise. The draft, 2 layers of 4 but the same 32000-token head (most of this small model's
# weights), costs most of a target step per candidate: it gains little here, as a draft would on a
# model whose head dominates. genai's own count of its runs (``target_forward_passes``) gives more
# tokens per run than 10 candidates allow on the non-repeating text: its ``tok/run`` is not comparable
# there.

by = {(r["text"], r["precision"], r["threads"], r["loop"], r["folder"], r["mode"]): r for r in rows}
keys = sorted(
    {(r["text"], r["precision"], r["threads"]) for r in rows}, key=lambda k: (k[1], k[0], k[2])
)
modes = [
    ("prompt lookup", "prompt lookup", "all-logits"),
    ("draft", "draft", "all-logits"),
    ("draft, transformers' defaults", "draft", "all-logits"),
    ("wrong candidates", None, None),
    ("wrong candidates, no backoff", None, None),
]
print(
    f"{'text':<14} {'prec.':<7} {'thr':>3} {'mode':<30} {'vs greedy':>9} {'genai vs greedy':>15} "
    f"{'ours/genai':>10}"
)
for text, precision, threads in keys:
    plain = by[text, precision, threads, "fx2onnx", "default", "greedy"]["decode_tok_s"]
    genai_plain = by[text, precision, threads, "onnxruntime-genai", "default", "greedy"]["decode_tok_s"]
    print(
        f"{text:<14} {precision:<7} {threads:>3} {'greedy':<30} {1:>9.2f} {1:>15.2f} "
        f"{plain / genai_plain:>10.2f}"
    )
    for mode, genai_mode, genai_folder in modes:
        ours = by.get((text, precision, threads, "fx2onnx", "default", mode))
        theirs = by.get((text, precision, threads, "onnxruntime-genai", genai_folder, genai_mode))
        if ours is None:
            continue
        line = f"{text:<14} {precision:<7} {threads:>3} {mode:<30} {ours['decode_tok_s'] / plain:>9.2f}"
        if theirs:
            ratio = ours["decode_tok_s"] / theirs["decode_tok_s"]
            line += f" {theirs['decode_tok_s'] / genai_plain:>15.2f} {ratio:>10.2f}"
        print(line)

# %%
# A decoding step beside genai's, paired
# --------------------------------------
#
# The rounds above spread widely when the machine is loaded. A plain greedy step is also timed in
# short rounds of 48 tokens, the three loops back to back in a shuffled order: each round gives the
# median wall time of its steps and, with one thread (the model runs on the calling thread), their CPU
# time, which the other jobs reach less; ``vs genai`` is the median of the per-round ratios of genai's
# step time to the row's (above 1: faster). ``memory pattern``: our loop on a session left with
# onnxruntime's default, which plans a run's memory per input shape: a decoder's mask grows at every
# step, no shape comes twice, and each step paid for a plan (the loop turns it off). ``load``: the
# load average of the 2-core machine when the row was measured.

print(
    f"{'prec.':<7} {'thr':>3} {'loop':<25} {'step ms':>8} {'vs genai':>8} {'CPU ms':>7} "
    f"{'vs genai':>8} {'load':>5}"
)
for r in stored["rows"]:
    if r["mode"] == PAIRED:
        cpu = (
            f"{r['step_cpu_ms']:>7.2f} {r['cpu_speed_vs_genai']:>8.2f}"
            if r["step_cpu_ms"] is not None
            else f"{'':>16}"
        )
        print(
            f"{r['precision']:<7} {r['threads']:>3} {r['loop']:<25} {r['step_ms']:>8.2f} "
            f"{r['speed_vs_genai']:>8.2f} {cpu} {r['load']:>5.1f}"
        )

# %%
# What the backoff costs
# ----------------------
#
# On this machine a 3 % difference between two rows is below the noise (see the ranges above). The cost
# of the backoff is therefore also priced from counts: the model's time of a run verifying ``k``
# candidates over a plain step's (1 thread, the fastest of 25 runs of each, which the noise does not
# reach), and the runs of each row (how many candidates each verified). The always-wrong candidates
# verify 10, then 5, 2, 1 candidates after 1, 2, 4... plain steps: what they add to plain decoding's model
# time is the ``modeled`` share below (the prompt's run apart, which verifies 10 in every mode).

for r in stored["rows"]:
    if r["mode"] == "verify cost":
        print(
            f"{r['precision']:<7} {r['candidates']:>2} candidates: {r['run_ms']:6.2f} ms, "
            f"{r['ratio']:.2f} x a plain step"
        )
for r in rows:
    if "modeled_backoff_cost" in r and r["mode"].startswith("wrong"):
        print(
            f"{r['text']:<14} {r['precision']:<7} {r['threads']:>3} {r['mode']:<30} verifying runs "
            f"{r['verifying_runs']:>3}, candidates {r['proposed']:>4}: modeled "
            f"+{100 * r['modeled_backoff_cost']:.1f} %"
        )

# %%
# The prefill cost of the verifying logits
# ----------------------------------------
#
# The default folder computes the head on the last 16 positions of a run (one for a decoding step)
# to verify candidates; a folder keeping one position computes it once. The prompt's tokens/s of both:

for r in stored["rows"]:
    if r["mode"] == "prefill":
        print(
            f"logits of the last {r['kept_logits']:>2} positions: prefill of {r['prompt']} tokens at "
            f"{r['prefill_tok_s']:.0f} tokens/s (1 thread)"
        )

# %%
# Multi-token prediction
# ----------------------
#
# A checkpoint of DeepSeek V3, GLM-4-MoE or Step-3.7 may hold a head predicting the token after the next one
# from the model's last hidden state (transformers' ``generate(use_mtp=True)``): one candidate a run, verified
# with the pending token. The benchmark Llama is a GLM-4-MoE whose layers are all dense (the same logits from
# the same weights); ``bench/trained_mtp.py`` gives it a head (one mixture-of-experts layer, as transformers
# builds it) trained on the corpus with the model frozen. The folder exports it as ``onnx/mtp.onnx``
# and writes onnxruntime-genai's ``model.mtp`` section into ``genai_config.json``
# (:func:`fx2onnx.deploy.mtp.write_genai_mtp`). genai's ``MtpGenerator`` needs every position's logits and
# a concatenated cache (``--all-logits --concatenated-cache``), and on CPU (0.18) it stops on float32
# logits (its host fallback casts them to float32, which its CPU cast refuses): its rows run on such a
# folder whose logits are cast to float16 (``float16 logits``), its plain generator on the same copy
# beside them. ``acc/prop``: candidates kept over proposed. The head's candidate is nearly always
# kept, and still neither loop gains: the head reads the 32000-token vocabulary projection again and
# its experts (about 90 MB a run, against about 110 MB for a step of the decoder, whose embedding
# table is read one row at a time), so a run giving two tokens reads about 200 MB where two plain
# steps read 220: at most 10 % less, below this loaded machine's noise. A large model's head is a
# small share of its weights, where the same runs approach twice plain decoding's speed.

mtp = sorted(
    (r for r in stored["rows"] if r.get("section") == "mtp"),
    key=lambda r: (r["threads"], r["text"] != "repeating", r["loop"], r["folder"], r["mode"]),
)
if mtp:
    head = mtp[0]["head_training"]
    print(
        f"head: {head['steps']} training steps, loss {head['loss']:.2f}, accuracy of the "
        f"token after the next {head['accuracy_p2']:.2f}; decoder {mtp[0]['weights_mb']:.0f} MB, "
        f"head {mtp[0]['head_mb']:.0f} MB"
    )
    print(
        f"{'text':<14} {'thr':>3} {'loop':<17} {'folder':<15} {'mode':<22} {'decode':>7} "
        f"{'median':>7} {'tok/run':>7} {'acc/prop':>9} same"
    )
    for r in mtp:
        print(
            f"{r['text']:<14} {r['threads']:>3} {r['loop']:<17} {r['folder']:<15} {r['mode']:<22} "
            f"{r['decode_tok_s']:>7.1f} {r['decode_tok_s_median']:>7.1f} "
            f"{r['tokens_per_run']:>7.2f} {r['accepted']:>4}/{r['proposed']:<4} {r['same_tokens']}"
        )
        assert r["same_tokens"], r  # the head's candidates never change greedy decoding's tokens
    mtp_by = {
        (r["text"], r["threads"], r["loop"], r["folder"], r["mode"]): r["decode_tok_s"] for r in mtp
    }
    MTP = "multi-token prediction"
    for text, threads in sorted({(r["text"], r["threads"]) for r in mtp}):
        ours = mtp_by[text, threads, "fx2onnx", "default", MTP]
        ours_plain = mtp_by[text, threads, "fx2onnx", "default", "greedy"]
        theirs = mtp_by[text, threads, "onnxruntime-genai", "float16 logits", MTP]
        theirs_plain = mtp_by[text, threads, "onnxruntime-genai", "float16 logits", "greedy"]
        print(
            f"{text:<14} {threads} thread(s): ours --mtp / ours greedy {ours / ours_plain:.2f}, "
            f"genai MTP / genai greedy {theirs / theirs_plain:.2f}, "
            f"ours / genai with MTP {ours / theirs:.2f}"
        )

# %%
# Plot
# ----
#
# Decode tokens/s of every loop and mode (float32), one panel per text, the bars of one and two threads
# side by side, the floor of one read of the weights per token as a dashed line.

texts = [t for t in ("repeating", "non-repeating") if any(k[0] == t for k in keys)]
series = [
    ("fx2onnx", "default", "greedy"),
    ("fx2onnx", "default", "prompt lookup"),
    ("fx2onnx", "default", "draft"),
    ("fx2onnx", "default", "wrong candidates"),
    ("onnxruntime-genai", "default", "greedy"),
    ("onnxruntime-genai", "all-logits", "prompt lookup"),
    ("onnxruntime-genai", "all-logits", "draft"),
]
threads = sorted({k[2] for k in keys})
fig, axes = plt.subplots(1, len(texts), figsize=(7.4, 3.8), sharey=True, squeeze=False)
for ax, text in zip(axes[0], texts):
    for j, thread in enumerate(threads):
        values = [by.get((text, "float32", thread, *s), {}).get("decode_tok_s", 0) for s in series]
        ax.barh(
            [i + 0.4 * j for i in range(len(series))], values, height=0.4, label=f"{thread} thread(s)"
        )
        floor = by[text, "float32", thread, "fx2onnx", "default", "greedy"]["floor_tok_s"]
    ax.axvline(floor, color="gray", linestyle="--", linewidth=1)
    ax.set_yticks([i + 0.2 for i in range(len(series))])
    names = [f"{'genai' if loop != 'fx2onnx' else 'fx2onnx'} {mode}" for loop, _, mode in series]
    ax.set_yticklabels(names, fontsize=8)
    ax.set_title(text, fontsize=9)
    ax.set_xlabel("decode tokens/s (higher is better)", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
axes[0, 0].invert_yaxis()
axes[0, 0].legend(fontsize=7, loc="lower right")
fig.suptitle(
    "Greedy decoding, several tokens per run (dashed: one read of the weights per token)", fontsize=9
)
fig.tight_layout()
