"""Stamped against whole captures of deep tiny folders whose layers repeat with a remainder or after a first block.

Gemma 3's layers repeat five sliding for one global: its 26 layers are four periods of six and two sliding layers
left, captured after the two captured periods (:attr:`fx2onnx.weights.repeat_layers.LayerStack.remainder`).
DeepSeek V3's ``first_k_dense_replace`` dense layers come before the mixtures of experts: captured as they are, the
repeated layers stamped after them (:attr:`~fx2onnx.weights.repeat_layers.LayerStack.start`). Each case writes a tiny
float32 folder (the architecture's default layer pattern for that count of layers), exports it with
:func:`fx2onnx.deploy.export_folder` twice, stamped and with ``capture_all_layers=True``, each in its own process
(peak resident memory of that process), both checked against eager; the stamped folder then generates greedily and
its tokens are compared with transformers' ``generate``::

    nice -n 10 python bench/bench_stamped_patterns.py --json _doc/bench/stamped_patterns.json

A row: the case, the layers captured, the export's seconds (up to the check against eager), the check's, the peak
memory, whether the checks passed and, for the stamped folder, whether the tokens equal transformers'.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time

PROMPT = "hello world, the exporter"
NEW_TOKENS = 8
#: model type, layers, config overrides
CASES = {
    "gemma3_text": (26, {}),
    "deepseek_v3": (6, {"first_k_dense_replace": 1}),
}


def write_folder(name: str, layers: int, overrides: dict, folder: str) -> None:
    """A tiny float32 checkpoint of ``name`` with ``layers`` layers in the default pattern of its configuration."""
    from fx2onnx.inputs.discover import discover_architectures, tiny_config
    from fx2onnx.testing.tokenizer import write_checkpoint_folder

    arch = next(a for a in discover_architectures(("causal",)) if a.name == name)
    config = tiny_config(arch, num_hidden_layers=layers, **overrides)
    default = type(config)(num_hidden_layers=layers)  # the layer pattern of the published defaults
    if isinstance(getattr(default, "layer_types", None), list):
        config.layer_types = list(default.layer_types)
    config.architectures = [arch.model_class().__name__]
    write_checkpoint_folder(config, folder, dtype="float32", std=0.3)


def export_one(checkpoint: str, out: str, whole: bool, queue) -> None:
    """Exports in this process and puts the row (times, captured layers, checks, peak memory) in ``queue``."""
    from fx2onnx.deploy import export_folder

    said: list[tuple[float, str]] = []
    begin = time.perf_counter()
    result = export_folder(checkpoint, out, capture_all_layers=whole,
                           log=lambda line: said.append((time.perf_counter() - begin, str(line))))
    total = time.perf_counter() - begin
    check_at = next((t for t, line in said if line.startswith("checking against eager")), total)
    captured = next((line.split(" of the")[0].replace("captured ", "") for _, line in said
                     if "others copied" in line), None)
    queue.put({"export_seconds": round(check_at, 1), "check_seconds": round(total - check_at, 1),
               "captured_layers": int(captured) if captured else None,
               "checks_ok": all(c.ok for c in result.checks),
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)})


def greedy_equal(checkpoint: str, out: str) -> bool:
    """Whether the exported folder's greedy tokens equal transformers' on the checkpoint."""
    import torch
    import transformers

    from fx2onnx.runtime.folder import FolderGenerator

    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    ids = transformers.AutoTokenizer.from_pretrained(checkpoint)(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    got = FolderGenerator(out).generate_text(PROMPT, max_new_tokens=NEW_TOKENS)
    return got.new_ids == expected[0, ids.shape[1]:].tolist()


def run_case(name: str) -> list[dict]:
    layers, overrides = CASES[name]
    work = tempfile.mkdtemp(prefix="fx2onnx-stamp-")
    rows = []
    try:
        checkpoint = os.path.join(work, "checkpoint")
        write_folder(name, layers, overrides, checkpoint)
        context = multiprocessing.get_context("spawn")
        for whole in (False, True):
            out = os.path.join(work, "whole" if whole else "stamped")
            queue = context.Queue()
            process = context.Process(target=export_one, args=(checkpoint, out, whole, queue))
            process.start()
            row = {"case": name, "layers": layers, **{k: v for k, v in overrides.items()},
                   "capture": "whole" if whole else "stamped", **queue.get()}
            process.join()
            if not whole:
                row["greedy_equal"] = greedy_equal(checkpoint, out)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def main(argv=None) -> list[dict]:
    from fx2onnx.runner import sweep_context

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=None, help="comma-separated cases of " + ", ".join(CASES))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(CASES)
    rows = [row for name in names for row in run_case(name)]
    if args.json:
        document = {**sweep_context("nice -n 10 python bench/bench_stamped_patterns.py " + " ".join(
            argv if argv is not None else sys.argv[1:])),
            "load_average": [round(x, 1) for x in os.getloadavg()], "rows": rows}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=1)
            f.write("\n")
    return rows


if __name__ == "__main__":
    main()
