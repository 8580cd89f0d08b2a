"""Our folder export beside optimum's on the same checkpoint folders: export time, files size, latency.

Each model is a published configuration written in code (BERT-base, all-MiniLM-L6, ViT-base, wav2vec2-base,
DETR-ResNet-50, T5-small widths), saved with random weights and a processor made in code as a ``save_pretrained``
folder. The same folder is exported by ``python -m fx2onnx export FOLDER --out OUT`` (no flag) and by
``optimum-cli export onnx --model FOLDER --task TASK OUT`` in optimum's own environment
(:mod:`fx2onnx.testing.optimum_env`: optimum-onnx pins transformers 4.57). Both results are then run here by
onnxruntime on the same inputs: the first output of each against the eager model (transformers, float32), and the
latency (median of the runs, warm; the two tools' runs in turns) at 1 and 2 intra-op threads for a batch of 1 and of 8
(texts of 128 tokens, 224x224 images, 1 s of 16 kHz audio, 800x800 images for DETR; T5: its encoder); at 1 thread
also the CPU time of a run (``cpu_ms``), which the other jobs of a loaded machine disturb less. Export times are
wall-clock seconds of each command (each includes its own check against PyTorch); the files size counts every
``.onnx`` and external data file written::

    nice -n 10 python bench/bench_optimum_tasks.py --json _doc/bench/optimum_tasks.json

The JSON keeps the date, the machine, the versions and the command beside the rows; a page renders it.
"""

from __future__ import annotations

import argparse
import glob
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

#: name -> (model class, optimum's task, what the processor reads, the ONNX file measured in our folder, optimum's)
MODELS = {
    "bert-base": ("BertForSequenceClassification", "text-classification", "text", "onnx/model.onnx", "model.onnx"),
    "minilm-l6": ("BertModel", "feature-extraction", "text", "onnx/model.onnx", "model.onnx"),
    "vit-base": ("ViTForImageClassification", "image-classification", "image", "onnx/model.onnx", "model.onnx"),
    "wav2vec2-base": ("Wav2Vec2ForCTC", "automatic-speech-recognition", "audio", "onnx/model.onnx", "model.onnx"),
    "detr-resnet-50": ("DetrForObjectDetection", "object-detection", "detection", "onnx/model.onnx", "model.onnx"),
    "t5-small": ("T5ForConditionalGeneration", "text2text-generation-with-past", "t5", "onnx/encoder_model.onnx",
                 "encoder_model.onnx"),
}
#: the measured settings
THREADS, BATCHES = (1, 2), (1, 8)
#: the pause before each run: onnxruntime's worker threads spin a while after a run ends; without the pause the other
#: tool's run starts while they still hold a core (measured: wav2vec2-base, 2 threads, batch 1, 45 ms alone, 59-71 ms
#: right after the other session's run)
SETTLE_SECONDS = 0.05
#: the most rounds of runs a latency takes (each tool once a round), within the budget
ROUNDS = 10


def config_of(name: str):
    """The published configuration of ``name``, written here (no download)."""
    import transformers

    if name == "bert-base":
        return transformers.BertConfig(num_labels=2)
    if name == "minilm-l6":
        return transformers.BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                       intermediate_size=1536)
    if name == "vit-base":
        return transformers.ViTConfig(num_labels=1000)
    if name == "wav2vec2-base":
        return transformers.Wav2Vec2Config(vocab_size=32, pad_token_id=0)
    if name == "detr-resnet-50":  # transformers' ResNet-50 as the backbone (optimum's environment has no timm)
        backbone = transformers.ResNetConfig(out_features=["stage4"])
        return transformers.DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False,
                                       backbone_config=backbone, num_labels=91)
    if name == "t5-small":
        return transformers.T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128,
                                     decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    raise ValueError(name)


def write_folder(name: str, folder: str) -> None:
    """The model of ``name`` (random weights, seeded) and its processor, saved in ``folder``."""
    import torch
    import transformers

    from fx2onnx.testing.encoder_folder import bert_tokenizer, ctc_processor
    from fx2onnx.testing.tokenizer import tiny_tokenizer

    class_name, _, kind, _, _ = MODELS[name]
    config = config_of(name)
    config.architectures = [class_name]
    torch.manual_seed(0)
    model = getattr(transformers, class_name)(config).eval()
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(folder)
    if kind == "text":
        bert_tokenizer().save_pretrained(folder)
    elif kind == "image":
        transformers.ViTImageProcessor(size={"height": 224, "width": 224}).save_pretrained(folder)
    elif kind == "detection":
        transformers.DetrImageProcessor(size={"shortest_edge": 800, "longest_edge": 1333}).save_pretrained(folder)
    elif kind == "audio":  # the published wav2vec2-base's extractor returns no attention mask (group norm model)
        processor = ctc_processor(folder)
        processor.feature_extractor.return_attention_mask = False
        processor.save_pretrained(folder)
    else:
        tiny_tokenizer().save_pretrained(folder)
        model.generation_config.save_pretrained(folder)


def feeds_of(kind: str, batch: int) -> dict[str, np.ndarray]:
    """Every input either model may ask, for a batch of ``batch``."""
    rng = np.random.default_rng(0)
    if kind in ("text", "t5"):
        ids = rng.integers(5, 100, (batch, 128)).astype(np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    if kind == "audio":
        values = rng.standard_normal((batch, 16000)).astype(np.float32)
        return {"input_values": values, "attention_mask": np.ones(values.shape, dtype=np.int64)}
    side = 800 if kind == "detection" else 224
    pixels = rng.standard_normal((batch, 3, side, side)).astype(np.float32)
    return {"pixel_values": pixels, "pixel_mask": np.ones((batch, side, side), dtype=np.int64)}


def session(path: str, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


#: onnxruntime's input types
TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32, "tensor(bool)": np.bool_}


def run(sess, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs of ``sess`` on the inputs it asks, each in the type it takes (a mask in int32 or int64)."""
    return sess.run(None, {i.name: feeds[i.name].astype(TYPES.get(i.type, feeds[i.name].dtype))
                           for i in sess.get_inputs()})


def latencies(paths: dict[str, str], kind: str, threads: int, batch: int, budget: float,
              rounds: int = ROUNDS) -> dict[str, tuple[float, float | None]]:
    """Each tool's median seconds of a run, wall clock and, at 1 thread, the CPU time of the calling thread
    (onnxruntime computes there: what other jobs on the machine take away from the wall clock does not count).
    The tools run in turns, one run each a round, the order reversed every other round (a load coming or going
    weighs on both alike), each run after a pause of ``SETTLE_SECONDS``: one warm-up run each, then up to ``rounds``
    rounds within ``budget`` seconds a tool (3 rounds at least)."""
    sessions = {tool: session(path, threads) for tool, path in paths.items()}
    feeds = feeds_of(kind, batch)
    for sess in sessions.values():
        run(sess, feeds)
    wall: dict[str, list[float]] = {tool: [] for tool in sessions}
    cpu: dict[str, list[float]] = {tool: [] for tool in sessions}
    begin = time.perf_counter()
    for r in range(rounds):
        if r >= 3 and time.perf_counter() - begin > budget * len(sessions):
            break
        for tool in (list(sessions) if r % 2 == 0 else list(reversed(sessions))):
            time.sleep(SETTLE_SECONDS)
            t0, c0 = time.perf_counter(), time.thread_time()
            run(sessions[tool], feeds)
            wall[tool].append(time.perf_counter() - t0)
            cpu[tool].append(time.thread_time() - c0)
    return {tool: (float(np.median(wall[tool])), float(np.median(cpu[tool])) if threads == 1 else None)
            for tool in sessions}


def eager_difference(folder: str, name: str, paths: dict[str, str]) -> dict[str, float]:
    """The max abs difference of each tool's first output to the eager model's on a batch of 1."""
    import torch
    import transformers

    class_name, _, kind, _, _ = MODELS[name]
    model = getattr(transformers, class_name).from_pretrained(folder, dtype=torch.float32).eval()
    feeds = feeds_of(kind, 1)
    with torch.no_grad():
        if kind == "t5":
            expected = model.encoder(input_ids=torch.from_numpy(feeds["input_ids"]),
                                     attention_mask=torch.from_numpy(feeds["attention_mask"]))[0]
        else:
            accepted = set(inspect.signature(model.forward).parameters)
            expected = model(**{k: torch.from_numpy(v) for k, v in feeds.items() if k in accepted})[0]
    result = {}
    for tool, path in paths.items():
        got = run(session(path, 2), feeds)[0]
        result[tool] = float(np.abs(got - expected.numpy()).max()) if got.shape == expected.shape else float("nan")
    return result


def files_size(folder: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "**", "*"), recursive=True)
               if p.endswith((".onnx", ".onnx_data", ".onnx.data", ".data")) and os.path.isfile(p))


def export(command: list[str], env: dict | None, timeout: float) -> tuple[float, str | None]:
    """The wall seconds of ``command``, and the last line of its output when it fails."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t0, f"timeout after {timeout:.0f} s"
    seconds = time.perf_counter() - t0
    if done.returncode:
        lines = [x for x in (done.stderr + "\n" + done.stdout).splitlines() if x.strip()]
        error = next((x for x in lines if x.startswith("error:")), lines[-1] if lines else str(done.returncode))
        return seconds, error[:300]
    return seconds, None


def bench_one(name: str, budget: float, timeout: float, rounds: int = ROUNDS) -> dict:
    """The row of one model: both exports, their sizes, their difference to eager, their latencies."""
    from fx2onnx.testing.optimum_env import optimum_environment

    _, task, kind, ours_file, theirs_file = MODELS[name]
    row: dict = {"model": name, "task": task, "load_average": [round(os.getloadavg()[0], 1)]}
    work = tempfile.mkdtemp(prefix="fx2onnx-optimum-bench-")
    try:
        folder, ours, theirs = (os.path.join(work, n) for n in ("checkpoint", "ours", "optimum"))
        write_folder(name, folder)
        python, env = optimum_environment()
        seconds, error = export([sys.executable, "-m", "fx2onnx", "export", folder, "--out", ours], None, timeout)
        row["ours"] = {"export_seconds": round(seconds, 1), "error": error}
        cli = os.path.join(os.path.dirname(python), "optimum-cli")
        seconds, error = export([python, cli, "export", "onnx", "--model", folder, "--task", task, theirs], env,
                                timeout)
        row["optimum"] = {"export_seconds": round(seconds, 1), "error": error}
        paths = {tool: os.path.join(out, file) for tool, out, file in (("ours", ours, ours_file),
                                                                       ("optimum", theirs, theirs_file))
                 if not row[tool]["error"] and os.path.exists(os.path.join(out, file))}
        for tool, out in (("ours", ours), ("optimum", theirs)):
            row[tool]["files_mb"] = round(files_size(out) / 2**20, 1) if tool in paths else None
        for tool, diff in eager_difference(folder, name, paths).items():
            row[tool]["eager_max_abs_diff"] = diff
        for tool in paths:
            row[tool]["latency_ms"], row[tool]["cpu_ms"] = {}, {}
        for t in THREADS:
            for b in BATCHES:
                for tool, (seconds, cpu) in latencies(paths, kind, t, b, budget, rounds).items():
                    row[tool]["latency_ms"][f"t{t}_b{b}"] = round(1000 * seconds, 2)
                    if cpu is not None:
                        row[tool]["cpu_ms"][f"t{t}_b{b}"] = round(1000 * cpu, 2)
    except Exception as e:  # noqa: BLE001 - a row per model
        row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row["load_average"].append(round(os.getloadavg()[0], 1))  # the machine's, at the start and at the end
    return row


def main(argv=None) -> list[dict]:
    from fx2onnx.runner import sweep_context
    from fx2onnx.testing.optimum_env import OPTIMUM_PINS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=None, help="comma-separated names of " + ", ".join(MODELS))
    parser.add_argument("--json", default=None, help="the rows and their context written there")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of runs per latency (3 runs at least)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="the most rounds of runs a latency takes")
    parser.add_argument("--timeout", type=float, default=1500.0, help="seconds per export")
    parser.add_argument("--note", default=None, help="how the machine was while measuring, kept in the JSON")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(MODELS)
    kept: dict[str, dict] = {}
    note = args.note
    if args.json and os.path.exists(args.json):
        with open(args.json, encoding="utf-8") as f:
            previous = json.load(f)
        kept = {r["model"]: r for r in previous["rows"]}
        note = note or previous.get("note")
    rows = []
    for name in names:
        row = bench_one(name, args.budget, args.timeout, args.rounds)
        print(json.dumps(row), flush=True)
        rows.append(row)
        kept[name] = row
        if args.json:
            given = argv if argv is not None else sys.argv[1:]
            command = " ".join("NOTE" if note and a == args.note else a for a in given)  # the note is kept apart
            document = {**sweep_context("nice -n 10 python bench/bench_optimum_tasks.py " + command), "optimum": OPTIMUM_PINS,
                **({"note": note} if note else {}), "rows": [kept[n] for n in MODELS if n in kept]}
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(document, f, indent=1)
                f.write("\n")
    return rows


if __name__ == "__main__":
    main()
