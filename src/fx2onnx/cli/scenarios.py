"""``python -m fx2onnx scenarios``: the scenario zoo run and its pages written."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_zoo_arguments


def run(args: argparse.Namespace) -> int:
    from ..scenarios.build import build_pages
    from ..scenarios.report import summary
    from ..scenarios.report import load_rows

    meta = build_pages(
        args.out,
        cases=args.cases or None,
        exporters=args.exporters or None,
        workers=args.workers,
        timeout=args.timeout,
        use_cache=not args.no_cache,
    )
    rows, _ = load_rows(f"{args.out}/rows.json")
    origin = "reused from the cache" if meta.get("cached") else f"in {meta['duration']:.0f} s"
    print(f"{meta['tasks']} tasks {origin}; pages written in {args.out}")
    for t in summary(rows):
        print(
            f"  {t['exporter']:<24} static {t['static_ok']:>3}/{t['static_total']:<3} "
            f"dynamic {t['dynamic_ok']:>3}/{t['dynamic_total']:<3}"
        )
    return 0


def add_parser(commands: Any) -> None:
    """Adds the command to the subparsers ``commands``."""
    from ..scenario_exporters import EXPORTERS

    scn = commands.add_parser(
        "scenarios",
        help="run the scenario zoo and write its rst pages",
        description="Exports every scenario with every exporter (static and dynamic), checks the "
        "results against eager, writes index.rst, the tables, the details and summary.png.",
    )
    scn.add_argument("--out", required=True, help="folder receiving the pages and rows.json")
    scn.add_argument("--cases", nargs="*", help="case names (default: all)")
    add_zoo_arguments(scn, exporters=list(EXPORTERS), timeout=180.0)
    scn.set_defaults(func=run)
