"""Every causal-LM architecture transformers lists, exported from a folder with its layers stamped.

For each architecture of :func:`fx2onnx.inputs.discover.discover_architectures` (kind ``causal``), a
tiny config with ``--layers`` layers is written as a bf16 ``save_pretrained`` folder and exported
with :func:`fx2onnx.deploy.export_folder` (its check against eager included). A row says whether the
layers were stamped (:mod:`fx2onnx.weights.repeat_layers`), why not when the export fell back to
a full capture, whether the check passed, and, for an export that failed, whether the full capture
(``capture_all_layers=True``) fails the same way (stamping is then not the cause).

``python bench/sweep_stamped_layers.py --json rows.json`` (about 15 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import tempfile
import time


def _first_line(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text[:300]}"


def sweep_row(arch, layers: int, timeout: int) -> dict:
    from fx2onnx.deploy import export_folder
    from fx2onnx.inputs.discover import tiny_config
    from fx2onnx.testing.tokenizer import write_checkpoint_folder

    row: dict = {"arch": arch.name}
    begin = time.perf_counter()
    work = tempfile.mkdtemp()
    signal.alarm(timeout)
    try:
        config = tiny_config(arch, num_hidden_layers=layers)
        config.architectures = [arch.model_class().__name__]
        checkpoint = os.path.join(work, "checkpoint")
        write_checkpoint_folder(config, checkpoint, dtype="bfloat16", std=0.3)
        lines: list[str] = []
        try:
            result = export_folder(checkpoint, os.path.join(work, "stamped"), log=lines.append)
        except Exception as e:  # noqa: BLE001 - a row per architecture
            row["error"] = _first_line(e)
            try:
                export_folder(checkpoint, os.path.join(work, "full"), capture_all_layers=True)
                row["error_full_capture"] = None
            except Exception as e2:  # noqa: BLE001
                row["error_full_capture"] = _first_line(e2)
        else:
            row["stamped"] = any("others copied" in line for line in lines)
            row["fallback"] = next((line for line in lines if "not copied" in line), "")
            row["checks_ok"] = all(c.ok for c in result.checks)
            if not row["checks_ok"]:
                row["check_lines"] = result.check_lines()
    except Exception as e:  # noqa: BLE001 - the config or the folder could not be written
        row["error"] = _first_line(e)
    finally:
        signal.alarm(0)
        shutil.rmtree(work, ignore_errors=True)
    row["seconds"] = round(time.perf_counter() - begin, 1)
    return row


def summary(rows: list[dict]) -> str:
    exported = [r for r in rows if "error" not in r]
    stamped = [r for r in exported if r["stamped"]]
    return (f"{len(rows)} architectures, {len(exported)} exported, {len(stamped)} stamped "
            f"({sum(r['checks_ok'] for r in stamped)} equal to eager), "
            f"{sum(bool(r['fallback']) for r in exported)} fell back to a full capture, "
            f"{sum(1 for r in rows if 'error_full_capture' in r and r['error_full_capture'] is None)} failures due to "
            f"stamping (the full capture exports)")


def main(argv=None) -> list[dict]:
    from fx2onnx.inputs.discover import discover_architectures

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=6, help="layers of each tiny model (three periods of 2)")
    parser.add_argument("--timeout", type=int, default=240, help="seconds per architecture")
    parser.add_argument("--only", default=None, help="comma-separated model types")
    parser.add_argument("--json", default=None, help="the rows written there")
    args = parser.parse_args(argv)

    def timed_out(*_):
        raise TimeoutError(f"over {args.timeout} s")

    signal.signal(signal.SIGALRM, timed_out)
    only = set(args.only.split(",")) if args.only else None
    rows = []
    for arch in discover_architectures(("causal",)):
        if arch.skip or (only and arch.name not in only):
            continue
        rows.append(sweep_row(arch, args.layers, args.timeout))
        print(json.dumps(rows[-1]), flush=True)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(rows, f, indent=1)
    print(summary(rows))
    return rows


if __name__ == "__main__":
    main()
