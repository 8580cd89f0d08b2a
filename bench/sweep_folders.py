"""Every causal-LM class transformers lists, from a tiny folder to generated tokens, against transformers' greedy ones.

For each architecture of :func:`fx2onnx.inputs.discover.discover_architectures` (kind ``causal``: the model types
of ``MODEL_FOR_CAUSAL_LM_MAPPING``), a tiny configuration with ``--layers`` layers is written as a float32
``save_pretrained`` folder with a tokenizer (:func:`fx2onnx.testing.tokenizer.write_checkpoint_folder`; its buffers
hold what the model computes, :func:`computed_buffers`, as a real checkpoint's do), exported
as a user does (``python -m fx2onnx export FOLDER --out OUT``, no flag: the check against eager included), then the
folder generates greedily with :class:`fx2onnx.runtime.folder.FolderGenerator` and its tokens are compared with
``model.generate(..., do_sample=False)`` of transformers on the same checkpoint. A row says the step reached
(``config``, ``export``, ``generate``, ``compare``), whether the layers were stamped, and the one-line reason of a
failure (the ``error:`` line the command prints for a refused folder). Where transformers.js lists the model type,
the folder also generates in transformers.js (Node); a folder whose ``fx2onnx.json`` says transformers.js cannot feed
its cache is not run there, its row holds that reason (``transformersjs_refused``).

The rows run with :func:`fx2onnx.runner.run_tasks` (one worker, one process per row, a per-row timeout)::

    nice -n 10 python bench/sweep_folders.py --json _doc/bench/causal_folders.json

The JSON keeps the date, the machine, the versions and the command beside the rows; the models page renders it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

PROMPT = "hello world, the exporter"
NEW_TOKENS = 8
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the Node client generating greedily with transformers.js on an exported folder
TRANSFORMERSJS = os.path.join(ROOT, "tests", "clients", "transformersjs_generate.mjs")
REGISTRY = os.path.join(ROOT, "node_modules", "@huggingface", "transformers", "src", "models", "registry.js")


def transformersjs_types(registry: str = REGISTRY) -> set[str]:
    """The model types transformers.js loads with ``AutoModelForCausalLM`` (its ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``
    in the installed package); empty where the package or Node is missing."""
    if not os.path.exists(registry) or shutil.which("node") is None:
        return set()
    with open(registry, encoding="utf-8") as f:
        text = f.read()
    block = re.search(r"MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = new Map\(\[(.*?)\]\);", text, re.S)
    return set(re.findall(r"\[\s*'([^']+)'\s*,", block.group(1))) if block else set()


def transformersjs_tokens(folder: str, ids: list[int], timeout: int = 240) -> list[int] | str:
    """transformers.js' greedy new tokens after ``ids`` on the exported folder, or the line saying why it failed."""
    try:
        done = subprocess.run(["node", TRANSFORMERSJS, folder, json.dumps(ids), str(NEW_TOKENS)], capture_output=True,
                              text=True, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"transformers.js: no result after {timeout} s"
    if done.returncode != 0:
        # not the stack nor the source line Node quotes above the message (``throw new Error(``, ``^``)
        lines = [x.strip() for x in done.stderr.splitlines()
                 if x.strip() and not x.strip().startswith(("at ", "throw ", "^", "file://"))]
        error = next((x for x in lines if re.match(r"^[A-Za-z]*Error:", x)), None) or \
            next((x for x in lines if "Error" in x), lines[-1] if lines else f"exit {done.returncode}")
        return f"transformers.js: {error}"[:240]
    return json.loads(done.stdout.strip().splitlines()[-1])["new_ids"]


def transformersjs_folder_refusal(folder: str) -> str | None:
    """Why the exported folder says transformers.js cannot run it (``transformersjs`` in its ``fx2onnx.json``: a
    cache transformers.js feeds under other names), None where it does not say so."""
    with open(os.path.join(folder, "fx2onnx.json"), encoding="utf-8") as f:
        return json.load(f).get("transformersjs")


def _one_line(text: str, limit: int = 240) -> str:
    """The line saying why an export failed: its ``error:`` line, else a check's mismatch, else the last line
    which is not a progress bar."""
    lines = [line.strip() for line in str(text).splitlines()
             if line.strip() and "it/s]" not in line and not re.search(r"\d%\|", line)]
    line = next((x for x in lines if x.startswith("error:")), None) or \
        next((x for x in lines if "MISMATCH" in x), lines[-1] if lines else "")
    return line[:limit]


def _error(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}"[:240]


def computed_buffers(checkpoint: str) -> list[str]:
    """Writes into a random checkpoint's ``model.safetensors`` the buffers its model computes (returns their names).

    A random checkpoint gives every tensor random values, buffers included: MiniMax's decay factors and slopes
    (its prefill reads the decay factors, its decoding step the slopes: random ones disagree, a folder starting
    its recurrent state at zeros then differs from eager), Zaya's router biases (``from_pretrained`` sets the
    skip expert's to -1 over the checkpoint's value, the folder keeps the checkpoint's). A checkpoint of a real
    model holds them as its model computes them: the values the model's own initialization gives."""
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    path = os.path.join(checkpoint, "model.safetensors")
    if not os.path.exists(path):  # a sharded checkpoint: not a tiny one
        return []
    config = transformers.AutoConfig.from_pretrained(checkpoint)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = getattr(transformers, config.architectures[0])._from_config(config, dtype=torch.float32)
    buffers = dict(model.named_buffers())
    tensors = load_file(path)
    changed = [name for name, value in tensors.items() if name in buffers and value.is_floating_point()
               and buffers[name].shape == value.shape and not torch.equal(buffers[name].to(value.dtype), value)]
    if changed:
        tensors.update({name: buffers[name].to(tensors[name].dtype).contiguous() for name in changed})
        save_file(tensors, path, metadata={"format": "pt"})
    return changed


def run_one(task: tuple[str, int]) -> dict:
    """The row of one architecture: export its tiny folder, generate, compare with transformers."""
    import torch
    import transformers

    from fx2onnx.__main__ import main as cli
    from fx2onnx.inputs.discover import discover_architectures, tiny_config
    from fx2onnx.runtime.folder import FolderGenerator
    from fx2onnx.testing.tokenizer import write_checkpoint_folder

    name, layers = task
    arch = next(a for a in discover_architectures(("causal",)) if a.name == name)
    row: dict = {"arch": name, "step": "config"}
    begin = time.perf_counter()
    work = tempfile.mkdtemp(prefix="fx2onnx-sweep-")
    try:
        row["class"] = arch.model_class().__name__
        config = tiny_config(arch, num_hidden_layers=layers)
        config.architectures = [row["class"]]
        checkpoint, out = os.path.join(work, "checkpoint"), os.path.join(work, "exported")
        write_checkpoint_folder(config, checkpoint, dtype="float32", std=0.3)
        computed_buffers(checkpoint)
        row["step"] = "export"
        stdout, stderr = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = cli(["export", checkpoint, "--out", out])
            except SystemExit as e:
                code = e.code
        row["export_seconds"] = round(time.perf_counter() - t0, 1)
        printed = stdout.getvalue() + "\n" + stderr.getvalue()
        row["stamped"] = "others copied" in printed
        if code != 0:
            row["error"] = _one_line(printed)
            return row
        row["step"] = "generate"
        model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
        ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
        got = FolderGenerator(out).generate_text(PROMPT, max_new_tokens=NEW_TOKENS)
        row["step"] = "compare"
        try:
            with torch.no_grad():
                expected = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
        except Exception as e:  # noqa: BLE001 - transformers' own generate fails: the reference is missing
            row["error"] = f"transformers' generate fails: {_error(e)}"
            return row
        expected_new = expected[0, ids.shape[1]:].tolist()
        row["equal"] = got.prompt_ids == ids[0].tolist() and got.new_ids == expected_new
        if not row["equal"]:
            first = next((i for i, (a, b) in enumerate(zip(got.new_ids, expected_new)) if a != b), None)
            row["error"] = (f"tokens differ from transformers' at new token {first}" if first is not None
                            else f"{len(got.new_ids)} new tokens instead of {len(expected_new)}")
        refused = transformersjs_folder_refusal(out)
        if config.model_type in transformersjs_types() and refused:  # the folder does not promise it to it
            row["transformersjs_refused"] = refused
        elif config.model_type in transformersjs_types():
            js = transformersjs_tokens(out, ids[0].tolist())
            row["transformersjs"] = js == expected_new
            if isinstance(js, str):
                row["transformersjs_error"] = js
            elif js != expected_new:
                first = next((i for i, (a, b) in enumerate(zip(js, expected_new)) if a != b), len(js))
                row["transformersjs_error"] = f"transformers.js' tokens differ from transformers' at new token {first}"
    except Exception as e:  # noqa: BLE001 - a row per architecture
        row["error"] = _error(e)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if "error" in row:
            row["error"] = row["error"].replace(work, "FOLDER")
        row["seconds"] = round(time.perf_counter() - begin, 1)
    return row


def failed_row(task: tuple[str, int], step: str, error: str, elapsed: float) -> dict:
    """The row of an architecture whose process timed out or crashed."""
    return {"arch": task[0], "step": step, "error": f"{step}: {error}"[:240], "seconds": round(elapsed, 1)}


def summary(rows: list[dict]) -> dict:
    """The counts: rows, folders exported, folders generating transformers' tokens."""
    return {"architectures": len(rows), "exported": sum(r.get("step") in ("generate", "compare") for r in rows),
            "equal": sum(bool(r.get("equal")) for r in rows),
            "stamped": sum(bool(r.get("stamped")) for r in rows),
            "transformersjs_run": sum("transformersjs" in r for r in rows),
            "transformersjs_equal": sum(bool(r.get("transformersjs")) for r in rows),
            "transformersjs_refused": sum("transformersjs_refused" in r for r in rows)}



def main(argv=None) -> list[dict]:
    from fx2onnx.inputs.discover import discover_architectures
    from fx2onnx.runner import run_tasks, sweep_context

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=6, help="layers of each tiny model (three periods of 2)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per architecture")
    parser.add_argument("--only", default=None, help="comma-separated model types")
    parser.add_argument("--json", default=None, help="the rows and their context written there")
    parser.add_argument("--merge", action="store_true", help="replace only the rows run in an existing --json")
    parser.add_argument("--resume", action="store_true", help="keep the rows of an existing --json, run the others")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    every = [a for a in discover_architectures(("causal",)) if not a.skip]
    archs = [a for a in every if not only or a.name in only]
    previous: list[dict] = []
    notes = None  # what the JSON says about how its rows were run, kept by a merge
    if (args.merge or args.resume) and args.json and os.path.exists(args.json):
        with open(args.json, encoding="utf-8") as f:
            document = json.load(f)
        previous, notes = document["rows"], document.get("notes")
    kept = {r["arch"]: r for r in previous}
    if args.resume:
        archs = [a for a in archs if a.name not in kept]

    def save(rows: list[dict]) -> None:
        nonlocal notes
        if not args.json:
            return
        merged = dict(kept)
        if (args.merge or args.resume) and os.path.exists(args.json):  # the rows another run wrote meanwhile kept
            with open(args.json, encoding="utf-8") as f:
                current = json.load(f)
            merged = {r["arch"]: r for r in current["rows"]}
            notes = current.get("notes", notes)
        merged.update({r["arch"]: r for r in rows})
        ordered = sorted(merged.values(), key=lambda r: r["arch"])
        document = {
            **sweep_context("nice -n 10 python bench/sweep_folders.py " + " ".join(
                argv if argv is not None else sys.argv[1:])),
            "layers": args.layers, "new_tokens": NEW_TOKENS, "classes": len(every),
            "summary": summary(ordered), "rows": ordered, **({"notes": notes} if notes else {}),
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=1)
            f.write("\n")

    done: list[dict] = []

    def on_row(row: dict) -> None:
        done.append(row)
        print(json.dumps(row), flush=True)
        save(done)

    rows = run_tasks([(a.name, args.layers) for a in archs], run_one, failed_row, workers=args.workers,
                     timeout=args.timeout, on_row=on_row, description="causal folders", memory_gb=48)
    save(rows)
    print(json.dumps(summary(rows)))
    return rows


if __name__ == "__main__":
    main()
