"""Command line of fx2onnx: ``python -m fx2onnx <command> ...``.

Commands are argparse subcommands; each one is a function ``_cmd_<name>(args)``
registered in :func:`make_parser`. Today: ``scenarios``.

.. code-block:: bash

    python -m fx2onnx scenarios --out scenarios_out --workers 2
    python -m fx2onnx scenarios --out out --cases OneTensor CondOnValue --exporters custom dynamo
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def _cmd_scenarios(args: argparse.Namespace) -> int:
    from .scenarios.build import build_pages
    from .scenarios.report import summary
    from .scenarios.report import load_rows

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


def make_parser() -> argparse.ArgumentParser:
    """The parser with one subparser per command."""
    parser = argparse.ArgumentParser(prog="python -m fx2onnx", description="fx2onnx command line")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    from .scenarios.run import EXPORTERS

    scn = commands.add_parser(
        "scenarios",
        help="run the scenario zoo and write its rst pages",
        description="Exports every scenario with every exporter (static and dynamic), checks the "
        "results against eager, writes index.rst, the tables, the details and summary.png.",
    )
    scn.add_argument("--out", required=True, help="folder receiving the pages and rows.json")
    scn.add_argument("--cases", nargs="*", help="case names (default: all)")
    scn.add_argument("--exporters", nargs="*", choices=list(EXPORTERS), help="exporters (default: all)")
    scn.add_argument("--workers", type=int, default=2, help="worker processes (0: in this process)")
    scn.add_argument("--timeout", type=float, default=180.0, help="seconds before a task is killed")
    scn.add_argument("--no-cache", action="store_true", help="run again even if the sources did not change")
    scn.set_defaults(func=_cmd_scenarios)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parses ``argv`` and runs the command; returns the exit code."""
    args = make_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
