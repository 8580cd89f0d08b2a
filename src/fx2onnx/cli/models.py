"""``python -m fx2onnx models``: every discovered transformers architecture exported (the supported-models rows)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_zoo_arguments


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..zoo.report import summary, write_page
    from ..zoo.architectures import ROWS_FILE, build_rows, select_architectures, skipped_architectures

    rows_path = Path(args.out) / ROWS_FILE
    rows, meta = build_rows(
        rows_path, only=args.only, exporters=args.exporters or None, workers=args.workers,
        timeout=args.timeout, use_cache=not args.no_cache, missing_only=args.missing,
        generate_missing=args.generate_missing,
    )
    print(f"{meta['computed']} rows computed in {meta['duration']:.0f} s; {len(rows)} rows in {rows_path}")
    if args.page:
        write_page(rows, meta, args.page, skipped_architectures(), select_architectures())
        print(f"page written in {args.page}")
    for t in summary(rows):
        cache = "cache" if t["cache"] else "no cache"
        print(f"  {t['exporter']:<8} {cache:<9} run {t['run']:>3} captured {t['captured']:>3} "
              f"exported {t['exported']:>3} matched {t['matched']:>3}")
    return 0


def add_parser(commands: Any) -> None:
    """Adds the command to the subparsers ``commands``."""
    mdl = commands.add_parser(
        "models",
        help="export every discovered transformers architecture (the supported-models rows)",
        description="Builds a tiny model for every text architecture of transformers' auto mappings, "
        "exports it with each exporter without and with a cache, validates it on other shapes and "
        "merges the rows into a JSON file (the supported-models page is rendered from it).",
    )
    mdl.add_argument("--out", default="_doc/models", help="folder of the rows file rows.json, updated in place")
    mdl.add_argument("--page", help="folder receiving the page (index.rst, summary.png)")
    mdl.add_argument("--only", help="regular expression on the architecture names (model types)")
    add_zoo_arguments(mdl, exporters=["to_onnx", "dynamo"], timeout=300.0)
    mdl.add_argument("--missing", action="store_true", help="run only the rows absent from the rows file or killed by a timeout")
    mdl.add_argument("--generate-missing", action="store_true",
                     help="run only the decoders matched with a cache that have no generate column yet")
    mdl.set_defaults(func=run)
