"""What the capture check costs, and what it flags, on the supported-models zoo.

``to_onnx`` runs the exported program against eager on the example inputs after torch.export
(``check_capture=True``, the default; :mod:`fx2onnx.convert.capture_check`). For each architecture
of the text zoo (tiny configs, seeded weights, with or without a cache) this script exports once
with ``to_onnx`` as the zoo does, times the check apart (the function wrapped) and prints one
row: the whole export, the check, its share, and whether it flagged the capture.

    python bench/bench_capture_check.py --limit 30            # the first 30 architectures
    python bench/bench_capture_check.py --only 'llama|gemma' --cache
"""

from __future__ import annotations

import argparse
import re
import time
import warnings

import torch


def measure(name: str, cache: bool) -> dict:
    """One architecture exported by ``to_onnx`` with the check on; the check's time measured apart."""
    import fx2onnx
    from fx2onnx.convert import capture_check
    from fx2onnx.inputs.discover import get_architecture
    from fx2onnx.zoo.zoo_inputs import build_zoo_model
    from fx2onnx.patches import torch_export_patches

    spent = []
    original = capture_check.check_capture

    def timed(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - begin)

    row = dict(architecture=name, cache=cache, export=None, check=None, result="")
    try:
        zoo = build_zoo_model(get_architecture(name), with_cache=cache)
        capture_check.check_capture = timed
        begin = time.perf_counter()
        with torch_export_patches(patch_transformers=True), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fx2onnx.to_onnx(zoo.model, (), zoo.copy_inputs(0), dynamic_shapes=zoo.dynamic_shapes)
        row["export"] = time.perf_counter() - begin
        row["result"] = "ok" if spent else "not run"
    except capture_check.CaptureMismatchError as e:
        row["result"] = "FLAGGED: " + str(e).splitlines()[0][:80]
    except Exception as e:  # noqa: BLE001 - a failing export is a row, not the end of the sweep
        row["result"] = f"export failed: {type(e).__name__}"
    finally:
        capture_check.check_capture = original
    row["check"] = sum(spent) if spent else None
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=20, help="the first N architectures of the zoo")
    parser.add_argument("--only", default=None, help="a regular expression on the architecture names")
    parser.add_argument("--cache", action="store_true", help="the decoders with their cache")
    args = parser.parse_args(argv)
    from fx2onnx.zoo.architectures import select_architectures

    names = select_architectures()
    if args.only:
        names = [n for n in names if re.search(args.only, n)]
    rows = [measure(name, args.cache) for name in names[: args.limit]]
    print(f"{'architecture':<28} {'export s':>9} {'check s':>8} {'share':>6}  result")
    for r in rows:
        share = f"{r['check'] / r['export']:.0%}" if r["check"] and r["export"] else "-"
        export = f"{r['export']:.2f}" if r["export"] else "-"
        check = f"{r['check']:.2f}" if r["check"] is not None else "-"
        print(f"{r['architecture']:<28} {export:>9} {check:>8} {share:>6}  {r['result']}")
    done = [r for r in rows if r["export"] and r["check"]]
    if done:
        total, checked = sum(r["export"] for r in done), sum(r["check"] for r in done)
        print(f"{len(done)} exports checked: {checked:.1f} s of {total:.1f} s ({checked / total:.1%}); "
              f"flagged: {sum(r['result'].startswith('FLAGGED') for r in rows)}")
    return rows


if __name__ == "__main__":
    main()
