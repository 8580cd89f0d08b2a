"""``python -m fx2onnx report MODEL --out report.csv``: every submodule exported on its own, one row each."""

from __future__ import annotations

import argparse
from typing import Any

from .common import MODEL_HELP, add_model_arguments


def run(args: argparse.Namespace) -> int:
    from ..inspect.report import deepest_failures, export_report, save_report
    from ..model_spec import load_model_spec

    spec = load_model_spec(args.model, with_cache=args.with_cache)
    rows = export_report(
        spec.model,
        spec.args,
        spec.kwargs,
        dynamic_shapes=None if args.static else spec.dynamic_shapes,
        exporter=args.exporter,
        strict=args.strict,
        patches=spec.is_transformers,
        max_depth=args.max_depth,
        atol=args.atol,
        rtol=args.rtol,
        progress=not args.no_progress,
    )
    save_report(rows, args.out)
    failing = deepest_failures(rows)
    ok = sum(r["status"] == "OK" for r in rows)
    print(f"{ok}/{len(rows)} submodules export; report written in {args.out}")
    for path in failing:
        row = next(r for r in rows if r["path"] == path)
        print(f"  {path or '<model>'} ({row['class']}): {row['status']}: {row['error']}")
    return 0 if not failing else 1


def add_parser(commands: Any) -> None:
    """Adds the command to the subparsers ``commands``."""
    rep = commands.add_parser(
        "report",
        help="export every submodule on its own and write the report",
        description="Runs the model once, records the inputs of every submodule, exports each one "
        "alone (torch.export, conversion, onnxruntime against eager) and writes one row per "
        "submodule (CSV, or markdown when --out ends with .md). Exit code 1 if a submodule fails.",
    )
    rep.add_argument("model", help=MODEL_HELP)
    rep.add_argument("--out", required=True, help="report file: .csv or .md")
    rep.add_argument("--exporter", default="to_onnx", choices=["to_onnx", "torch.export"])
    rep.add_argument("--max-depth", type=int, default=None, help="only submodules up to this depth")
    add_model_arguments(rep)
    rep.add_argument("--static", action="store_true", help="ignore the dynamic shapes")
    rep.add_argument("--strict", action="store_true", help="torch.export.export(strict=True)")
    rep.add_argument("--no-progress", action="store_true", help="no progress bar")
    rep.set_defaults(func=run)
