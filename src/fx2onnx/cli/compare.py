"""``python -m fx2onnx compare A.onnx B.onnx``: two ONNX files compared result by result."""

from __future__ import annotations

import argparse
from typing import Any

from .common import MODEL_HELP, add_model_arguments


def run(args: argparse.Namespace) -> int:
    import onnx

    from .. import compare_onnx_execution
    from ..model_spec import load_model_spec, random_feeds
    from ..validation import make_feeds

    dims = {}
    for item in args.dim or []:
        name, _, value = item.partition("=")
        if not value.isdigit():
            raise ValueError(f"--dim expects name=value with an integer value, not {item!r}.")
        dims[name] = int(value)
    model1 = onnx.load(args.onnx1)
    if args.model:
        spec = load_model_spec(args.model, with_cache=args.with_cache)
        feeds = make_feeds(model1, spec.args, spec.kwargs)
    else:
        feeds = random_feeds(model1, dims, seed=args.seed)
    result = compare_onnx_execution(model1, args.onnx2, feeds, atol=args.atol, rtol=args.rtol)
    print(result.summary())
    first = result.first_divergence
    if first is None:
        return 0
    row = result.rows[first]
    print(f"first divergence: row {first}, {row.op_type1} {row.name1!r} vs {row.op_type2} {row.name2!r}, "
          f"max abs diff {row.max_abs_diff:g}")
    print(result.to_text(start=max(0, first - args.context), max_rows=2 * args.context + 1))
    return 1


def add_parser(commands: Any) -> None:
    """Adds the command to the subparsers ``commands``."""
    cmp = commands.add_parser(
        "compare",
        help="compare two ONNX files result by result",
        description="Runs both models on the same inputs, aligns every intermediate result "
        "(fx2onnx.compare_onnx_execution) and prints the first divergence. Exit code 1 when the "
        "values diverge. Inputs come from --model, or are random with --dim name=value sizes.",
    )
    cmp.add_argument("onnx1", help="the first ONNX file (its inputs define the feeds)")
    cmp.add_argument("onnx2", help="the second ONNX file")
    cmp.add_argument("--model", help="take the inputs of this model: " + MODEL_HELP)
    cmp.add_argument("--dim", action="append", help="random inputs: size of a named dimension, name=value (default 3)")
    cmp.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    cmp.add_argument("--context", type=int, default=3, help="rows shown around the first divergence")
    add_model_arguments(cmp)
    cmp.set_defaults(func=run)
